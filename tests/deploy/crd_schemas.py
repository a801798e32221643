"""JSON Schema subsets of the custom resources the chart renders.

``kubernetes-validate`` ships schemas for built-in kinds only, so the chart's custom
resources are checked against these hand-written subsets of the published CRDs. Each
schema covers the fields the chart renders, with the constraints the CRD declares
(required fields, types, string-only maps, duration patterns); fields the chart never
emits are allowed but not checked. Sources (read, then restated here):

* PrometheusRule: prometheus-operator ``example/prometheus-operator-crd/
  monitoring.coreos.com_prometheusrules.yaml`` (operator 0.82).
* ServiceMonitor: prometheus-operator ``example/prometheus-operator-crd/
  monitoring.coreos.com_servicemonitors.yaml`` (Endpoint, RelabelConfig, Duration types).
* ScaledObject / TriggerAuthentication: KEDA ``config/crd/bases/keda.sh_scaledobjects.yaml``
  and ``keda.sh_triggerauthentications.yaml`` (keda.sh/v1alpha1), plus the Kafka scaler's
  documented metadata keys (keda.sh/docs, "Apache Kafka" scaler).
"""

from __future__ import annotations

from typing import Any

# prometheus-operator's monitoringv1.Duration kubebuilder pattern.
DURATION = (
    r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?"
    r"(([0-9]+)ms)?)$"
)
_STRING_MAP: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}
_METADATA: dict[str, Any] = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
        "labels": _STRING_MAP,
        "annotations": _STRING_MAP,
    },
}

_RELABEL: dict[str, Any] = {
    "type": "object",
    "properties": {
        "sourceLabels": {
            "type": "array",
            "items": {"type": "string", "pattern": r"^[a-zA-Z_][a-zA-Z0-9_]*$"},
        },
        "separator": {"type": "string"},
        "targetLabel": {"type": "string"},
        "regex": {"type": "string"},
        "modulus": {"type": "integer"},
        "replacement": {"type": "string"},
        "action": {
            "enum": [
                "replace", "Replace", "keep", "Keep", "drop", "Drop", "hashmod", "HashMod",
                "labelmap", "LabelMap", "labeldrop", "LabelDrop", "labelkeep", "LabelKeep",
                "lowercase", "Lowercase", "uppercase", "Uppercase", "keepequal", "KeepEqual",
                "dropequal", "DropEqual",
            ]
        },
    },
    "additionalProperties": False,
}

SERVICE_MONITOR: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": _METADATA,
        "spec": {
            "type": "object",
            "required": ["selector"],
            "properties": {
                "jobLabel": {"type": "string", "minLength": 1},
                "selector": {
                    "type": "object",
                    "properties": {"matchLabels": _STRING_MAP},
                },
                "namespaceSelector": {
                    "type": "object",
                    "properties": {
                        "any": {"type": "boolean"},
                        "matchNames": {"type": "array", "items": {"type": "string"}},
                    },
                    "additionalProperties": False,
                },
                "endpoints": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
                            "interval": {"type": "string", "pattern": DURATION},
                            "scrapeTimeout": {"type": "string", "pattern": DURATION},
                            "honorLabels": {"type": "boolean"},
                            "relabelings": {"type": "array", "items": _RELABEL},
                            "metricRelabelings": {"type": "array", "items": _RELABEL},
                        },
                    },
                },
            },
        },
    },
}

