"""The environment's alarm topic: encrypted, TLS-only, and publishable by CloudWatch alarms.

Publishing to a topic encrypted with a customer managed key needs the key as well as the topic:
"The publisher must have the `kms:GenerateDataKey` and `kms:Decrypt` permissions for the AWS KMS
key" (Amazon SNS Developer Guide, "Key management", "Allow a user to send messages to a topic with
SSE": https://docs.aws.amazon.com/sns/latest/dg/sns-key-management.html). AWS services that
publish as a service principal need the same two actions in the key policy ("Enable compatibility
between event sources from AWS services and encrypted topics", same page). So every publisher is
granted through `AlarmTopic.grant_publish`, never with a bare `sns:Publish` statement.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import ArnFormat, RemovalPolicy, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from stacks.constructs.keys import rotating_key


# What a publishing identity needs on the topic's key, exactly as the page's IAM example lists it
# (no wildcard action, so nothing for cdk-nag's IAM5 to acknowledge). AWS services get the page's
# key policy statement, `kms:GenerateDataKey*`, below.
PUBLISHER_KEY_ACTIONS = ("kms:Decrypt", "kms:GenerateDataKey")


class AlarmTopic(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        topic_name: str,
        email_addresses: Sequence[str],
        removal_policy: RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)

        # A customer-managed key, because CloudWatch cannot publish to a topic encrypted with
        # the AWS-managed SNS key: its key policy cannot be changed to let CloudWatch use it.
        self.key = rotating_key(
            self,
            "Key",
            description=f"Encrypts the {topic_name} SNS topic",
            removal_policy=removal_policy,
            pending_days=7,
        )
        # Only for this account's alarms (confused deputy: another account's alarm naming this topic
        # must not use the key; IAM User Guide, "The confused deputy problem": aws:SourceAccount and
        # aws:SourceArn in the policies that grant a service principal).
        stack = Stack.of(self)
        alarms = stack.format_arn(service="cloudwatch", resource="alarm", resource_name="*",
                                  arn_format=ArnFormat.COLON_RESOURCE_NAME)  # fmt: skip
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowCloudWatchAlarmsToPublish",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {"aws:SourceArn": alarms},
                },
            )
        )
        self.topic = sns.Topic(
            self,
            "Topic",
            topic_name=topic_name,
            display_name=topic_name,
            master_key=self.key,
            enforce_ssl=True,
        )
        # The topic's policy replaces SNS's default one (which let the account's services publish),
        # and it has to: enforce_ssl writes it. CloudWatch publishes an alarm's notification as its
        # service principal, which has no identity policy: without this statement every alarm
        # action fails ("not authorized to perform: SNS:Publish"). Only for this account's alarms,
        # as the key's statement above (Amazon SNS Developer Guide, "Amazon SNS access control case
        # examples": CloudWatch alarms publishing to a topic; aws:SourceAccount and aws:SourceArn).
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowThisAccountsAlarmsToPublish",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {"aws:SourceArn": alarms},
                },
            )
        )
        for address in email_addresses:
            self.topic.add_subscription(subscriptions.EmailSubscription(address))

    def grant_publish(self, grantee: iam.IGrantable) -> None:
        """Let `grantee` publish: `sns:Publish` on the topic and the key use that publishing to an
        encrypted topic needs. Idempotent with what a Step Functions SnsPublish task adds itself
        (only `sns:Publish`). The key policy trusts the account, so an IAM grant suffices."""
        iam.Grant.add_to_principal(grantee=grantee, actions=["sns:Publish"], resource_arns=[self.topic.topic_arn])
        iam.Grant.add_to_principal(
            grantee=grantee, actions=list(PUBLISHER_KEY_ACTIONS), resource_arns=[self.key.key_arn]
        )


def notifying_alarm(
    scope: Construct,
    construct_id: str,
    *,
    action: cloudwatch.IAlarmAction,
    metric: cloudwatch.IMetric,
    threshold: float,
    evaluation_periods: int,
    comparison: cloudwatch.ComparisonOperator,
    description: str,
    treat_missing_data: cloudwatch.TreatMissingData,
    alarm_name: str | None = None,
) -> cloudwatch.Alarm:
    """An alarm that tells the alarm topic both when it fires and when it clears."""
    alarm = cloudwatch.Alarm(
        scope,
        construct_id,
        alarm_name=alarm_name,
        alarm_description=description,
        metric=metric,
        threshold=threshold,
        evaluation_periods=evaluation_periods,
        comparison_operator=comparison,
        treat_missing_data=treat_missing_data,
    )
    alarm.add_alarm_action(action)
    alarm.add_ok_action(action)
    return alarm
