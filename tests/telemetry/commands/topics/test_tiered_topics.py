"""`telemetry topics` on a cluster with tiered storage (cdk.json `msk.tiered_storage`; staging and
prod), against a real Kafka broker that has remote log storage on, as MSK's StorageMode TIERED
turns it on (devtools/local-kafka/tiered-storage.properties; the remote tier is Kafka's own
LocalTieredStorage). Kafka itself validates what the declaration sets: remote.storage.enable,
local.retention.ms and local.retention.bytes against retention.ms and retention.bytes
(LogConfig.validateRemoteStorageRetentionSize/Time)."""

from __future__ import annotations

import dataclasses
import io
import time
import uuid

import pytest

from devtools import local_kafka
from stacks.config import ConfigError, load_environment
from telemetry.commands.topics import KafkaTopics, TopicError, declared_environment, reconcile
from tests.conftest import cdk_context

pytestmark = pytest.mark.integration
HOUR_MS = 3_600_000


@pytest.fixture(scope="module")
def tiered_broker(tmp_path_factory):
    state = tmp_path_factory.mktemp("tiered-kafka")
    broker = local_kafka.start_broker(state_dir=state, tiered_storage=True)
    try:
        yield broker
    finally:
        local_kafka.stop_broker(state)


@pytest.fixture
def topics(tiered_broker) -> KafkaTopics:
    return KafkaTopics({"bootstrap.servers": tiered_broker.bootstrap_servers}, 30)


def settled(topics: KafkaTopics, spec) -> dict:
    """The topic's declared configurations once the broker's metadata shows what was just written
    (KRaft answers CreateTopics and IncrementalAlterConfigs once the controller has committed them;
    the broker serving the next request applies the record a moment later)."""
    deadline = time.monotonic() + 10
    while True:
        found = topics.describe([spec.name], sorted(spec.configs())).get(spec.name)
        configs = {} if found is None else {key: found.configs()[key] for key in spec.configs()}
        if configs == spec.configs() or time.monotonic() > deadline:
            return configs
        time.sleep(0.1)


def prod_topic(name: str):
    """prod's declared topic, under a fresh name, with one replica (one broker here)."""
    (declared,) = declared_environment("prod").topics
    return dataclasses.replace(declared, name=name, partitions=3, replication_factor=1)


def test_prods_topic_is_created_tiered_and_a_second_run_changes_nothing(topics):
    spec = prod_topic(f"tiered-{uuid.uuid4().hex[:8]}")
    out = io.StringIO()
    assert reconcile(topics, [spec], dry_run=False, out=out) == 0
    assert out.getvalue() == f"{spec.name}: create: 3 partitions, RF 1\n"
    found = settled(topics, spec)
    assert found == spec.configs()
    assert found["remote.storage.enable"] == "true" and found["local.retention.ms"] == str(12 * HOUR_MS)

    out = io.StringIO()
    assert reconcile(topics, [spec], dry_run=False, out=out) == 0
    assert out.getvalue() == f"{spec.name}: unchanged: 3 partitions, RF 1\n"


def test_a_topic_made_before_tiering_is_moved_onto_it_and_its_guard_moves_to_the_local_log(topics):
    """An environment that turns tiered storage on: its topic has the retention.bytes guard of a
    topic kept on the brokers; the next run tiers it and bounds only what stays local."""
    tiered = prod_topic(f"moved-{uuid.uuid4().hex[:8]}")
    local = dataclasses.replace(tiered, local_retention_ms=None, segment_bytes=None)
    assert reconcile(topics, [local], dry_run=False, out=io.StringIO()) == 0
    assert settled(topics, local) == local.configs()

    out = io.StringIO()
    assert reconcile(topics, [tiered], dry_run=True, out=out) == 0
    planned = out.getvalue()
    assert planned.startswith(f"{tiered.name}: would set-configs: ")
    assert f"retention.bytes {tiered.retention_bytes} -> -1" in planned
    assert "remote.storage.enable false -> true" in planned
    assert f"local.retention.bytes -2 -> {tiered.retention_bytes}" in planned  # -2: follow retention.bytes

    assert reconcile(topics, [tiered], dry_run=False, out=io.StringIO()) == 0
    assert settled(topics, tiered) == tiered.configs()


def test_kafka_refuses_a_local_retention_above_the_topics_and_so_does_the_configuration(topics):
    """What Kafka would refuse at `telemetry topics` time, cdk.json refuses at synthesis."""
    spec = dataclasses.replace(prod_topic(f"refused-{uuid.uuid4().hex[:8]}"), local_retention_ms=200 * HOUR_MS)
    with pytest.raises(TopicError, match="local.retention.ms: Value must not be more than retention.ms"):
        reconcile(topics, [spec], dry_run=False, out=io.StringIO())

    environments = cdk_context()["environments"]
    prod = {**environments["prod"], "msk": {**environments["prod"]["msk"], "tiered_storage": {"local_retention_hours": 200}}}
    with pytest.raises(ConfigError, match="local_retention_hours 200 must be below topic 'telemetry''s retention_hours 168"):
        load_environment({**environments, "prod": prod}, "prod")
