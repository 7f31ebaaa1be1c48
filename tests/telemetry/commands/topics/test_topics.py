"""`telemetry topics` (telemetry/commands/topics.py) against a real local Kafka broker."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from devtools import local_kafka
from simulator.kafka_config import connection_settings
from telemetry import cli
from telemetry.commands.topics import (
    ExistingTopic,
    KafkaTopics,
    TopicError,
    TopicSpec,
    assume_topic_admin,
    declared_environment,
    msk_iam_token_callback,
    plan,
    reconcile,
)
from tests.conftest import REPO

HOUR_MS = 3_600_000
# The local broker's log.retention.bytes: what a topic created without its own reports.
BROKER_RETENTION_BYTES = int(local_kafka.broker_setting("log.retention.bytes"))


def spec(name: str, partitions: int = 3, retention_hours: int = 24, retention_bytes: int | None = None) -> TopicSpec:
    # One broker here: replication factor 1 (the declared topics of real environments use 3).
    return TopicSpec(name, partitions, 1, retention_hours * HOUR_MS, retention_bytes)


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
        ("retain", "set-configs"),
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
    assert topics.describe([name]) == {name: ExistingTopic(name, 3, 1, 24 * HOUR_MS, BROKER_RETENTION_BYTES)}

    out = io.StringIO()
    assert reconcile(topics, [spec(name, 5, 48)], dry_run=True, out=out) == 0
    assert f"{name}: would add-partitions: 3 -> 5 partitions" in out.getvalue()
    assert topics.describe([name])[name].partitions == 3  # dry run changed nothing

    assert reconcile(topics, [spec(name, 5, 48)], dry_run=False, out=io.StringIO()) == 0
    assert topics.describe([name]) == {name: ExistingTopic(name, 5, 1, 48 * HOUR_MS, BROKER_RETENTION_BYTES)}

    out = io.StringIO()
    assert reconcile(topics, [spec(name, 5, 48)], dry_run=False, out=out) == 0
    assert out.getvalue() == f"{name}: unchanged: 5 partitions, RF 1\n"

    out = io.StringIO()
    assert reconcile(topics, [spec(name, 2, 48)], dry_run=False, out=out) == 1
    assert "Kafka cannot remove partitions" in out.getvalue()


@pytest.mark.integration
def test_a_topic_made_between_the_read_and_the_create_is_reconciled_as_the_topic_it_is(kafka_broker, topics):
    """Another operator (or a broker that had not learned of a new topic when this run read it)
    makes CreateTopics answer TOPIC_ALREADY_EXISTS: the run takes the topic as it is and brings it
    to the declaration, where a failed create would have stopped it."""
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"topics-{uuid.uuid4().hex[:8]}"
    other = AdminClient({"bootstrap.servers": kafka_broker.bootstrap_servers})
    read = topics.describe

    def read_then_someone_creates(names, others=()):
        found = read(names, others)
        if name in names and name not in found:
            other.create_topics([NewTopic(name, 2, 1)])[name].result(30)
        return found

    topics.describe = read_then_someone_creates
    out = io.StringIO()
    assert reconcile(topics, [spec(name, 3, 24)], dry_run=False, out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0] == f"{name}: create: 3 partitions, RF 1"
    assert lines[1].startswith(f"{name}: it exists already"), lines
    assert f"{name}: add-partitions: 2 -> 3 partitions" in lines
    topics.describe = read
    assert topics.describe([name]) == {name: ExistingTopic(name, 3, 1, 24 * HOUR_MS, BROKER_RETENTION_BYTES)}


def test_the_retention_bytes_guard_is_set_on_create_and_reconciled_after(topics):
    """The guard that keeps brokers from filling (stacks/sizing.retention_bytes_guard): declared with
    the topic, read back from the broker, changed in place, then unchanged."""
    name = f"guarded-{uuid.uuid4().hex[:8]}"
    assert reconcile(topics, [spec(name, 3, 24, 5 * 2**30)], dry_run=False, out=io.StringIO()) == 0
    assert topics.describe([name])[name].retention_bytes == 5 * 2**30

    out = io.StringIO()
    assert reconcile(topics, [spec(name, 3, 24, 7 * 2**30)], dry_run=False, out=out) == 0
    assert f"{name}: set-configs: retention.bytes {5 * 2**30} -> {7 * 2**30}" in out.getvalue()
    # A KRaft broker answers DescribeConfigs from its metadata image, which takes the controller's
    # change a moment after IncrementalAlterConfigs returns: wait for it (at most 10 s).
    deadline = time.monotonic() + 10
    while topics.describe([name])[name].retention_bytes != 7 * 2**30 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert topics.describe([name])[name] == ExistingTopic(name, 3, 1, 24 * HOUR_MS, 7 * 2**30)

    out = io.StringIO()
    assert reconcile(topics, [spec(name, 3, 24, 7 * 2**30)], dry_run=False, out=out) == 0
    assert out.getvalue() == f"{name}: unchanged: 3 partitions, RF 1\n"


def test_every_declared_topic_carries_the_guard_sized_from_the_brokers_storage():
    from stacks.config import load_environment, read_environments
    from stacks.sizing import GUARD_PERCENT, retention_bytes_guard, segment_bytes

    for env in ("dev", "prod"):
        config = load_environment(read_environments(), env)
        (topic,) = config.msk.topics
        guard = retention_bytes_guard(config, topic)
        assert [s.retention_bytes for s in declared_environment(env).topics] == [guard]
        # Every replica on the fullest broker at the guard plus one open segment fits below 95% of
        # the largest volume storage auto scaling may grow to.
        replicas = -(-sum(t.partitions * t.replication_factor for t in config.msk.topics) // config.msk.broker_count)
        assert replicas * (guard + segment_bytes(config, topic)) <= (
            config.msk.storage_autoscaling_max_gib * 2**30 * GUARD_PERCENT / 100)
    # dev keeps its topic on the brokers: the guard is retention.bytes.
    (dev,) = declared_environment("dev").topics
    assert dev.configs() == {"retention.ms": str(24 * HOUR_MS), "retention.bytes": str(dev.retention_bytes)}
    # prod's topic is tiered: the guard bounds what stays on the brokers (local.retention.bytes),
    # the remote tier keeps the topic's whole retention, segments roll at 128 MiB.
    (prod,) = declared_environment("prod").topics
    assert prod.retention_bytes // 2**30 == 63
    assert prod.configs() == {
        "retention.ms": str(168 * HOUR_MS), "retention.bytes": "-1", "remote.storage.enable": "true",
        "local.retention.ms": str(12 * HOUR_MS), "local.retention.bytes": str(prod.retention_bytes),
        "segment.bytes": str(128 * 2**20),
    }


def run_script(*args: str) -> subprocess.CompletedProcess:
    """`telemetry topics`, the installed command, as an operator types it."""
    return subprocess.run(
        [str(Path(sys.executable).parent / "telemetry"), "topics", *args], cwd=REPO, capture_output=True, text=True,
        timeout=120,
    )


@pytest.mark.integration
def test_command_dry_run_shows_the_declared_topics(kafka_broker):
    result = run_script(
        "--env", "dev", "--bootstrap-servers", kafka_broker.bootstrap_servers,
        "--security-protocol", "PLAINTEXT", "--dry-run",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        "telemetry: would create: 12 partitions, RF 3\n"
        "acl User:iot-device-gateway: allow WRITE on topic telemetry: would create\n"
    )


@pytest.mark.integration
def test_a_dry_run_against_a_local_broker_lists_its_differences_as_json(kafka_broker, capsys):
    """The one dry run that reads something: a broker named on the command line, no AWS between."""
    from telemetry import cli

    assert cli.main(["topics", "--env", "dev", "--bootstrap-servers", kafka_broker.bootstrap_servers,
                     "--security-protocol", "PLAINTEXT", "--dry-run", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "environment": "dev", "dry_run": True, "brokers": kafka_broker.bootstrap_servers,
        "changes": ["telemetry: would create: 12 partitions, RF 3",
                    "acl User:iot-device-gateway: allow WRITE on topic telemetry: would create"],
        "cannot_reconcile": False,
    }


@pytest.mark.integration
def test_command_reports_a_refusal_from_kafka_in_one_line(kafka_broker):
    # dev declares replication factor 3; a single broker refuses it.
    result = run_script(
        "--env", "dev", "--bootstrap-servers", kafka_broker.bootstrap_servers, "--security-protocol", "PLAINTEXT"
    )
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("telemetry: error: create telemetry failed:") and "replication factor" in line.lower()


def test_unknown_environment_is_one_line(capsys):
    assert cli.main(["topics", "--env", "qa", "--bootstrap-servers", "127.0.0.1:1", "--security-protocol", "PLAINTEXT"]) == 2
    assert capsys.readouterr().err.strip() == (
        "telemetry: error: unknown environment 'qa'; known environments: dev, prod, staging")


@pytest.mark.integration
def test_unreachable_cluster_is_one_line():
    result = run_script(
        "--env", "dev", "--bootstrap-servers", "127.0.0.1:1", "--security-protocol", "PLAINTEXT", "--timeout", "3"
    )
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("telemetry: error: cannot reach the cluster:")


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (["--sasl-username", "ops"], "--sasl-username goes with --security-protocol SASL_PLAINTEXT, and only"),
        (["--security-protocol", "SASL_PLAINTEXT", "--bootstrap-servers", "127.0.0.1:1"],
         "--sasl-username goes with --security-protocol SASL_PLAINTEXT, and only"),
        (["--security-protocol", "SASL_PLAINTEXT", "--sasl-username", "ops", "--bootstrap-servers", "127.0.0.1:1"],
         "--security-protocol SASL_PLAINTEXT needs $SIMULATOR_SASL_PASSWORD"),
        (["--security-protocol", "PLAINTEXT", "--assume-role", "--bootstrap-servers", "127.0.0.1:1"],
         "--assume-role goes with --security-protocol SASL_SSL (MSK IAM), and only"),
        (["--here", "--mfa-serial", "arn:aws:iam::111111111111:mfa/ops"],
         "--mfa-serial goes with --assume-role (or with the default run on a fleet host)"),
        ([], "on a fleet host the work runs as the topic administrator role, which requires MFA: pass "
             "--mfa-serial ARN (or --here on a host in the VPC)"),
        (["--assume-role", "--mfa-serial", "arn:aws:iam::111111111111:mfa/ops"],
         "--assume-role goes with --here: on a fleet host the topic administrator role is always used"),
    ],
)
def test_bad_flag_combinations_are_one_line(flags, line, capsys):
    assert cli.main(["topics", "--env", "dev", *flags]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"telemetry: error: {line}"]


def stubbed_sts():
    import boto3
    from botocore.stub import Stubber

    client = boto3.client("sts", region_name="eu-west-1", aws_access_key_id="ambient", aws_secret_access_key="x")
    return client, Stubber(client)


ROLE_ARN = "arn:aws:iam::111111111111:role/telemetry-dev-msk-topic-admin"


def test_assume_role_asks_sts_for_the_topic_administrator_with_the_mfa_code(monkeypatch):
    monkeypatch.setattr("getpass.getuser", lambda: "jane doe")
    client, stubber = stubbed_sts()
    stubber.add_response(
        "assume_role",
        {
            "Credentials": {
                "AccessKeyId": "ASIATOPICADMIN000",
                "SecretAccessKey": "secret",
                "SessionToken": "token",
                "Expiration": "2030-01-01T00:00:00Z",
            }
        },
        {
            "RoleArn": ROLE_ARN,
            "RoleSessionName": "manage-topics-jane-doe",
            "SerialNumber": "arn:aws:iam::111111111111:mfa/jane",
            "TokenCode": "123456",
        },
    )
    with stubber:
        credentials = assume_topic_admin(
            declared_environment("dev"), "arn:aws:iam::111111111111:mfa/jane", read_code=lambda _: "123456", sts=client
        )
    stubber.assert_no_pending_responses()
    assert (credentials.access_key, credentials.token) == ("ASIATOPICADMIN000", "token")

    # MSK sees the assumed role: the IAM auth token is signed with its key, not the ambient one.
    import base64
    from urllib.parse import parse_qs, urlparse

    token, expiry = msk_iam_token_callback("eu-west-1", credentials)("")
    url = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    query = parse_qs(urlparse(url).query)
    assert query["Action"] == ["kafka-cluster:Connect"]
    assert query["X-Amz-Credential"][0].startswith("ASIATOPICADMIN000/")
    assert expiry > 0


def test_a_refused_assume_role_is_one_line_with_the_mfa_hint():
    client, stubber = stubbed_sts()
    stubber.add_client_error(
        "assume_role", "AccessDenied", "User: arn:aws:iam::111111111111:user/jane is not authorized to perform: sts:AssumeRole"
    )
    with stubber, pytest.raises(TopicError) as refused:
        assume_topic_admin(declared_environment("dev"), None, sts=client)
    assert str(refused.value) == (
        f"cannot assume {ROLE_ARN}: AccessDenied: User: arn:aws:iam::111111111111:user/jane is not authorized "
        "to perform: sts:AssumeRole (the role requires MFA: pass --mfa-serial)"
    )
