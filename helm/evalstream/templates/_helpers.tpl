{{/* Chart name, overridable. */}}
{{- define "evalstream.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full resource name: release-chart unless the release name already holds the chart name. */}}
{{- define "evalstream.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "evalstream.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels every object carries. */}}
{{- define "evalstream.labels" -}}
helm.sh/chart: {{ include "evalstream.chart" . }}
{{ include "evalstream.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: worker
{{- end }}

{{/* The stable subset used in selectors (never add a label that changes between upgrades). */}}
{{- define "evalstream.selectorLabels" -}}
app.kubernetes.io/name: {{ include "evalstream.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "evalstream.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "evalstream.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The metrics/health port, taken from the evalstream config so they cannot disagree. */}}
{{- define "evalstream.port" -}}
{{- dig "server" "port" 9464 .Values.config | int }}
{{- end }}

{{/* The worker's drain timeout (config.worker.shutdown_timeout_s, default 25 s). */}}
{{- define "evalstream.shutdownTimeout" -}}
{{- dig "worker" "shutdown_timeout_s" 25 .Values.config | float64 | ceil | int }}
{{- end }}

{{/*
Grace period: the drain timeout + 15 s, or an explicit value checked to be at least that.
After the drain the worker flushes results, commits and closes within 12 s of its own
(app/shutdown.py, up to ~13.5 s with each step's minimum): killed before, the drained
work is neither durable nor committed, and is evaluated again.
*/}}
{{- define "evalstream.terminationGracePeriod" -}}
{{- $drain := include "evalstream.shutdownTimeout" . | int }}
{{- $least := add $drain 15 }}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds }}
{{- $least }}
{{- else }}
{{- $grace := .Values.terminationGracePeriodSeconds | int }}
{{- if lt $grace $least }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must be at least config.worker.shutdown_timeout_s + 15 (%d): the worker drains in-flight work for up to %d s, then takes up to ~13 s more to flush results, commit offsets and close; killed sooner, the drained work is evaluated again" $grace $least $drain) }}
{{- end }}
{{- $grace }}
{{- end }}
{{- end }}

{{/* Replica cap for KEDA: never more consumers than partitions (extra ones sit idle). */}}
{{- define "evalstream.kedaMaxReplicas" -}}
{{- $k := .Values.autoscaling.keda }}
{{- min ($k.maxReplicaCount | int) ($k.partitions | int) }}
{{- end }}

{{/*
Guards that turn a dangerous values combination into a render error with advice.
Included once, from the Deployment.
*/}}
{{- define "evalstream.validate" -}}
{{- $cfg := .Values.config | default dict }}
{{- $kafka := get $cfg "kafka" | default dict }}
{{- if hasKey $kafka "sasl_password" }}
{{- fail "config.kafka.sasl_password must not be in values (it would land in a ConfigMap): set secrets.kafkaSasl.existingSecret instead" }}
{{- end }}
{{- if hasKey $kafka "ssl_password" }}
{{- fail "config.kafka.ssl_password must not be in values (it would land in a ConfigMap): mount the passphrase from a Secret and set config.kafka.ssl_password_file, or set EVALSTREAM_KAFKA__SSL_PASSWORD from a Secret in extraEnv" }}
{{- end }}
{{- $extra := get $kafka "extra" }}
{{- if kindIs "map" $extra }}
{{- range (list "sasl_plain_password" "sasl_oauth_token_provider") }}
{{- if hasKey $extra . }}
{{- fail (printf "config.kafka.extra.%s must not be in values (it would land in a ConfigMap): set secrets.kafkaSasl.existingSecret (or config.kafka.sasl_password_file with a mounted Secret) instead" .) }}
{{- end }}
{{- end }}
{{- end }}
{{- $protocol := get $kafka "security_protocol" | default "PLAINTEXT" }}
{{- if and (hasPrefix "SASL" $protocol) (not .Values.secrets.kafkaSasl.existingSecret) (not (get $kafka "sasl_password_file")) }}
{{- fail (printf "config.kafka.security_protocol is %s: set secrets.kafkaSasl.existingSecret (or config.kafka.sasl_password_file with a mounted Secret)" $protocol) }}
{{- end }}
{{- $envs := list }}
{{- range .Values.secrets.judgeApiKeys }}
{{- if not (and .env .existingSecret .key) }}
{{- fail "each secrets.judgeApiKeys entry needs env, existingSecret and key" }}
{{- end }}
{{- $envs = append $envs .env }}
{{- end }}
{{- range .Values.extraEnv }}
{{- $envs = append $envs .name }}
{{- end }}
{{- range $name, $judge := (get $cfg "judges" | default dict) }}
{{- if kindIs "map" $judge }}
{{- if hasKey $judge "api_key" }}
{{- fail (printf "config.judges.%s.api_key must not be in values: use api_key_env plus secrets.judgeApiKeys" $name) }}
{{- end }}
{{- if regexMatch "^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*@" (get $judge "base_url" | toString) }}
{{- fail (printf "config.judges.%s.base_url holds user info (user@ or user:password@), which would land in a ConfigMap: send the key with api_key_env and api_key_header (secrets.judgeApiKeys) instead" $name) }}
{{- end }}
{{- /* A header or query parameter named like a key. A subset of the worker's own check
(config/loading.py), which refuses these at start-up, after the ConfigMap holds them:
a key word standing alone in the name, or ending it, once an idempotency or cache key
suffix (an id, not a credential) is cut off; and Azure's sig and code parameters. */}}
{{- range $field := list "headers" "query" }}
{{- $items := get $judge $field }}
{{- if kindIs "map" $items }}
{{- range $item, $_ := $items }}
{{- $n := regexReplaceAll "(idempotency|cache)[-_]?key$" (lower $item) "" }}
{{- $word := regexMatch "(^|[^a-z0-9])(api_?key|key|token|secret|pass|passwd|password|auth|authorization|creds?|credentials?)([^a-z0-9]|$)" $n }}
{{- $suffix := regexMatch "(key|token|secret|password|passwd)$" $n }}
{{- $azure := and (eq $field "query") (regexMatch "^(sig|code)$" $n) }}
{{- if or $word $suffix $azure }}
{{- fail (printf "config.judges.%s.%s %q holds a key, which would land in a ConfigMap: send it with api_key_env and api_key_header (secrets.judgeApiKeys), or set EVALSTREAM_JUDGES__%s__%s as JSON from a Secret (extraEnv valueFrom)" $name $field $item (upper $name) (upper $field)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- $env := get $judge "api_key_env" }}
{{- /* extraEnvFrom's keys are unknown at render time: trust it to provide the variable. */}}
{{- if and $env (not (has $env $envs)) (not $.Values.extraEnvFrom) }}
{{- fail (printf "config.judges.%s.api_key_env is %s but no secrets.judgeApiKeys entry (or extraEnv item, or extraEnvFrom source) provides it" $name $env) }}
{{- end }}
{{- end }}
{{- end }}
{{- /* Probes and scrapes reach the pod IP: the server must listen on every interface. */}}
{{- $server := get $cfg "server" | default dict }}
{{- if hasKey $server "host" }}
{{- $host := get $server "host" | toString }}
{{- if not (has $host (list "0.0.0.0" "::" "")) }}
{{- fail (printf "config.server.host is %q: the kubelet's probes and Prometheus connect to the pod IP, so the server must listen on all interfaces (0.0.0.0; \"::\" on IPv6-only clusters) or the pod is never ready and restarts" $host) }}
{{- end }}
{{- end }}
{{- if and .Values.autoscaling.keda.enabled .Values.autoscaling.hpa.enabled }}
{{- fail "enable at most one of autoscaling.keda and autoscaling.hpa: both would fight over spec.replicas" }}
{{- end }}
{{- range $label := list "app.kubernetes.io/name" "app.kubernetes.io/instance" }}
{{- if hasKey ($.Values.podLabels | default dict) $label }}
{{- fail (printf "podLabels must not set %s: the chart sets it, and the Deployment's selector, Service, PDB and ServiceMonitor select the pods by it" $label) }}
{{- end }}
{{- end }}
{{- with .Values.serviceMonitor }}
{{- /* Either left empty: Prometheus's global setting, unknown here. */}}
{{- if and .enabled .interval .scrapeTimeout (gt (include "evalstream.durationMs" .scrapeTimeout | int64) (include "evalstream.durationMs" .interval | int64)) }}
{{- fail (printf "serviceMonitor.scrapeTimeout (%s) exceeds serviceMonitor.interval (%s): Prometheus refuses such a scrape config, and nothing would scrape the workers" .scrapeTimeout .interval) }}
{{- end }}
{{- end }}
{{- include "evalstream.validateEnvOverrides" . }}
{{- end }}

{{/* A Prometheus duration (1m30s, 500ms) in milliseconds; the CRD checks its form. */}}
{{- define "evalstream.durationMs" -}}
{{- $ms := dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000 "d" 86400000 "w" 604800000 "y" 31536000000 }}
{{- $total := 0 }}
{{- range regexFindAll "[0-9]+(ms|y|w|d|h|m|s)" (toString .) -1 }}
{{- $total = add $total (mul (regexFind "^[0-9]+" . | int64) (get $ms (regexFind "(ms|y|w|d|h|m|s)$" .))) }}
{{- end }}
{{- $total }}
{{- end }}

{{/*
extraEnv must not override a setting the chart renders from config: the pod would follow
the variable and the chart's objects the file (a moved port fails every probe). Variable
names are case-insensitive, and a whole section as JSON (EVALSTREAM_SERVER='{"port":
9100}') is merged key by key, so it counts when its JSON holds the key; one whose value
comes from a Secret or ConfigMap cannot be seen, and neither can extraEnvFrom's keys.
Each entry: section, key ("" for the whole section), what the chart renders from it.
*/}}
{{- define "evalstream.validateEnvOverrides" -}}
{{- $read := list (list "server" "port" "the container port the probes, Service and scrapes use")
  (list "server" "host" "its all-interfaces check")
  (list "worker" "shutdown_timeout_s" "terminationGracePeriodSeconds") }}
{{- if .Values.autoscaling.keda.enabled }}
{{- range (list "bootstrap_servers" "group_id" "auto_offset_reset" "security_protocol" "sasl_mechanism" "ssl_cafile" "ssl_certfile" "ssl_keyfile") }}
{{- $read = append $read (list "kafka" . "the KEDA ScaledObject's triggers") }}
{{- end }}
{{- $read = append $read (list "inputs" "" "the KEDA ScaledObject's triggers") }}
{{- end }}
{{- range (.Values.extraEnv | default list) }}
{{- $name := .name | toString | upper }}
{{- $json := dict }}
{{- if kindIs "string" .value }}
{{- $json = fromJson .value }}
{{- end }}
{{- range $read }}
{{- $section := index . 0 }}
{{- $key := index . 1 }}
{{- $path := trimSuffix "." (printf "config.%s.%s" $section $key) }}
{{- $leaf := and $key (eq $name (printf "EVALSTREAM_%s__%s" $section $key | upper)) }}
{{- $whole := and (eq $name (printf "EVALSTREAM_%s" $section | upper)) (or (not $key) (hasKey $json $key)) }}
{{- if or $leaf $whole }}
{{- fail (printf "extraEnv %s overrides %s, which the chart also reads for %s: the pod and the chart would disagree; set %s in values instead" $name $path (index . 2) $path) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* Environment: credentials from existing Secrets only, then the operator's extras. */}}
{{- define "evalstream.env" -}}
{{- with .Values.secrets.kafkaSasl }}
{{- if .existingSecret }}
- name: EVALSTREAM_KAFKA__SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret }}
      key: {{ .passwordKey }}
{{- if .usernameKey }}
- name: EVALSTREAM_KAFKA__SASL_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret }}
      key: {{ .usernameKey }}
{{- end }}
{{- end }}
{{- end }}
{{- range .Values.secrets.judgeApiKeys }}
- name: {{ .env }}
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret }}
      key: {{ .key }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
`evalstream join-labels` (labelsJoiner). Its pods carry an app.kubernetes.io/name of their
own (<name>-labels), so no worker selector (Service, PDB, ServiceMonitor, topology spread;
all match name + instance) selects them, and the worker Deployment's immutable selector
stays as it was.
*/}}
{{- define "evalstream.labelsJoiner.name" -}}
{{- printf "%s-labels" (include "evalstream.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "evalstream.labelsJoiner.fullname" -}}
{{- printf "%s-labels" (include "evalstream.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "evalstream.labelsJoiner.selectorLabels" -}}
app.kubernetes.io/name: {{ include "evalstream.labelsJoiner.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "evalstream.labelsJoiner.labels" -}}
helm.sh/chart: {{ include "evalstream.chart" . }}
{{ include "evalstream.labelsJoiner.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: labels-joiner
app.kubernetes.io/part-of: {{ include "evalstream.name" . }}
{{- end }}

{{/*
The joiner reads the labels topic named by config.labels.topic. The app defaults it to
evalstream.labels, but the chart asks for it explicitly: a joiner on a topic nobody writes
to looks healthy and counts nothing. An environment override (extraEnv
EVALSTREAM_LABELS__TOPIC or EVALSTREAM_LABELS, or any extraEnvFrom source, whose keys the
chart cannot see) satisfies the check.
*/}}
{{- define "evalstream.labelsJoiner.validate" -}}
{{- $labels := get (.Values.config | default dict) "labels" | default dict }}
{{- $fromEnv := not (empty .Values.extraEnvFrom) }}
{{- range (.Values.extraEnv | default list) }}
{{- if has (.name | toString) (list "EVALSTREAM_LABELS__TOPIC" "EVALSTREAM_LABELS") }}
{{- $fromEnv = true }}
{{- end }}
{{- end }}
{{- if not (kindIs "map" $labels) }}
{{- $labels = dict }}
{{- end }}
{{- if and (not (get $labels "topic")) (not $fromEnv) }}
{{- fail "labelsJoiner.enabled but config.labels.topic is not set: name the topic your annotation tool publishes human labels to (config.labels.topic; the joiner would otherwise read evalstream.labels, which may be empty, and count nothing), or provide EVALSTREAM_LABELS__TOPIC through extraEnv/extraEnvFrom" }}
{{- end }}
{{- end }}