PROMETHEUS_RULE: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": _METADATA,
        "spec": {
            "type": "object",
            "properties": {
                "groups": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {
                            "name": {"type": "string", "minLength": 1},
                            "interval": {"type": "string", "pattern": DURATION},
                            "labels": _STRING_MAP,
                            "limit": {"type": "integer"},
                            "query_offset": {"type": "string", "pattern": DURATION},
                            "rules": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["expr"],
                                    "properties": {
                                        "record": {"type": "string"},
                                        "alert": {"type": "string"},
                                        "expr": {"type": ["string", "integer"]},
                                        "for": {"type": "string", "pattern": DURATION},
                                        "keep_firing_for": {
                                            "type": "string", "minLength": 1, "pattern": DURATION,
                                        },
                                        "labels": _STRING_MAP,
                                        "annotations": _STRING_MAP,
                                    },
                                    # Exactly one of record / alert (the CRD's documented rule).
                                    "oneOf": [{"required": ["record"]}, {"required": ["alert"]}],
                                    "additionalProperties": False,
                                },
                            },
                        },
                        "additionalProperties": False,
                    },
                },
            },
        },
    },
}

_INT32: dict[str, Any] = {"type": "integer", "minimum": 0, "maximum": 2**31 - 1}

# The Kafka scaler's metadata keys (trigger metadata is map[string]string in the CRD).
KAFKA_SCALER_KEYS = frozenset({
    "bootstrapServers", "consumerGroup", "topic", "lagThreshold", "activationLagThreshold",
    "offsetResetPolicy", "allowIdleConsumers", "scaleToZeroOnInvalidOffset",
    "excludePersistentLag", "limitToPartitionsWithLag", "partitionLimitation", "version",
    "sasl", "tls",
})

SCALED_OBJECT: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "metadata": _METADATA,
        "spec": {
            "type": "object",
            "required": ["scaleTargetRef", "triggers"],
            "properties": {
                "scaleTargetRef": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "name": {"type": "string"},
                        "envSourceContainerName": {"type": "string"},
                    },
                    "additionalProperties": False,
                },
                "pollingInterval": _INT32,
                "cooldownPeriod": _INT32,
                "idleReplicaCount": _INT32,
                "minReplicaCount": _INT32,
                "maxReplicaCount": _INT32,
                "fallback": {
                    "type": "object",
                    "required": ["failureThreshold", "replicas"],
                    "properties": {"failureThreshold": _INT32, "replicas": _INT32},
                },
                "triggers": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["type", "metadata"],
                        "properties": {
                            "type": {"type": "string"},
                            "name": {"type": "string"},
                            "metadata": {
                                "type": "object",
                                "additionalProperties": {"type": "string"},
                                "propertyNames": {"enum": sorted(KAFKA_SCALER_KEYS)},
                                "required": ["bootstrapServers", "consumerGroup"],
                            },
                            "authenticationRef": {
                                "type": "object",
                                "required": ["name"],
                                "properties": {
                                    "name": {"type": "string"},
                                    "kind": {
                                        "enum": [
                                            "TriggerAuthentication",
                                            "ClusterTriggerAuthentication",
                                        ]
                                    },
                                },
                                "additionalProperties": False,
                            },
                            "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                        },
                        "additionalProperties": False,
                    },
                },
            },
        },
    },
}

# The Kafka scaler's authentication parameters (TriggerAuthentication `parameter` names).
KAFKA_AUTH_PARAMETERS = frozenset({
    "sasl", "username", "password", "tls", "ca", "cert", "key", "keyPassword",
})

TRIGGER_AUTHENTICATION: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "TriggerAuthentication"},
        "metadata": _METADATA,
        "spec": {
            "type": "object",
            "properties": {
                "secretTargetRef": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["parameter", "name", "key"],
                        "properties": {
                            "parameter": {"enum": sorted(KAFKA_AUTH_PARAMETERS)},
                            "name": {"type": "string"},
                            "key": {"type": "string"},
                        },
                        "additionalProperties": False,
                    },
                },
            },
        },
    },
}

CRD_SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): SERVICE_MONITOR,
    ("monitoring.coreos.com/v1", "PrometheusRule"): PROMETHEUS_RULE,
    ("keda.sh/v1alpha1", "ScaledObject"): SCALED_OBJECT,
    ("keda.sh/v1alpha1", "TriggerAuthentication"): TRIGGER_AUTHENTICATION,
}
