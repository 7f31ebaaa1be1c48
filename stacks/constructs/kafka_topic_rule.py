"""An AWS IoT topic rule that writes device messages into MSK with the rules engine's Kafka action.

What the AWS IoT Developer Guide ("Apache Kafka" rule action) requires and this follows:
- a VPC topic rule destination whose role may manage the elastic network interfaces the rules
  engine puts in each subnet, with the policy the guide's VPC destination page gives: the interfaces
  may be tagged `VPCDestinationENI=true` when they are created, and only interfaces with that tag
  may be shared (`CreateNetworkInterfacePermission`);
- SASL_SSL with SCRAM-SHA-512 (IAM is not supported), the credentials read at run time with the
  `get_secret()` substitution template under a role allowed `secretsmanager:GetSecretValue` and
  `secretsmanager:DescribeSecret` on the secret;
- `acks` "0" or "1"; `key` and `headers` take substitution templates, which are evaluated against
  the original message, not the SELECT output ("Substitution templates").
The rule selects the payload as the device sent it (`SELECT *`) and adds nothing to it: the thing
name goes into the Kafka key and the header `iot_thing_name`, never into the JSON, because the SQL
reference does not say what `SELECT *, topic(3) AS device_id` writes when the payload already has
a `device_id` (devices send one), and the sink rejects a duplicate key.
The action's key and headers read the topic only, never a payload field: every message the rule
matches has the topic's levels, while for a payload without the field the SQL reference says only
that a missing key is Undefined, "converted to an empty string when serialized by itself" ("Data
types"), not what a header template writes, and nothing for a payload that is not JSON.
`SELECT *` takes any payload, JSON or not ("Working with binary payloads"), so a malformed device
message reaches the topic as it was sent and ends in the sink's dead letters, counted, instead of
failing the action and coming back with every replay. That the Kafka action takes a binary
payload is not stated: the page names only the Lambda action among those that do not ("such as").
The producer's `key.serializer` and `value.serializer` are set to the one value the action page
gives for each (StringSerializer, ByteBufferSerializer), as its client properties list them without
"(optional)", unlike `acks` and `compression.type`.
A failed delivery goes to the rule's error action, which writes the error action message with the
original payload (`base64OriginalPayload`) into a queue (AWS IoT Developer Guide, "Error handling";
the queue and why: failed_deliveries.py), from which `telemetry devices replay` publishes it again.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_iot as iot
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from simulator.payload import RULE_THING_NAME_HEADER
from stacks.compliance import acknowledge, skip_check, wildcard_resource_finding
from stacks.constructs.scram_user import ScramUser

# The action's producer: librdkafka-style client properties (AWS IoT Developer Guide, "Apache Kafka").
SECURITY_PROTOCOL = "SASL_SSL"
SASL_MECHANISM = "SCRAM-SHA-512"
# The Kafka action accepts only 0 or 1: a write is acknowledged by the partition leader alone, so
# a device message the leader acknowledged and lost before its followers copied it is gone (the
# simulator's and other IAM clients' acks=all with min.insync.replicas=2 survive that).
ACKS = "1"
# The Kafka action page's one valid value for each ("Apache Kafka" rule action, clientProperties).
KEY_SERIALIZER = "StringSerializer"
VALUE_SERIALIZER = "ByteBufferSerializer"
# The VPC destination role's policy is the one the AWS IoT Developer Guide gives on its VPC
# destination page, "Apache Kafka Virtual Private Cloud (VPC) destinations" (the same policy as its
# "Virtual private cloud (VPC) destinations", vpc-rule-action.html). The "Apache Kafka" rule action
# page lists the same actions and CreateNetworkInterfacePermission as one statement without conditions,
# and no CreateTags; the destination page is the newer, specific one, and it is followed here: a rules
# engine that tags the interfaces it creates cannot create them without CreateTags.
VPC_DESTINATION_PAGE = "https://docs.aws.amazon.com/iot/latest/developerguide/kafka-vpc-destination.html"
DESTINATION_EC2_ACTIONS = (
    "ec2:CreateNetworkInterface",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeVpcs",
    "ec2:DeleteNetworkInterface",
    "ec2:DescribeSubnets",
    "ec2:DescribeVpcAttribute",
    "ec2:DescribeSecurityGroups",
)
# The tag that marks an interface as the rules engine's (the same page's policy).
DESTINATION_ENI_TAG_KEY = "VPCDestinationENI"
DESTINATION_ENI_TAG_VALUE = "true"


def vpc_destination_statements() -> list[iam.PolicyStatement]:
    """The VPC destination page's policy, statement by statement (VPC_DESTINATION_PAGE)."""
    return [
        # VPC_DESTINATION_PAGE, statement 1: create, describe and delete interfaces.
        iam.PolicyStatement(actions=list(DESTINATION_EC2_ACTIONS), resources=["*"]),
        # VPC_DESTINATION_PAGE, statement 2: share only an interface tagged as the rules engine's.
        iam.PolicyStatement(
            actions=["ec2:CreateNetworkInterfacePermission"],
            resources=["*"],
            conditions={"StringEquals": {f"ec2:ResourceTag/{DESTINATION_ENI_TAG_KEY}": DESTINATION_ENI_TAG_VALUE}},
        ),
        # VPC_DESTINATION_PAGE, statement 3: tag an interface only while creating it, and only with
        # that tag (EC2 authorizes tags given to CreateNetworkInterface as ec2:CreateTags with
        # ec2:CreateAction set; Amazon EC2 User Guide, "Grant permission to tag Amazon EC2 resources
        # during creation").
        iam.PolicyStatement(
            actions=["ec2:CreateTags"],
            resources=["*"],
            conditions={
                "StringEquals": {
                    "ec2:CreateAction": "CreateNetworkInterface",
                    f"aws:RequestTag/{DESTINATION_ENI_TAG_KEY}": DESTINATION_ENI_TAG_VALUE,
                }
            },
        ),
    ]


