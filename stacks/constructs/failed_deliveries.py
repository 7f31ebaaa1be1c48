"""Where a device message goes when the IoT rule's Kafka action cannot deliver it, until
`telemetry devices replay` sends it on (telemetry/commands/devices/replay.py), and the alarms that
say messages are waiting.

The rule's error action writes the error action message ("Error handling (error action)": ruleName,
topic, clientId, base64OriginalPayload, failures[]) into this queue with the SQS action (AWS IoT
Developer Guide, "SQS": `queueUrl`, `roleArn` allowed `sqs:SendMessage`, `useBase64` false keeps
the body the JSON text). SQS rather than a log group or Firehose because an outage fails every
device message at the declared rate: a standard queue takes "a nearly unlimited number of API
calls per second" (SQS Developer Guide, "Amazon SQS standard queues"), where CloudWatch Logs'
PutLogEvents and Firehose's per-stream throughput have account quotas far below the POC's
73,800 messages a second, and a message that meets a quota is lost (ErrorActionFailure). The
queue keeps a message 14 days, the most SQS allows ("Amazon SQS message quotas"); the second
alarm fires with four days left.

SQS-managed encryption (dead_letter_queue.py): the rules engine writes with the rule's role, which
would otherwise need the key too.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_sns as sns
from constructs import Construct

from stacks.constructs.alarm_topic import notifying_alarm
from stacks.constructs.dead_letter_queue import RETENTION, dead_letter_queue
from stacks.naming import FAILED_DELIVERIES_EXPIRY_WARNING_DAYS

# ApproximateAgeOfOldestMessage is in seconds (SQS Developer Guide, "Available CloudWatch metrics
# for Amazon SQS"); the alarm leaves the operator four days to replay before SQS deletes.
EXPIRY_WARNING = cdk.Duration.days(FAILED_DELIVERIES_EXPIRY_WARNING_DAYS)
PERIOD = cdk.Duration.minutes(5)


class FailedDeliveries(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        queue_name: str,
        alarm_name_prefix: str,
        alarm_topic: sns.ITopic,
        removal_policy: cdk.RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        self.queue = dead_letter_queue(
            self,
            queue_name=queue_name,
            why_no_further_queue="This queue is itself the dead-letter store of the IoT rule's Kafka action; its only "
            "consumer is `telemetry devices replay`, which never deletes a message it has not published (a message "
            "it cannot read stays here, counted in its report), so a further dead-letter queue would only hide "
            "messages.",
            removal_policy=removal_policy,
        )
        action = cloudwatch_actions.SnsAction(alarm_topic)
        # Missing data is not breaching: SQS stops sending a queue's metrics after six hours with
        # no message in it and no call to it ("Monitoring Amazon SQS queues using CloudWatch"), and
        # a queue holding a message is active.
        self.waiting_alarm = notifying_alarm(
            self,
            "Waiting",
            action=action,
            alarm_name=f"{alarm_name_prefix}-FailedDeliveriesWaiting",
            description=(
                f"Device messages the IoT rule could not deliver to Kafka wait in {queue_name}: once the "
                "Kafka action succeeds again, run `telemetry devices replay` (docs/day-2.md: failure modes)"
            ),
            # AWS/SQS ApproximateNumberOfMessagesVisible and ...NotVisible by QueueName (SQS
            # Developer Guide, "Available CloudWatch metrics for Amazon SQS"), summed: a message a
            # replay holds, or left hidden when it was killed, still waits.
            metric=cloudwatch.MathExpression(
                expression="visible + hidden",
                using_metrics={
                    "visible": self.queue.metric_approximate_number_of_messages_visible(period=PERIOD, statistic="Maximum"),
                    "hidden": self.queue.metric_approximate_number_of_messages_not_visible(period=PERIOD, statistic="Maximum"),
                },
                label="Failed device messages in the queue",
                period=PERIOD,
            ),
            threshold=1,
            evaluation_periods=1,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        self.expiring_alarm = notifying_alarm(
            self,
            "Expiring",
            action=action,
            alarm_name=f"{alarm_name_prefix}-FailedDeliveriesExpiring",
            description=(
                f"A device message has waited in {queue_name} for {EXPIRY_WARNING.to_days()} days; SQS deletes it "
                f"at {RETENTION.to_days()}: run `telemetry devices replay` now"
            ),
            # Same page: a message received three times and not deleted leaves this metric (SQS
            # moves it to the back of the queue); only a replay receives these messages, and a
            # replay that leaves one 10 days old fails, saying so (telemetry/commands/devices/replay.py).
            metric=self.queue.metric_approximate_age_of_oldest_message(period=PERIOD, statistic="Maximum"),
            threshold=EXPIRY_WARNING.to_seconds(),
            evaluation_periods=1,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
