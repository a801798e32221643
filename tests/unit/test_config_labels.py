"""The ``labels:`` section (``evalstream join-labels``): its topic and group of its own."""

from __future__ import annotations

import pytest

from evalstream.config import load_settings
from evalstream.errors import ConfigError


def test_defaults() -> None:
    labels = load_settings(None).labels
    assert (labels.topic, labels.group_id, labels.retention_s) == ("evalstream.labels", "",
                                                                   3600.0)


@pytest.mark.parametrize(("sections", "group"), [
    ({"kafka": {"group_id": "g"}}, "g.labels"),
    ({"kafka": {"group_id": "g"}, "labels": {"group_id": "joiner"}}, "joiner"),
])
def test_the_joiners_group_is_its_own_else_derived_from_the_workers(
        sections: dict[str, object], group: str) -> None:
    assert load_settings(None, **sections).labels_group_id == group


@pytest.mark.parametrize(("sections", "named"), [
    ({"labels": {"topic": "evalstream.results"}}, "topics.results"),
    ({"labels": {"topic": "evalstream.dlq"}}, "topics.dead_letter"),
    ({"inputs": [{"topic": "a"}, {"topic": "b"}], "labels": {"topic": "a"}}, "input"),
    ({"labels": {"topic": "x y"}}, "not a valid Kafka topic name"),
    ({"kafka": {"group_id": "g"}, "labels": {"group_id": "g"}}, "kafka.group_id"),
    ({"labels": {"retention_s": 0}}, "labels.retention_s"),
    ({"labels": {"max_results": 0}}, "labels.max_results"),
])
def test_bad_labels_settings_name_the_field(sections: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(None, **sections)
    assert "labels" in str(info.value)
    assert named in str(info.value)