def get_secret(secret_arn: str, field: str, role_arn: str) -> str:
    """The AWS IoT SQL get_secret() function as a substitution template."""
    return f"${{get_secret('{secret_arn}', 'SecretString', '{field}', '{role_arn}')}}"


def iot_service_principal(account: str, source_arn: str | None = None) -> iam.ServicePrincipal:
    # Only this account's IoT resources may assume the role (confused-deputy guard).
    conditions: dict = {"StringEquals": {"aws:SourceAccount": account}}
    if source_arn:
        conditions["ArnLike"] = {"aws:SourceArn": source_arn}
    return iam.ServicePrincipal("iot.amazonaws.com", conditions=conditions)


class KafkaTopicRule(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnets: Sequence[ec2.ISubnet],
        security_group: ec2.ISecurityGroup,
        rule_name: str,
        topic_filter: str,
        thing_level: int,
        kafka_topic: str,
        bootstrap_brokers: str,
        scram_user: ScramUser,
        error_queue: sqs.IQueue,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.rule_name = rule_name

        self.destination_role = iam.Role(
            self,
            "DestinationRole",
            assumed_by=iot_service_principal(stack.account),
            description="Lets the AWS IoT rules engine manage its network interfaces in the VPC",
            inline_policies={
                "NetworkInterfaces": iam.PolicyDocument(statements=vpc_destination_statements())
            },
        )
        skip_check(self.destination_role, "CKV_AWS_111", "The AWS IoT Developer Guide's VPC destination role policy: "
                   "the rules engine creates and deletes its network interfaces before their ids exist; the "
                   "permission and tag statements are conditioned on the VPCDestinationENI tag")
        acknowledge(
            self.destination_role,
            "AwsSolutions-IAM5",
            "The AWS IoT Developer Guide's VPC destination role policy names all resources: the interfaces "
            "do not exist before the rules engine creates them and the Describe actions take no resource; "
            "sharing and tagging are limited by condition to interfaces tagged VPCDestinationENI=true, "
            "and tagging to the moment the rules engine creates one",
            finding=wildcard_resource_finding("*"),
        )
        self.destination = iot.CfnTopicRuleDestination(
            self,
            "Destination",
            status="ENABLED",
            vpc_properties=iot.CfnTopicRuleDestination.VpcDestinationPropertiesProperty(
                vpc_id=vpc.vpc_id,
                subnet_ids=[subnet.subnet_id for subnet in subnets],
                security_groups=[security_group.security_group_id],
                role_arn=self.destination_role.role_arn,
            ),
        )

        rule_arn = stack.format_arn(service="iot", resource="rule", resource_name=rule_name)
        # Exactly what the rule needs at run time: read one secret (and decrypt it with its key),
        # send failed messages to its own queue.
        self.role = iam.Role(
            self,
            "RuleRole",
            assumed_by=iot_service_principal(stack.account, rule_arn),
            description=f"AWS IoT rule {rule_name}: reads its SCRAM secret, sends failed messages to its queue",
            inline_policies={
                "RuleActions": iam.PolicyDocument(
                    statements=[
                        iam.PolicyStatement(
                            actions=["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
                            resources=[scram_user.secret.secret_arn],
                        ),
                        iam.PolicyStatement(
                            actions=["kms:Decrypt"],
                            resources=[scram_user.key.key_arn],
                            conditions={
                                "StringEquals": {"kms:ViaService": f"secretsmanager.{stack.region}.amazonaws.com"}
                            },
                        ),
                        # The SQS action's one permission (AWS IoT Developer Guide, "SQS").
                        iam.PolicyStatement(actions=["sqs:SendMessage"], resources=[error_queue.queue_arn]),
                    ]
                )
            },
        )

        secret_arn, role_arn = scram_user.secret.secret_arn, self.role.role_arn
        self.rule = iot.CfnTopicRule(
            self,
            "Rule",
            rule_name=rule_name,
            topic_rule_payload=iot.CfnTopicRule.TopicRulePayloadProperty(
                description=f"Device telemetry from {topic_filter} into Kafka topic {kafka_topic}",
                aws_iot_sql_version="2016-03-23",
                # The payload as the device sent it; the thing name travels in the key and a header.
                sql=f"SELECT * FROM '{topic_filter}'",
                rule_disabled=False,
                actions=[
                    iot.CfnTopicRule.ActionProperty(
                        kafka=iot.CfnTopicRule.KafkaActionProperty(
                            destination_arn=self.destination.attr_arn,
                            topic=kafka_topic,
                            # One device's messages stay in one partition, in the order the
                            # rules engine writes them (a replay writes late: README, "Device
                            # messages that failed").
                            key=f"${{topic({thing_level})}}",
                            headers=[
                                # The device id the sink files the reading under: the thing name in
                                # the topic, which the device policy ties to the certificate the
                                # device connected with, whatever the payload claims.
                                iot.CfnTopicRule.KafkaActionHeaderProperty(key=RULE_THING_NAME_HEADER, value=f"${{topic({thing_level})}}"),
                            ],
                            client_properties={
                                "bootstrap.servers": bootstrap_brokers,
                                "security.protocol": SECURITY_PROTOCOL,
                                "sasl.mechanism": SASL_MECHANISM,
                                "sasl.scram.username": get_secret(secret_arn, "username", role_arn),
                                "sasl.scram.password": get_secret(secret_arn, "password", role_arn),
                                "acks": ACKS,
                                "key.serializer": KEY_SERIALIZER,
                                "value.serializer": VALUE_SERIALIZER,
                            },
                        )
                    )
                ],
                error_action=iot.CfnTopicRule.ActionProperty(
                    sqs=iot.CfnTopicRule.SqsActionProperty(
                        queue_url=error_queue.queue_url,
                        role_arn=role_arn,
                        # The body is the error action message's JSON text, as the replay reads it.
                        use_base64=False,
                    )
                ),
            ),
        )
        # The secret must be associated with the cluster before the rule signs in with it.
        self.rule.node.add_dependency(scram_user.association)
