"""scripts/manage_topics.py against a real local Kafka broker."""

from __future__ import annotations

import io
import subprocess
import sys
import uuid

import pytest

from scripts.manage_topics import ExistingTopic, KafkaTopics, TopicSpec, plan, reconcile
from simulator.kafka_config import connection_settings
from tests.conftest import REPO

HOUR_MS = 3_600_000


def spec(name: str, partitions: int = 3, retention_hours: int = 24) -> TopicSpec:
    # One broker here: replication factor 1 (the declared topics of real environments use 3).
    return TopicSpec(name, partitions, 1, retention_hours * HOUR_MS)


def test_plan_covers_every_difference():
    specs = [spec("new"), spec("same"), spec("grow", 6), spec("shrink", 2), spec("retain", 3, 48)]
    existing = {
        "same": ExistingTopic("same", 3, 1, 24 * HOUR_MS),
        "grow": ExistingTopic("grow", 3, 1, 24 * HOUR_MS),
        "shrink": ExistingTopic("shrink", 3, 1, 24 * HOUR_MS),
        "retain": ExistingTopic("retain", 3, 3, 24 * HOUR_MS),
    }
    actions = [(c.topic.name, c.action) for c in plan(specs, existing)]
    assert actions == [
        ("new", "create"),
        ("same", "unchanged"),
        ("grow", "add-partitions"),
        ("shrink", "cannot-reconcile"),
        ("retain", "cannot-reconcile"),
        ("retain", "set-retention"),
    ]


@pytest.fixture
def topics(kafka_broker) -> KafkaTopics:
    settings = connection_settings(
        kafka_broker.bootstrap_servers, security_protocol="PLAINTEXT", region=None, client_id="test"
    )
    return KafkaTopics(settings, timeout_s=30)


@pytest.mark.integration
def test_reconcile_creates_then_updates_then_changes_nothing(topics):
    name = f"topics-{uuid.uuid4().hex[:8]}"
    out = io.StringIO()
    assert reconcile(topics, [spec(name, 3, 24)], dry_run=False, out=out) == 0
    assert f"{name}: create: 3 partitions, RF 1" in out.getvalue()
    assert topics.describe([name]) == {name: ExistingTopic(name, 3, 1, 24 * HOUR_MS)}

    out = io.StringIO()
    assert reconcile(topics, [spec(name, 5, 48)], dry_run=True, out=out) == 0
    assert f"{name}: would add-partitions: 3 -> 5 partitions" in out.getvalue()
    assert topics.describe([name])[name].partitions == 3  # dry run changed nothing

    assert reconcile(topics, [spec(name, 5, 48)], dry_run=False, out=io.StringIO()) == 0
    assert topics.describe([name]) == {name: ExistingTopic(name, 5, 1, 48 * HOUR_MS)}

    out = io.StringIO()
    assert reconcile(topics, [spec(name, 5, 48)], dry_run=False, out=out) == 0
    assert out.getvalue() == f"{name}: unchanged: 5 partitions, RF 1\n"

    out = io.StringIO()
    assert reconcile(topics, [spec(name, 2, 48)], dry_run=False, out=out) == 1
    assert "Kafka cannot remove partitions" in out.getvalue()


def run_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "scripts/manage_topics.py", *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )


@pytest.mark.integration
def test_command_dry_run_shows_the_declared_topics(kafka_broker):
    result = run_script(
        "--env", "dev", "--bootstrap-servers", kafka_broker.bootstrap_servers,
        "--security-protocol", "PLAINTEXT", "--dry-run",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "telemetry: would create: 12 partitions, RF 3\n"


@pytest.mark.integration
def test_command_reports_a_refusal_from_kafka_in_one_line(kafka_broker):
    # dev declares replication factor 3; a single broker refuses it.
    result = run_script(
        "--env", "dev", "--bootstrap-servers", kafka_broker.bootstrap_servers, "--security-protocol", "PLAINTEXT"
    )
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: create telemetry failed:") and "replication factor" in line.lower()


def test_unknown_environment_is_one_line():
    result = run_script("--env", "qa", "--bootstrap-servers", "127.0.0.1:1", "--security-protocol", "PLAINTEXT")
    assert result.returncode == 2
    assert result.stderr.strip() == "error: unknown environment 'qa'; known environments: dev, prod, staging"


@pytest.mark.integration
def test_unreachable_cluster_is_one_line():
    result = run_script(
        "--env", "dev", "--bootstrap-servers", "127.0.0.1:1", "--security-protocol", "PLAINTEXT", "--timeout", "3"
    )
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: cannot reach the cluster:")
