"""The Flink sink job as its Managed Flink application's IAM role, against a broker that enforces
that role.

The role's kafka-cluster statements are read from the synthesized telemetry_sink template,
translated into Kafka ACLs by the MSK semantics table (tests/msk_authorization.py) and given to a
fresh SASL user of the policy-enforcing broker. The job then runs from properties built on the
application's own property groups in the template (topic, group.id, starting offsets), with only
the broker address, SASL_PLAINTEXT and that user changed, and local directories for S3: the same
KafkaSource code path it runs on AWS with MSK IAM. What this proves about MSK, and what not: see
tests/msk_authorization.py.

Driven from pytest (not JUnit) because the ACLs come from the Python translation of the template
and the broker with its identities is the session's `secured_kafka`; the job runs in its own JVM
(telemetry.sink.testing.SinkJobRun, a local MiniCluster) and reports a refused request as the
Kafka error; which IAM action that error means is decided here, not in the job.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from simulator.payload import TelemetryTemplate
from stacks.config import load_environment
from tests.conftest import REPO, cdk_context
from tests.msk_authorization import (
    Cluster,
    acls_for_grants,
    refusal_without,
    role_grants,
)

pytestmark = pytest.mark.integration
ENV = "dev"
MESSAGES = 300
PARTITIONS = 3

# The Kafka errors the job's KafkaSource can meet, with what it was doing (a phrase of the error
# chain SinkJobRun reports), and the MSK action each stands for ("Semantics of IAM authorization
# policy actions and resources"); the first matching row wins.
REFUSALS = [
    ("GroupAuthorizationException", "commit", "kafka-cluster:AlterGroup on group {group}"),
    ("GroupAuthorizationException", "", "kafka-cluster:DescribeGroup on group {group}"),
    ("TopicAuthorizationException", "SplitFetcher", "kafka-cluster:ReadData on topic {topic}"),
    ("TopicAuthorizationException", "", "kafka-cluster:DescribeTopic on topic {topic}"),
    ("ClusterAuthorizationException", "", "kafka-cluster:DescribeCluster on the cluster"),
]


def iam_action_for(failure: str, topic: str, group: str) -> str:
    """The IAM action a SinkJobRun failure line points at, or the line itself when none does."""
    for exception, doing, action in REFUSALS:
        if f"org.apache.kafka.common.errors.{exception}" in failure and doing in failure:
            return f"{failure} -> the identity lacks " + action.format(topic=topic, group=group)
    return failure


@pytest.fixture(scope="module")
def sink_role(synthesized):
    """The sink role's Kafka grants on the dev cluster, and the application's KafkaSource
    property group as the template hands it to the job."""
    config = load_environment(cdk_context()["environments"], ENV)
    cluster = Cluster.of(config)
    stacks = synthesized(ENV).stacks
    grants = role_grants(stacks, "telemetry_sink", "SinkServiceRole", cluster)
    (application,) = [
        r for r in stacks["telemetry_sink"]["Resources"].values()
        if r["Type"] == "AWS::KinesisAnalyticsV2::Application"
    ]  # fmt: skip
    groups = application["Properties"]["ApplicationConfiguration"]["EnvironmentProperties"]
    (kafka_source,) = [
        g["PropertyMap"] for g in groups["PropertyGroups"] if g["PropertyGroupId"] == "KafkaSource"
    ]
    return grants, kafka_source


def delete_topic(secured_kafka, topic: str) -> None:
    admin = secured_kafka.admin
    if topic in admin.list_topics(timeout=30).topics:
        admin.delete_topics([topic])[topic].result(timeout=30)
    deadline = time.monotonic() + 30
    while topic in admin.list_topics(timeout=30).topics:
        assert time.monotonic() < deadline, f"topic {topic} was not deleted"
        time.sleep(0.2)


@pytest.fixture
def topic_cleanup(secured_kafka, sink_role):
    """Leaves no topic behind: other modules create the same declared topic as the super user."""
    yield
    delete_topic(secured_kafka, sink_role[1]["topic"])


def fill_topic(secured_kafka, topic: str) -> None:
    """A fresh topic with MESSAGES simulator-format messages, as the super user (creating topics
    is the topic administrator's job, checked in test_topics_as_topic_admin.py)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic

    admin = secured_kafka.admin
    delete_topic(secured_kafka, topic)
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)
    template = TelemetryTemplate(
        run_id="sinkrole", producer_id="sink-it", process_index=0, devices=list(range(10)),
        message_bytes=300,
    )  # fmt: skip
    producer = Producer({**secured_kafka.broker.client_settings(), "acks": "all"})
    sent_ns = time.time_ns()
    for seq in range(MESSAGES):
        device = seq % 10
        producer.produce(
            topic, key=template.keys[device],
            value=template.render(device, seq // 10, sent_ns + seq, seq),
        )  # fmt: skip
    assert producer.flush(30) == 0


def run_sink_as(secured_kafka, grants, kafka_source, java_classpath, tmp_path):
    """Runs the sink job as a fresh user holding exactly `grants`' ACLs; its result."""
    user, password = secured_kafka.new_identity(lambda principal: acls_for_grants(grants, principal))
    fill_topic(secured_kafka, kafka_source["topic"])
    properties = [
        {
            "PropertyGroupId": "KafkaSource",
            "PropertyMap": {
                **kafka_source,
                "bootstrap.servers": secured_kafka.bootstrap_servers,
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.username": user,
                "sasl.password": password,
            },
        },
        {
            "PropertyGroupId": "Sink",
            "PropertyMap": {
                "output.path": (tmp_path / "telemetry").as_uri(),
                "dead.letter.path": (tmp_path / "dead-letter").as_uri(),
                "checkpoint.interval.ms": "500",
            },
        },
    ]
    properties_file = tmp_path / "properties.json"
    properties_file.write_text(json.dumps(properties))
    command = [
        "java", "-Xmx1g", "--add-opens=java.base/java.util=ALL-UNNAMED",
        "--add-opens=java.base/java.lang=ALL-UNNAMED",
        f"-Dlog4j2.configurationFile={REPO / 'flink/src/test/resources/log4j2-test.properties'}",
        "-cp", java_classpath, "telemetry.sink.testing.SinkJobRun",
        "--properties", str(properties_file), "--rows", str(MESSAGES), "--timeout-s", "90",
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)


def last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""


def test_the_sink_commits_the_topic_to_parquet_with_exactly_the_roles_permissions(
    sink_role, secured_kafka, java_classpath, tmp_path, topic_cleanup
):
    grants, kafka_source = sink_role
    result = run_sink_as(secured_kafka, grants, kafka_source, java_classpath, tmp_path)
    assert result.returncode == 0, last_line(result.stderr)
    # Its line, wherever the JVM's shutdown logging (Pekko's CoordinatedShutdown WARN, on stdout)
    # lands beside it.
    assert f"sink run committed {MESSAGES} rows, 0 dead letters and the group's offsets" in result.stdout.splitlines()
    assert list((tmp_path / "telemetry").rglob("part-*.parquet"))


@pytest.mark.parametrize("withheld", ["kafka-cluster:ReadData", "kafka-cluster:AlterGroup"])
def test_without_one_of_the_roles_actions_the_run_fails_naming_it(
    sink_role, secured_kafka, java_classpath, tmp_path, topic_cleanup, withheld
):
    grants, kafka_source = sink_role
    assert any(g.action == withheld for g in grants), f"the sink role has no {withheld} to withhold"
    planted = [g for g in grants if g.action != withheld]
    result = run_sink_as(secured_kafka, planted, kafka_source, java_classpath, tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    failure = iam_action_for(last_line(result.stderr), kafka_source["topic"], kafka_source["group.id"])
    print(failure)  # the line a developer reads (pytest -s shows it)
    assert f"the identity lacks {withheld} on " in failure, failure


@pytest.mark.parametrize(
    "withheld",
    ["kafka-cluster:Connect", "kafka-cluster:DescribeTopic", "kafka-cluster:DescribeGroup"],
)
def test_an_action_kafka_implies_is_still_demanded_by_the_required_actions_check(sink_role, withheld):
    # Kafka's READ implies DESCRIBE (topic and group), and Connect is the login itself, so
    # withholding these passes on the broker (tried for DescribeGroup: the run commits everything).
    # MSK's Required actions column demands them; the translation refuses the policy instead.
    grants, _ = sink_role
    refused = refusal_without(grants, withheld)
    print(refused)
    assert f"requires {withheld} " in str(refused)
