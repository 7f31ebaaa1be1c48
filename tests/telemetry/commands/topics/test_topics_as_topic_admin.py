"""telemetry/commands/topics.py as the MSK stack's topic administrator role, against a broker that
enforces that role.

The role's kafka-cluster statements are read from the synthesized template, translated into Kafka
ACLs by the MSK semantics table (tests/msk_authorization.py) and given to a fresh SASL user of the
policy-enforcing broker; commands/topics.py then creates and alters the declared topic as that user.
What this proves about MSK, and what not: see tests/msk_authorization.py.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from devtools import local_kafka
from simulator.kafka_config import SASL_PASSWORD_ENV
from stacks.config import load_environment
from telemetry.commands.topics import ExistingTopic, KafkaTopics, TopicError, TopicSpec, reconcile
from tests.conftest import REPO, cdk_context
from tests.msk_authorization import (
    Cluster,
    acls_for_grants,
    refusal_without,
    role_grants,
)

pytestmark = pytest.mark.integration
ENV = "dev"
HOUR_MS = 3_600_000
BROKER_RETENTION_BYTES = int(local_kafka.broker_setting("log.retention.bytes"))  # a topic without its own


@pytest.fixture(scope="module")
def admin(synthesized):
    """The topic administrator's grants on the dev cluster, and the topic dev declares."""
    config = load_environment(cdk_context()["environments"], ENV)
    cluster = Cluster.of(config)
    grants = role_grants(synthesized(ENV).stacks, "msk", "TopicAdministratorRole", cluster)
    return grants, config.msk.topics[0].name


def spec(name: str, partitions: int, retention_hours: int) -> TopicSpec:
    return TopicSpec(name, partitions, 1, retention_hours * HOUR_MS)  # one broker: RF 1


def reset_topic(secured_kafka, name: str, *, partitions: int | None = None) -> None:
    secured_kafka.reset_topic(name, partitions=partitions, retention_ms=24 * HOUR_MS)


@pytest.fixture
def topic_cleanup(secured_kafka, admin):
    """Leaves no declared topic behind (other modules create it as the super user)."""
    yield
    reset_topic(secured_kafka, admin[1])


def topics_as(secured_kafka, grants, monkeypatch) -> KafkaTopics:
    return KafkaTopics(secured_kafka.settings_for_grants(grants, monkeypatch, "manage-topics"), timeout_s=30)


def test_the_topic_administrator_creates_then_alters_the_declared_topic(
    admin, secured_kafka, monkeypatch, topic_cleanup
):
    grants, name = admin
    reset_topic(secured_kafka, name)
    topics = topics_as(secured_kafka, grants, monkeypatch)

    out = io.StringIO()
    assert reconcile(topics, [spec(name, 3, 24)], dry_run=False, out=out) == 0
    assert out.getvalue() == f"{name}: create: 3 partitions, RF 1\n"

    out = io.StringIO()
    assert reconcile(topics, [spec(name, 6, 48)], dry_run=False, out=out) == 0
    assert f"{name}: add-partitions: 3 -> 6 partitions" in out.getvalue()
    assert f"{name}: set-configs: retention.ms {24 * HOUR_MS} -> {48 * HOUR_MS}" in out.getvalue()

    as_super_user = KafkaTopics(secured_kafka.broker.client_settings(), timeout_s=30)
    assert as_super_user.describe([name]) == {name: ExistingTopic(name, 6, 1, 48 * HOUR_MS, BROKER_RETENTION_BYTES)}
    out = io.StringIO()
    assert reconcile(topics, [spec(name, 6, 48)], dry_run=False, out=out) == 0
    assert out.getvalue() == f"{name}: unchanged: 6 partitions, RF 1\n"


@pytest.mark.parametrize(
    ("withheld", "topic_exists"),
    [
        ("kafka-cluster:CreateTopic", False),
        ("kafka-cluster:AlterTopic", True),
        ("kafka-cluster:AlterTopicDynamicConfiguration", True),
    ],
)
def test_without_one_of_the_roles_actions_reconcile_fails_naming_it(
    admin, secured_kafka, monkeypatch, topic_cleanup, withheld, topic_exists
):
    grants, name = admin
    assert any(g.action == withheld for g in grants), f"the role has no {withheld} to withhold"
    reset_topic(secured_kafka, name, partitions=3 if topic_exists else None)
    topics = topics_as(secured_kafka, [g for g in grants if g.action != withheld], monkeypatch)
    with pytest.raises(TopicError) as refused:
        reconcile(topics, [spec(name, 6, 48)], dry_run=False, out=io.StringIO())
    message = str(refused.value)
    print(message)  # the line an operator would read (pytest -s shows it)
    assert "\n" not in message
    assert message.endswith(f"the identity lacks {withheld} on topic {name}"), message


@pytest.mark.parametrize(
    "withheld",
    [
        "kafka-cluster:Connect",
        "kafka-cluster:DescribeTopic",
        "kafka-cluster:DescribeTopicDynamicConfiguration",
    ],
)
def test_an_action_kafka_implies_is_still_demanded_by_the_required_actions_check(admin, withheld):
    # Kafka's ALTER implies DESCRIBE and ALTER_CONFIGS implies DESCRIBE_CONFIGS, and Connect is
    # the login itself, so withholding these passes on the broker (tried: reconcile succeeds).
    # MSK's Required actions column demands them; the translation refuses the policy instead.
    grants, _ = admin
    refused = refusal_without(grants, withheld)
    print(refused)
    assert f"requires {withheld} " in str(refused)


def test_the_command_runs_as_a_sasl_user_of_a_local_broker(admin, secured_kafka, topic_cleanup):
    grants, name = admin
    reset_topic(secured_kafka, name)
    user, password = secured_kafka.new_identity(lambda principal: acls_for_grants(grants, principal))
    result = subprocess.run(
        [
            str(Path(sys.executable).parent / "telemetry"), "topics", "--env", ENV, "--dry-run",
            "--bootstrap-servers", secured_kafka.bootstrap_servers,
            "--security-protocol", "SASL_PLAINTEXT", "--sasl-username", user,
        ],
        cwd=REPO,
        env={**os.environ, SASL_PASSWORD_ENV: password},
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        f"{name}: would create: 12 partitions, RF 3\n"
        "acl User:iot-device-gateway: allow WRITE on topic telemetry: would create\n"
    )
