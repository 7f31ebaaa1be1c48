"""Alarms and dashboard widgets for the MSK cluster.

Metrics name the cluster by its physical name, so widgets can live on the monitoring stack's
dashboard without a cross-stack reference back to the MSK stack.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_sns as sns
from constructs import Construct

from stacks.constructs.alarm_topic import notifying_alarm

NAMESPACE = "AWS/Kafka"
PERIOD = Duration.minutes(1)


def cluster_metric(cluster_name: str, name: str, statistic: str) -> cloudwatch.Metric:
    return cloudwatch.Metric(
        namespace=NAMESPACE,
        metric_name=name,
        dimensions_map={"Cluster Name": cluster_name},
        statistic=statistic,
        period=PERIOD,
    )


def broker_metric(cluster_name: str, broker_id: int, name: str, statistic: str) -> cloudwatch.Metric:
    return cloudwatch.Metric(
        namespace=NAMESPACE,
        metric_name=name,
        dimensions_map={"Cluster Name": cluster_name, "Broker ID": str(broker_id)},
        statistic=statistic,
        period=PERIOD,
        label=f"broker {broker_id}",
    )


def broker_cpu(cluster_name: str, broker_id: int) -> cloudwatch.MathExpression:
    return cloudwatch.MathExpression(
        # Ids must be unique within a graph that shows several brokers.
        expression=f"user{broker_id} + system{broker_id}",
        using_metrics={
            f"user{broker_id}": broker_metric(cluster_name, broker_id, "CpuUser", "Average"),
            f"system{broker_id}": broker_metric(cluster_name, broker_id, "CpuSystem", "Average"),
        },
        label=f"broker {broker_id}",
        period=PERIOD,
    )


class MskMonitoring(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        broker_count: int,
        cpu_alarm_percent: int,
        disk_alarm_percent: int,
        alarm_topic: sns.ITopic,
        dashboard: cloudwatch.Dashboard,
    ) -> None:
        super().__init__(scope, construct_id)
        self._cluster_name = cluster_name
        self._action = actions.SnsAction(alarm_topic)
        self.alarms: list[cloudwatch.Alarm] = []
        brokers = range(1, broker_count + 1)

        for broker in brokers:
            self._alarm(
                f"Broker{broker}Cpu",
                broker_cpu(cluster_name, broker),
                threshold=cpu_alarm_percent,
                periods=15,
                description=f"CPU of broker {broker} above {cpu_alarm_percent}% for 15 minutes: "
                "headroom for a broker or zone failure is gone",
            )
            self._alarm(
                f"Broker{broker}Disk",
                broker_metric(cluster_name, broker, "KafkaDataLogsDiskUsed", "Maximum"),
                threshold=disk_alarm_percent,
                periods=5,
                description=f"Data disk of broker {broker} above {disk_alarm_percent}% used",
            )
        under_replicated = cloudwatch.MathExpression(
            expression=f"SUM([{', '.join(f'b{b}' for b in brokers)}])",
            using_metrics={
                f"b{b}": broker_metric(cluster_name, b, "UnderReplicatedPartitions", "Maximum") for b in brokers
            },
            label="under-replicated partitions",
            period=PERIOD,
        )
        self._alarm(
            "UnderReplicatedPartitions",
            under_replicated,
            threshold=1,
            periods=5,
            description="Partitions under-replicated for 5 minutes: writes with acks=all are at risk",
        )
        offline = cluster_metric(cluster_name, "OfflinePartitionsCount", "Maximum")
        self._alarm(
            "OfflinePartitions",
            offline,
            threshold=1,
            periods=1,
            description="Partitions offline: producers to them fail",
        )
        # Each broker reports 1 if it is the active controller; the sum must be exactly 1.
        active_controllers = cluster_metric(cluster_name, "ActiveControllerCount", "Sum")
        self._alarm(
            "ActiveControllerCount",
            cloudwatch.MathExpression(
                expression="ABS(controllers - 1)",
                using_metrics={"controllers": active_controllers},
                label="active controllers away from 1",
                period=PERIOD,
            ),
            threshold=1,
            periods=3,
            description="The cluster does not have exactly one active controller",
        )

        dashboard.add_widgets(
            cloudwatch.TextWidget(markdown=f"## MSK cluster `{cluster_name}`", width=24, height=1),
            cloudwatch.GraphWidget(
                title="Broker CPU (user + system, %)",
                left=[broker_cpu(cluster_name, b) for b in brokers],
                left_annotations=[cloudwatch.HorizontalAnnotation(value=cpu_alarm_percent, label="alarm")],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Data disk used (%)",
                left=[broker_metric(cluster_name, b, "KafkaDataLogsDiskUsed", "Maximum") for b in brokers],
                left_annotations=[cloudwatch.HorizontalAnnotation(value=disk_alarm_percent, label="alarm")],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Partition health",
                left=[under_replicated, offline],
                right=[active_controllers],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Bytes in per second",
                left=[broker_metric(cluster_name, b, "BytesInPerSec", "Average") for b in brokers],
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="Messages in per second",
                left=[broker_metric(cluster_name, b, "MessagesInPerSec", "Average") for b in brokers],
                width=12,
            ),
        )

    def _alarm(
        self,
        construct_id: str,
        metric: cloudwatch.IMetric,
        *,
        threshold: float,
        periods: int,
        description: str,
    ) -> None:
        alarm = notifying_alarm(
            self,
            construct_id,
            action=self._action,
            alarm_name=f"{self._cluster_name}-msk-{construct_id}",
            description=description,
            metric=metric,
            threshold=threshold,
            evaluation_periods=periods,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.MISSING,
        )
        self.alarms.append(alarm)
