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
# The bytes-in alarm: 5-minute averages, three in a row (15 minutes), so a burst (producers'
# retries, a restarted broker catching up) does not page; what sizing got wrong lasts. Copying that
# lasts longer does page where replication is counted: a partition reassignment or a replaced
# broker rebuilding its replicas ("received from other brokers"), which the description names.
BYTES_IN_PERIOD = Duration.minutes(5)
BYTES_IN_PERIODS = 3


def cluster_metric(cluster_name: str, name: str, statistic: str) -> cloudwatch.Metric:
    return cloudwatch.Metric(
        namespace=NAMESPACE,
        metric_name=name,
        dimensions_map={"Cluster Name": cluster_name},
        statistic=statistic,
        period=PERIOD,
    )


def broker_metric(cluster_name: str, broker_id: int, name: str, statistic: str,
                  period: Duration = PERIOD) -> cloudwatch.Metric:  # fmt: skip
    return cloudwatch.Metric(
        namespace=NAMESPACE,
        metric_name=name,
        dimensions_map={"Cluster Name": cluster_name, "Broker ID": str(broker_id)},
        statistic=statistic,
        period=period,
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


def broker_bytes_in(cluster_name: str, broker_id: int, *, replication: bool) -> cloudwatch.MathExpression:
    """Bytes per second a broker writes to its volume: from clients (BytesInPerSec, its leaders)
    plus, with `replication`, from the other brokers (ReplicationBytesInPerSec, its followers).
    Amazon MSK Developer Guide, "Amazon MSK metrics for monitoring Standard brokers with
    CloudWatch": BytesInPerSec at DEFAULT ("received from clients ... available per broker and also
    per topic"), ReplicationBytesInPerSec from PER_BROKER ("received from other brokers"), both with
    Cluster Name and Broker ID (stacks/sizing.py REPLICATION_METRIC_LEVELS)."""
    clients = f"clients{broker_id}"
    metrics = {clients: broker_metric(cluster_name, broker_id, "BytesInPerSec", "Average", BYTES_IN_PERIOD)}
    expression = clients
    if replication:
        followers = f"replication{broker_id}"
        metrics[followers] = broker_metric(cluster_name, broker_id, "ReplicationBytesInPerSec", "Average", BYTES_IN_PERIOD)
        # A broker that leads nothing, or follows nothing, for a while publishes no point for that
        # metric: it took in nothing of that kind, not an unknown amount.
        expression = f"FILL({clients}, 0) + FILL({followers}, 0)"
    return cloudwatch.MathExpression(
        expression=expression,
        using_metrics=metrics,
        label=f"broker {broker_id}",
        period=BYTES_IN_PERIOD,
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
        bytes_in_alarm_bytes_s: float,
        bytes_in_counts_replication: bool,
        compression_ratio: float,
        environment: str,
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
            # The threshold is the capacity model's (sizing.broker_bytes_in_alarm_bytes_s), so a
            # compression ratio declared too high pages here, not when the disk is full.
            self._alarm(
                f"Broker{broker}BytesIn",
                broker_bytes_in(cluster_name, broker, replication=bytes_in_counts_replication),
                threshold=bytes_in_alarm_bytes_s,
                periods=BYTES_IN_PERIODS,
                description=f"Broker {broker} took in at least {bytes_in_alarm_bytes_s / 2**20:,.1f} MiB/s "
                f"({'from clients and replication' if bytes_in_counts_replication else 'from clients'}) for "
                f"{BYTES_IN_PERIODS * BYTES_IN_PERIOD.to_minutes()} minutes: the brokers take in more than "
                f"sizing assumed at workload.compression_ratio {compression_ratio:g} (the fullest broker's "
                "share at the declared peak, times the model's one-zone-down margin), so their disks fill "
                "sooner than sized. Measure the ratio with `telemetry compression` and resize: "
                f"`telemetry capacity --env {environment}`"
                + (". A partition reassignment, or a replaced broker rebuilding its replicas, raises "
                   "ReplicationBytesInPerSec too: if one is running, this clears when it ends"
                   if bytes_in_counts_replication else ""),
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
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
        treat_missing_data: cloudwatch.TreatMissingData = cloudwatch.TreatMissingData.MISSING,
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
            treat_missing_data=treat_missing_data,
        )
        self.alarms.append(alarm)
