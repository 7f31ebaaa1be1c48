"""The IAM-to-Kafka-ACL translation the policy-enforcing broker tests rely on (no broker)."""

import pytest
from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType

from tests.msk_authorization import (
    Cluster,
    Grant,
    UntranslatablePolicy,
    acls_for_grants,
    grants_for_policy,
)

CLUSTER = Cluster("aws", "eu-west-1", "111111111111", "telemetry-dev", "uuid-1")
ARN = "arn:aws:kafka:eu-west-1:111111111111"
CONNECT = {"Effect": "Allow", "Action": "kafka-cluster:Connect", "Resource": f"{ARN}:cluster/telemetry-dev/uuid-1"}


def allow(actions, resource):
    return {"Effect": "Allow", "Action": actions, "Resource": resource}


def test_a_producer_policy_becomes_literal_topic_acls_and_idempotent_write_on_the_cluster():
    grants = grants_for_policy(
        [
            CONNECT,
            allow(["kafka-cluster:DescribeTopic", "kafka-cluster:WriteData"], f"{ARN}:topic/telemetry-dev/*/telemetry"),
            allow("kafka-cluster:WriteDataIdempotently", f"{ARN}:cluster/telemetry-dev/uuid-1"),
        ],
        CLUSTER,
    )
    acls = {(a.restype, a.name, a.resource_pattern_type, a.operation) for a in acls_for_grants(grants, "User:p")}
    assert acls == {
        (ResourceType.TOPIC, "telemetry", ResourcePatternType.LITERAL, AclOperation.DESCRIBE),
        (ResourceType.TOPIC, "telemetry", ResourcePatternType.LITERAL, AclOperation.WRITE),
        (ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, AclOperation.IDEMPOTENT_WRITE),
    }


def test_a_trailing_wildcard_is_a_prefixed_pattern_and_a_lone_one_kafkas_wildcard():
    grants = grants_for_policy(
        [
            CONNECT,
            allow("kafka-cluster:*Group", f"{ARN}:group/telemetry-dev/*/simulator-*"),
            allow("kafka-cluster:DescribeTopic", f"{ARN}:topic/telemetry-dev/*/*"),
        ],
        CLUSTER,
    )
    assert Grant("kafka-cluster:AlterGroup", "group", "simulator-", True) in grants
    assert Grant("kafka-cluster:DeleteGroup", "group", "simulator-", True) in grants
    assert Grant("kafka-cluster:DescribeTopic", "topic", "*", False) in grants


def test_a_wildcard_inside_a_name_is_refused_naming_the_action():
    with pytest.raises(UntranslatablePolicy, match="kafka-cluster:ReadData.*inside a name"):
        grants_for_policy([CONNECT, allow("kafka-cluster:ReadData", f"{ARN}:topic/telemetry-dev/*/tele*try")], CLUSTER)


def test_an_action_without_its_required_actions_is_refused_naming_both():
    # ReadData needs DescribeTopic on the topic and AlterGroup on some group; Kafka's READ would
    # imply DESCRIBE, so only this check catches the first.
    with pytest.raises(UntranslatablePolicy) as refused:
        grants_for_policy([CONNECT, allow("kafka-cluster:ReadData", f"{ARN}:topic/telemetry-dev/*/telemetry")], CLUSTER)
    assert "kafka-cluster:ReadData on topic telemetry requires kafka-cluster:DescribeTopic" in str(refused.value)
    assert "requires kafka-cluster:AlterGroup on any resource" in str(refused.value)


def test_deny_and_conditions_are_refused_and_other_clusters_grant_nothing():
    with pytest.raises(UntranslatablePolicy, match="kafka-cluster:WriteData: only Allow"):
        grants_for_policy([{"Effect": "Deny", "Action": "kafka-cluster:WriteData", "Resource": "*"}], CLUSTER)
    with pytest.raises(UntranslatablePolicy, match="Condition"):
        grants_for_policy([{**CONNECT, "Condition": {"Bool": {"aws:SecureTransport": "true"}}}], CLUSTER)
    assert grants_for_policy([allow("kafka-cluster:Connect", f"{ARN}:cluster/other/uuid-9")], CLUSTER) == []
