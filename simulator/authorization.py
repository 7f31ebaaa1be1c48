"""Which MSK IAM action a Kafka authorization error points at.

MSK answers a request its IAM policy does not allow with Kafka's own authorization errors, which
name a Kafka resource type, not the permission. The simulator and telemetry/commands/topics.py know
what they were doing, so their one-line failure can name the kafka-cluster action the identity
lacks (MSK Developer Guide, "Semantics of IAM authorization policy actions and resources"). The
same errors come from a local broker enforcing Kafka ACLs, which is how the tests check the fleet
role and the topic administrator.
"""

from __future__ import annotations

from confluent_kafka import KafkaError

# (error, what the client was doing) -> the action whose Kafka ACL that request needs.
_ACTIONS = {
    # InitProducerId of an idempotent producer: IDEMPOTENT_WRITE on the cluster.
    (KafkaError.CLUSTER_AUTHORIZATION_FAILED, "produce"): "kafka-cluster:WriteDataIdempotently on the cluster",
    (KafkaError.TOPIC_AUTHORIZATION_FAILED, "produce"): "kafka-cluster:WriteData on topic {topic}",
    (KafkaError.TOPIC_AUTHORIZATION_FAILED, "consume"): "kafka-cluster:ReadData on topic {topic}",
    (KafkaError.TOPIC_AUTHORIZATION_FAILED, "describe"): "kafka-cluster:DescribeTopic on topic {topic}",
    (KafkaError.GROUP_AUTHORIZATION_FAILED, "consume"): "kafka-cluster:AlterGroup on group {group}",
    (KafkaError.CLUSTER_AUTHORIZATION_FAILED, "describe"): "kafka-cluster:DescribeCluster on the cluster",
    # telemetry/commands/topics.py: DescribeConfigs, CreateTopics, CreatePartitions and
    # IncrementalAlterConfigs on a topic (DESCRIBE_CONFIGS, CREATE, ALTER, ALTER_CONFIGS).
    (KafkaError.TOPIC_AUTHORIZATION_FAILED, "describe-configs"):
        "kafka-cluster:DescribeTopicDynamicConfiguration on topic {topic}",
    (KafkaError.TOPIC_AUTHORIZATION_FAILED, "create"): "kafka-cluster:CreateTopic on topic {topic}",
    (KafkaError.TOPIC_AUTHORIZATION_FAILED, "add-partitions"): "kafka-cluster:AlterTopic on topic {topic}",
    (KafkaError.TOPIC_AUTHORIZATION_FAILED, "set-configs"):
        "kafka-cluster:AlterTopicDynamicConfiguration on topic {topic}",
    # ... and the SASL/SCRAM users' ACLs: DescribeAcls needs DESCRIBE, CreateAcls and DeleteAcls
    # ALTER on the cluster (Kafka's AclApis).
    (KafkaError.CLUSTER_AUTHORIZATION_FAILED, "describe-acls"): "kafka-cluster:DescribeCluster on the cluster",
    (KafkaError.CLUSTER_AUTHORIZATION_FAILED, "create-acl"): "kafka-cluster:AlterCluster on the cluster",
    (KafkaError.CLUSTER_AUTHORIZATION_FAILED, "remove-acl"): "kafka-cluster:AlterCluster on the cluster",
}
AUTHORIZATION_ERRORS = {code for code, _ in _ACTIONS}


def is_authorization_error(error: KafkaError) -> bool:
    return error.code() in AUTHORIZATION_ERRORS


def missing_permission(error: KafkaError, doing: str, **names: str) -> str:
    """`error`'s text, followed by the IAM action the request needed when it was refused."""
    action = _ACTIONS.get((error.code(), doing))
    text = error.str()
    if action is None:
        return text
    return f"{text}: the identity lacks {action.format(**names)}"
