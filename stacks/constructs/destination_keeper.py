"""Keeps the IoT rule's VPC destination enabled: an hourly run of
lambdas/device_gateway/destination_keeper.py, allowed to read and update that one destination,
with alarms when it had to re-enable it and when it could not.

AWS IoT disables a VPC destination after 30 days without traffic (AWS IoT Developer Guide,
"Virtual private cloud (VPC) destinations"); an hour bounds how long device messages fail after
a quiet month. IAM: `iot:GetTopicRuleDestination` and `iot:UpdateTopicRuleDestination` take the
resource type `destination`, `arn:${Partition}:iot:${Region}:${Account}:ruledestination/
${DestinationType}/${Uuid}` (Service Authorization Reference, AWS IoT), so the role names the one
destination's ARN.
"""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from constructs import Construct

from stacks.compliance import skip_check
from stacks.constructs.alarm_topic import notifying_alarm
from stacks.constructs.lifecycle_functions import ARCHITECTURE, RUNTIME
from stacks.constructs.log_group import function_role, log_group

CODE = Path(__file__).resolve().parents[2] / "lambdas" / "device_gateway"
# The metric lambdas/device_gateway/destination_keeper.py writes when it re-enables the destination
# (the function's package cannot import the stacks; tests/lambdas/test_destination_keeper.py holds
# the two to the same names).
METRIC_NAMESPACE = "Telemetry/DeviceGateway"
REENABLED_METRIC = "TopicRuleDestinationReEnabled"
CHECK_INTERVAL = cdk.Duration.hours(1)


class DestinationKeeper(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        destination_arn: str,
        destination_role: iam.IRole,
        environment: str,
        alarm_name_prefix: str,
        alarm_topic: sns.ITopic,
        log_retention_days: int,
        removal_policy: cdk.RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        self.log_group = logs = log_group(self, "Logs", retention_days=log_retention_days, removal_policy=removal_policy)
        self.function = lambda_.Function(
            self,
            "Function",
            role=function_role(
                self, "Role", group=logs, description="Destination keeper: re-enables the device gateway's VPC topic rule destination"
            ),
            code=lambda_.Code.from_asset(str(CODE), exclude=["**/__pycache__"]),
            handler="destination_keeper.handler",
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            description="Re-enables the device gateway's VPC topic rule destination when AWS IoT disables it",
            environment={"DESTINATION_ARN": destination_arn, "ENVIRONMENT": environment},
            timeout=cdk.Duration.seconds(60),
            memory_size=128,
            log_group=logs,
        )
        skip_check(self.function, "CKV_AWS_116", "EventBridge invokes it hourly; Lambda retries a failed run twice, "
                   "the next hour's run repeats it, and its Errors alarm (DestinationCheckFailed) pages")
        skip_check(self.function, "CKV_AWS_115", "One scheduled run an hour; a reservation would take concurrency from "
                   "the account for nothing")
        skip_check(self.function, "CKV_AWS_117", "It calls AWS IoT's control-plane API only (GetTopicRuleDestination, "
                   "UpdateTopicRuleDestination) and reaches nothing inside the VPC")
        skip_check(self.function, "CKV_AWS_173", "Its environment holds the destination's ARN and the environment's "
                   "name, no secret; Lambda encrypts it at rest with its own key")
        self.function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["iot:GetTopicRuleDestination", "iot:UpdateTopicRuleDestination"],
                resources=[destination_arn],
            )
        )
        # Enabling a VPC destination makes the rules engine build its network interfaces again
        # under the destination's role: the CloudFormation resource provider for
        # AWS::IoT::TopicRuleDestination lists iam:PassRole beside the two iot actions for an
        # update (its registry schema, handlers.update.permissions). Passed only to AWS IoT.
        self.function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["iam:PassRole"],
                resources=[destination_role.role_arn],
                conditions={"StringEquals": {"iam:PassedToService": "iot.amazonaws.com"}},
            )
        )
        self.schedule = events.Rule(
            self,
            "Schedule",
            description="Checks that the device gateway's VPC topic rule destination is enabled",
            schedule=events.Schedule.rate(CHECK_INTERVAL),
            # A failed run is retried twice by Lambda (asynchronous invocation) and the next hour's
            # run follows; every run is safe to repeat.
            targets=[targets.LambdaFunction(self.function, retry_attempts=0)],
        )

        action = actions.SnsAction(alarm_topic)
        hour = cdk.Duration.hours(1)
        self.failed_alarm = notifying_alarm(
            self,
            "CheckFailed",
            action=action,
            alarm_name=f"{alarm_name_prefix}-DestinationCheckFailed",
            description="The check of the IoT rule's VPC destination failed (the destination is in ERROR or "
            "being deleted, or the AWS IoT API refused): device messages may be failing the Kafka action. "
            "The function's log names the status and its reason",
            # AWS/Lambda Errors by FunctionName (Lambda Developer Guide, "Types of metrics for Lambda functions").
            metric=self.function.metric_errors(period=hour, statistic="Sum"),
            threshold=1,
            evaluation_periods=1,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        self.not_running_alarm = notifying_alarm(
            self,
            "NotRunning",
            action=action,
            alarm_name=f"{alarm_name_prefix}-DestinationCheckNotRunning",
            description="The hourly check of the IoT rule's VPC destination has not run for two hours (its "
            "schedule rule disabled or deleted, or the function not invoked): a disabled destination would "
            "go unnoticed",
            # AWS/Lambda Invocations by FunctionName (same page). Lambda sends no datapoint for an
            # hour without invocations, so missing data is what this alarm is for: breaching.
            metric=self.function.metric_invocations(period=hour, statistic="Sum"),
            threshold=1,
            evaluation_periods=2,
            comparison=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.BREACHING,
        )
        self.reenabled_alarm = notifying_alarm(
            self,
            "ReEnabled",
            action=action,
            alarm_name=f"{alarm_name_prefix}-DestinationReEnabled",
            description="AWS IoT had disabled the rule's VPC destination (30 days without traffic, or a "
            "change to its VPC resources) and the check re-enabled it: device messages in between failed "
            "the Kafka action and went to the error action",
            metric=cloudwatch.Metric(
                namespace=METRIC_NAMESPACE,
                metric_name=REENABLED_METRIC,
                dimensions_map={"Environment": environment},
                statistic="Sum",
                period=hour,
            ),
            threshold=1,
            evaluation_periods=1,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
