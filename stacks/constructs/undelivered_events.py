"""Where a lifecycle event goes when EventBridge could not start its state machine, and the alarms
that say so.

EventBridge retries a target within the target's RetryPolicy, then drops the event unless the
target has a dead-letter queue; errors that cannot pass (no permission, no such target) go to the
queue at once, without retries (EventBridge User Guide, "Event retry policy and using dead-letter
queues"). Each message is the event, with the attributes RULE_ARN, TARGET_ARN, ERROR_CODE,
ERROR_MESSAGE, EXHAUSTED_RETRY_CONDITION and RETRY_ATTEMPTS (same page). A terminate event that
lands here means a node whose drain never started: docs/day-2.md's failure modes say what to do.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_events as events
from aws_cdk import aws_sns as sns
from constructs import Construct

from stacks.constructs.alarm_topic import notifying_alarm
from stacks.constructs.dead_letter_queue import dead_letter_queue

class UndeliveredEventsQueue(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, queue_name: str, alarm_topic: sns.ITopic) -> None:
        super().__init__(scope, construct_id)
        # EventBridge writes to it (a customer managed key would need a key policy granting
        # events.amazonaws.com).
        self.queue = dead_letter_queue(
            self,
            queue_name=queue_name,
            why_no_further_queue="This queue is itself the dead-letter queue of the lifecycle rules' EventBridge "
            "targets; an operator reads its messages by hand, so nothing consumes it that could need another.",
        )
        self._action = cloudwatch_actions.SnsAction(alarm_topic)
        notifying_alarm(
            self,
            "EventsUndelivered",
            action=self._action,
            description=(
                f"A scaling-group lifecycle event could not start its state machine and is in {queue_name}: "
                "its node was never joined or drained (docs/day-2.md: failure modes)"
            ),
            metric=self.queue.metric_approximate_number_of_messages_visible(
                period=cdk.Duration.minutes(1), statistic="Maximum"
            ),
            threshold=1,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )

    def watch(self, rule: events.Rule, label: str) -> None:
        """Alarm when EventBridge could not even put one of `rule`'s events in the queue
        (InvocationsFailedToBeSentToDlq, EventBridge User Guide, "Monitoring"): it is lost."""
        notifying_alarm(
            self,
            f"{label}EventsLost",
            action=self._action,
            description=f"A {label} lifecycle event could not start its state machine nor reach the queue: it is lost",
            metric=cloudwatch.Metric(
                namespace="AWS/Events",
                metric_name="InvocationsFailedToBeSentToDlq",
                dimensions_map={"RuleName": rule.rule_name},
                statistic="Sum",
                period=cdk.Duration.minutes(5),
            ),
            threshold=1,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
