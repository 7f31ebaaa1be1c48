"""Alarms and dashboard widgets of the node lifecycle automation.

Metrics come from the functions as embedded-metric-format logs (namespace and Cluster
dimension below) and from Step Functions. Widgets and alarms name everything by literal
physical names: tokens would make the monitoring stack depend on this one.
"""

from __future__ import annotations

from collections.abc import Mapping

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_sns as sns
from constructs import Construct

from stacks.constructs.alarm_topic import notifying_alarm
from stacks.naming import REFRESH_STOP_ALARMS, node_lifecycle_alarm_name


class LifecycleMonitoring(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        namespace: str,
        cluster_name: str,
        state_machine_arns: Mapping[str, str],  # label -> literal ARN
        reaper_interval_minutes: int,
        alarm_topic: sns.ITopic,
        dashboard: cloudwatch.Dashboard,
    ) -> None:
        super().__init__(scope, construct_id)
        action = cloudwatch_actions.SnsAction(alarm_topic)
        period = cdk.Duration.minutes(5)

        def metric(name: str, statistic: str = "Sum", label: str | None = None) -> cloudwatch.Metric:
            return cloudwatch.Metric(
                namespace=namespace,
                metric_name=name,
                dimensions_map={"Cluster": cluster_name},
                statistic=statistic,
                period=period,
                label=label or name,
            )

        def alarm(alarm_id: str, description: str, watched: cloudwatch.IMetric, evaluation_periods: int = 1) -> None:
            notifying_alarm(
                self,
                alarm_id,
                action=action,
                description=description,
                metric=watched,
                threshold=1,
                comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                evaluation_periods=evaluation_periods,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                alarm_name=node_lifecycle_alarm_name(cluster_name, alarm_id) if alarm_id in REFRESH_STOP_ALARMS else None,
            )

        alarm("DrainFailed", f"A scale-in drain of {cluster_name} failed or stalled (see the alarm topic's message)",
              metric("DrainsFailed"))
        alarm("JoinFailed", f"A scale-out join to {cluster_name} failed; the launch was abandoned", metric("JoinsFailed"))
        # The state machines count an alarm the topic refused after every retry, then go on;
        # the text is in the function's log ("undelivered_alarm"). This alarm's own
        # notification goes to the same topic, so it may not arrive either: the alarm state and
        # the dashboard show it.
        alarm("AlarmsUndelivered", f"An alarm of the {cluster_name} node lifecycle could not be published to the "
              "alarm topic; its text is in the scale-in/scale-out function's log", metric("AlarmsUndelivered"))
        alarm("JoinStopped", f"A scale-out join to {cluster_name} stopped because Auto Scaling no longer had its launch "
              "action (it timed out, or was completed outside the automation); the node was left as it is",
              metric("JoinsStopped"))
        alarm("LifecycleActionsRestarted",
              f"The reaper found a lifecycle action of {cluster_name}'s scaling group waiting with no execution (its "
              "event was lost) and started one; see the reaper's log (restarted_lifecycle_action)",
              metric("LifecycleActionsRestarted"))
        reaper_periods = max(3, -(-15 // reaper_interval_minutes))
        alarm("ZombiesRemain",
              f"Zombie nodes of {cluster_name} were seen in every reaper run for {reaper_periods * 5} minutes: "
              "the reaper cannot remove them",
              metric("ZombieNodes", "Minimum"), evaluation_periods=reaper_periods)
        alarm("SeedNodeDown", f"A seed node of {cluster_name} is Down; automation never touches seeds",
              metric("SeedNodesDown", "Maximum"), evaluation_periods=2)
        for label, arn in state_machine_arns.items():
            for failure in ("ExecutionsFailed", "ExecutionsTimedOut", "ExecutionsAborted"):
                alarm(f"{label}{failure}", f"{label} state machine of {cluster_name}: {failure}",
                      cloudwatch.Metric(namespace="AWS/States", metric_name=failure,
                                        dimensions_map={"StateMachineArn": arn}, statistic="Sum", period=period))

        dashboard.add_widgets(
            cloudwatch.TextWidget(markdown=f"## Node lifecycle ({cluster_name})", width=24, height=1),
            cloudwatch.GraphWidget(
                title="Drains: started, succeeded, failed",
                left=[metric("DrainsStarted"), metric("DrainsSucceeded"), metric("DrainsFailed")],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Drain and join duration (s)",
                left=[
                    metric("DrainDurationSeconds", "p50", "drain p50"),
                    metric("DrainDurationSeconds", "Maximum", "drain max"),
                    metric("JoinDurationSeconds", "Maximum", "join max"),
                ],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Joins, zombies, seed nodes down",
                left=[metric("JoinsSucceeded"), metric("JoinsFailed"), metric("AlarmsUndelivered")],
                right=[metric("ZombieNodes", "Maximum"), metric("SeedNodesDown", "Maximum")],
                width=8,
            ),
        )
