"""The device gateway's SASL/SCRAM user, on the policy-enforcing broker: the topic administrator
creates its ACLs with telemetry/commands/topics.py (over its IAM grants, translated into ACLs), and
the rule's producer can then write to its topic and do nothing else.

The SCRAM user signs in on the broker's SCRAM listener (SCRAM-SHA-512, as MSK's port 9096) and is
authorized by Kafka's own authorizer with allow.everyone.if.no.acl.found=false, which is what MSK
does for such users (MSK Developer Guide, "Apache Kafka ACLs"; the MSK stack sets the property).
The producer is configured as the rule's Kafka action configures it (acks=1, key and one header;
stacks/constructs/kafka_topic_rule.py); the AWS IoT rules engine's own client is not available
here, so what it sends beyond an ordinary non-idempotent producer is a risk, not a fact.
"""

from __future__ import annotations

import io

import pytest

from simulator.payload import RULE_THING_NAME_HEADER as THING_HEADER
from stacks.config import load_environment
from stacks.constructs.kafka_topic_rule import ACKS
from telemetry.commands.topics import (
    AclSpec,
    KafkaAcls,
    TopicError,
    declared_environment,
    everything_of,
    reconcile_acls,
)
from tests.conftest import cdk_context
from tests.kafka_fixtures import admin_client
from tests.msk_authorization import Cluster, refusal_without, role_grants

pytestmark = pytest.mark.integration
ENV = "dev"


@pytest.fixture(scope="module")
def gateway(synthesized):
    """The topic administrator's grants, the declared SCRAM ACLs and the dev gateway settings."""
    config = load_environment(cdk_context()["environments"], ENV)
    grants = role_grants(synthesized(ENV).stacks, "msk", "TopicAdministratorRole", Cluster.of(config))
    return grants, declared_environment(ENV).acls, config.device_gateway


@pytest.fixture
def scram_user(secured_kafka, gateway):
    """The gateway's SCRAM user with a fresh password and no ACLs, and its topic (3 partitions);
    afterwards neither its ACLs nor the topic are left."""
    _, declared, settings = gateway
    password = secured_kafka.new_scram_user(settings.scram_username)
    secured_kafka.reset_topic(settings.topic, partitions=3)
    yield settings.scram_username, password
    secured_kafka.remove_acls_of(declared[0].principal)
    secured_kafka.reset_topic(settings.topic)


def acls_as_topic_admin(secured_kafka, grants, monkeypatch) -> KafkaAcls:
    return KafkaAcls(secured_kafka.settings_for_grants(grants, monkeypatch, "manage-topics"), timeout_s=30)


def produce_as_the_rule(secured_kafka, user: str, password: str, topic: str, count: int = 5) -> list:
    """Sends `count` messages the way the rule's Kafka action does; returns the delivery errors."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            **secured_kafka.broker.scram_client_settings(user, password),
            "acks": ACKS,
            "enable.idempotence": False,
            "message.timeout.ms": 10_000,
            "log_level": 0,
        }
    )
    errors = []
    for index in range(count):
        producer.produce(
            topic,
            value=b'{"device_id":"thing-1","seq":%d}' % index,
            key=b"thing-1",
            headers=[(THING_HEADER, b"thing-1")],
            on_delivery=lambda error, _message: errors.append(error),
        )
    producer.flush(30)
    return errors


def test_the_declared_acls_are_write_on_the_gateway_topic_only(gateway):
    _, declared, settings = gateway
    assert declared == [AclSpec(f"User:{settings.scram_username}", "topic", settings.topic, "WRITE")]


def test_without_acls_the_scram_user_may_not_even_write(secured_kafka, scram_user, gateway):
    user, password = scram_user
    errors = produce_as_the_rule(secured_kafka, user, password, gateway[2].topic, count=1)
    assert [e.code() for e in errors] == [_error("TOPIC_AUTHORIZATION_FAILED")], errors


def test_the_topic_administrator_creates_the_acls_then_changes_nothing(
    secured_kafka, scram_user, gateway, monkeypatch
):
    grants, declared, settings = gateway
    acls = acls_as_topic_admin(secured_kafka, grants, monkeypatch)
    line = f"acl User:{settings.scram_username}: allow WRITE on topic {settings.topic}"

    out = io.StringIO()
    reconcile_acls(acls, declared, dry_run=True, out=out)
    assert out.getvalue() == f"{line}: would create\n"
    out = io.StringIO()
    reconcile_acls(acls, declared, dry_run=False, out=out)
    assert out.getvalue() == f"{line}: create\n"
    out = io.StringIO()
    reconcile_acls(acls, declared, dry_run=False, out=out)
    assert out.getvalue() == f"{line}: unchanged\n"

    user, password = scram_user
    assert produce_as_the_rule(secured_kafka, user, password, settings.topic) == [None] * 5


def test_an_acl_of_the_scram_user_that_is_not_declared_is_removed(secured_kafka, scram_user, gateway, monkeypatch):
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    grants, declared, settings = gateway
    principal = declared[0].principal
    stray = AclBinding(
        ResourceType.TOPIC, "tele", ResourcePatternType.PREFIXED, principal, "*",
        AclOperation.READ, AclPermissionType.ALLOW,
    )  # fmt: skip
    for future in secured_kafka.admin.create_acls([stray]).values():
        future.result(timeout=30)
    secured_kafka.wait_until_enforced(principal, 1)

    out = io.StringIO()
    reconcile_acls(acls_as_topic_admin(secured_kafka, grants, monkeypatch), declared, dry_run=False, out=out)
    assert out.getvalue().splitlines() == [
        f"acl {principal}: allow WRITE on topic {settings.topic}: create",
        f"acl {principal}: allow READ on topic tele (prefixed): remove",
    ]
    remaining = KafkaAcls(secured_kafka.broker.client_settings(), timeout_s=30).describe([principal])
    assert remaining == declared


def test_the_rule_producer_can_do_nothing_but_write_its_topic(secured_kafka, scram_user, gateway, monkeypatch):
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    from confluent_kafka.admin import ConfigResource, NewTopic, ResourceType

    grants, declared, settings = gateway
    reconcile_acls(acls_as_topic_admin(secured_kafka, grants, monkeypatch), declared, dry_run=False, out=io.StringIO())
    user, password = scram_user
    other_topic = "simulator-results"
    secured_kafka.reset_topic(other_topic, partitions=1)

    # It writes its topic, keyed by device with the send-time header, as the rule does.
    assert produce_as_the_rule(secured_kafka, user, password, settings.topic) == [None] * 5
    reader = Consumer({**secured_kafka.broker.client_settings(), "group.id": "harness", "log_level": 0})
    reader.assign([TopicPartition(settings.topic, p, 0) for p in range(3)])
    received = []
    while len(received) < 5:
        message = reader.poll(10)
        assert message is not None, f"only {len(received)} of 5 messages arrived"
        received.append(message)
    reader.close()
    assert {m.key() for m in received} == {b"thing-1"}
    assert {tuple(m.headers()) for m in received} == {((THING_HEADER, b"thing-1"),)}

    # Nothing else: another topic, reading its own topic, creating or altering topics, ACLs.
    assert [e.code() for e in produce_as_the_rule(secured_kafka, user, password, other_topic, 1)] == [
        _error("TOPIC_AUTHORIZATION_FAILED")
    ]
    scram = secured_kafka.broker.scram_client_settings(user, password)
    consumer = Consumer({**scram, "group.id": "rule", "log_level": 0, "enable.auto.commit": False})
    consumer.assign([TopicPartition(settings.topic, 0, 0)])
    # The fetch is refused on the topic. The group is refused too (FindCoordinator, no ACL on any
    # group), in either order, so look for the topic's refusal among the errors.
    errors = []
    for _ in range(20):
        message = consumer.poll(1)
        assert message is None or message.error(), "the SCRAM user read a message"
        if message is not None:
            errors.append(message.error().code())
            if errors[-1] == _error("TOPIC_AUTHORIZATION_FAILED"):
                break
    consumer.close()
    assert _error("TOPIC_AUTHORIZATION_FAILED") in errors, errors
    assert set(errors) <= {_error("TOPIC_AUTHORIZATION_FAILED"), _error("GROUP_AUTHORIZATION_FAILED")}, errors

    admin = admin_client(scram)
    assert set(admin.list_topics(timeout=30).topics) == {settings.topic}  # the others are hidden
    refused = {
        "create topic": admin.create_topics([NewTopic("rule-made", 1, 1)])["rule-made"],
        "alter topic config": admin.incremental_alter_configs(
            [ConfigResource(ResourceType.TOPIC, settings.topic, incremental_configs=[_retention()])]
        )[ConfigResource(ResourceType.TOPIC, settings.topic)],
        "create ACL": next(iter(admin.create_acls([_acl_for(declared[0], "READ")]).values())),
        "delete ACL": next(iter(admin.delete_acls([everything_of(declared[0].principal)]).values())),
    }
    for what, future in refused.items():
        with pytest.raises(KafkaException) as error:
            future.result(timeout=30)
        assert "AUTHORIZATION_FAILED" in error.value.args[0].name(), (what, error.value)
    # DescribeAcls is refused too, but librdkafka reports that as an empty list (KafkaAcls.describe).
    assert admin.describe_acls(everything_of(declared[0].principal)).result(timeout=30) == []


def test_without_alter_cluster_the_administrator_is_refused_naming_it(secured_kafka, scram_user, gateway, monkeypatch):
    grants, declared, _ = gateway
    acls = acls_as_topic_admin(
        secured_kafka, [g for g in grants if g.action != "kafka-cluster:AlterCluster"], monkeypatch
    )
    with pytest.raises(TopicError) as refused:
        reconcile_acls(acls, declared, dry_run=False, out=io.StringIO())
    message = str(refused.value)
    print(message)
    assert "\n" not in message
    assert message.endswith("the identity lacks kafka-cluster:AlterCluster on the cluster"), message


def test_describe_cluster_is_demanded_though_kafka_implies_it(gateway):
    # Kafka's ALTER on the cluster implies DESCRIBE, so the broker would let DescribeAcls pass
    # without it; MSK's Required actions column demands DescribeCluster with AlterCluster.
    refused = refusal_without(gateway[0], "kafka-cluster:DescribeCluster")
    assert "requires kafka-cluster:DescribeCluster " in str(refused)


def _error(name: str) -> int:
    from confluent_kafka import KafkaError

    return getattr(KafkaError, name)


def _retention():
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    return ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)


def _acl_for(acl: AclSpec, operation: str):
    from telemetry.commands.topics import _acl_binding

    return _acl_binding(AclSpec(acl.principal, acl.resource, acl.name, operation))


def test_a_broker_without_an_authorizer_is_reported_not_failed(kafka_broker, gateway):
    _, declared, settings = gateway
    out = io.StringIO()
    reconcile_acls(KafkaAcls(kafka_broker.client_settings(), timeout_s=30), declared, dry_run=False, out=out)
    assert out.getvalue() == (
        f"acl User:{settings.scram_username}: allow WRITE on topic {settings.topic}: skipped: "
        "the cluster enforces no ACLs\n"
    )
