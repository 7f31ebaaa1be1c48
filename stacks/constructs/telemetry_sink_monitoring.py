"""Alarms and dashboard widgets of the telemetry sink (the Managed Flink application).

Metrics name the application by its physical name, so the widgets can live on the monitoring
stack's dashboard without a reference back to this stack. All are published by the service at
the application's metrics level APPLICATION, with the single dimension `Application` (Managed
Service for Apache Flink Developer Guide, "Metrics and dimensions": "The default level is
Application"; "Use custom metrics": metrics of the `kinesisanalytics` group "are published at the
Application level by default", namespace AWS/KinesisAnalytics).

The job's own counts (dead letters, out-of-range device clocks) are each one counter in one task
(flink/, CountedInOneTask): no page says how the service turns several subtasks' counters into
one series, and a statistic over several cumulative counters does not count what each added.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_sns as sns
from constructs import Construct

from stacks.constructs.alarm_topic import notifying_alarm
from stacks.naming import CLOCK_OUT_OF_RANGE_METRIC, DEAD_LETTER_METRIC, FLINK_METRICS_NAMESPACE

PERIOD = Duration.minutes(1)
WINDOW = Duration.minutes(5)


@dataclass(frozen=True)
class JobHealthMetrics:
    """Which of Managed Flink's job health metrics a runtime publishes."""

    running: str  # ms the job has been RUNNING without interruption; 0 in any other state
    outages: tuple[str, ...]  # ms the job has been in a state of an outage; 0 otherwise


# Managed Service for Apache Flink, "Metrics and dimensions"
# (https://docs.aws.amazon.com/managed-flink/latest/java/metrics-dimensions.html), Flink 2.2
# metric changes: "The `uptime` and `downtime` metrics are deprecated and will be removed in a
# future release. Migrate to the new state-specific metrics." `runningTime`: "Use as a direct
# replacement for the deprecated uptime metric"; `downtime`: "Use `restartingTime`,
# `cancellingTime`, and/or `failingTime` instead" (each "Available from Flink 2.2", so FLINK-1_20
# keeps uptime and downtime, which are not deprecated there). The 2.2 metrics are Flink's job status
# gauges: "if the job is currently in that state, return the time since the job transitioned into
# that state, otherwise return 0" (Flink MetricOptions.JobStatusMetrics.CURRENT_TIME).
JOB_HEALTH_METRICS = {
    "FLINK-1_20": JobHealthMetrics(running="uptime", outages=("downtime",)),
    "FLINK-2_2": JobHealthMetrics(running="runningTime", outages=("restartingTime", "failingTime", "cancellingTime")),
}


def application_metric(
    application_name: str, name: str, statistic: str, *, period: Duration = PERIOD, label: str | None = None
) -> cloudwatch.Metric:
    return cloudwatch.Metric(
        namespace=FLINK_METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map={"Application": application_name},
        statistic=statistic,
        period=period,
        label=label,
    )


def failed_checkpoints_rate(application_name: str) -> cloudwatch.MathExpression:
    # numberOfFailedCheckpoints counts failures since the job (re)started; its rate is > 0 while
    # checkpoints are failing (the expression AWS recommends for this alarm).
    return cloudwatch.MathExpression(
        expression="RATE(failed)",
        using_metrics={"failed": application_metric(application_name, "numberOfFailedCheckpoints", "Average", period=WINDOW)},
        label="failed checkpoints per second",
        period=WINDOW,
    )


def increase(application_name: str, counter: str, label: str) -> cloudwatch.MathExpression:
    """What one of the job's counters added over the window. The counter is cumulative since the
    job (re)started and lives in one task, so its Maximum is the job's total and the difference
    between windows is what was added.

    A restarted task registers a new counter that starts at 0 (CountedInOneTask.open; Flink keeps no
    metric in a snapshot), so the window after a restart usually has a Maximum below the last one
    before it and DIFF goes negative. That window counts from zero instead: its Maximum is what the
    restarted job added. A restart whose new count already exceeds the old Maximum in that window
    reads as a positive DIFF and undercounts by the old Maximum; nothing in the series tells the two
    apart."""
    total = counter.lower()  # an id of its own, so both counts can share a graph
    # CloudWatch User Guide, "Using metric math"
    # (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/using-metric-math.html): DIFF
    # "Returns the difference between each value in the time series and the preceding value";
    # IF(TS Comparison Operator S, S | TS, S | TS), comparison operators == != <= >= < >, evaluated
    # "separately for every timestamp".
    return cloudwatch.MathExpression(
        expression=f"IF(DIFF({total}) < 0, {total}, DIFF({total}))",
        using_metrics={total: application_metric(application_name, counter, "Maximum", period=WINDOW)},
        label=label,
        period=WINDOW,
    )


def new_dead_letters(application_name: str) -> cloudwatch.MathExpression:
    return increase(application_name, DEAD_LETTER_METRIC, "records dead-lettered per 5 minutes")


def new_clock_out_of_range(application_name: str) -> cloudwatch.MathExpression:
    return increase(application_name, CLOCK_OUT_OF_RANGE_METRIC, "readings filed by ingest time per 5 minutes")


class TelemetrySinkMonitoring(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        application_name: str,
        runtime: str,
        consumer_lag_alarm_records: int,
        dead_letter_alarm_records: int,
        clock_alarm_records: int,
        not_running_alarm_minutes: int,
        alarm_topic: sns.ITopic,
        dashboard: cloudwatch.Dashboard,
    ) -> None:
        super().__init__(scope, construct_id)
        self._application_name = application_name
        self._action = actions.SnsAction(alarm_topic)
        self.alarms: list[cloudwatch.Alarm] = []
        app = application_name

        health = JOB_HEALTH_METRICS[runtime]
        # The minimum over a minute is 0 if any sample in it found the job out of RUNNING (restarting,
        # failing, cancelling, still starting), so a job in a restart loop cannot hide behind an average.
        running = application_metric(app, health.running, "Minimum", label=f"{health.running} (ms, 0 = not running)")
        # A deploy (UpdateApplication), an autoscaling step or a recovered failure restarts the job
        # from its snapshot, minutes without RUNNING that are not an outage: the alarm waits
        # not_running_alarm_minutes in a row, so restarts shorter than that stay quiet.
        self._alarm(
            "NotRunning",
            running,
            threshold=1,
            periods=not_running_alarm_minutes,
            comparison=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            description=f"The Flink job has not been running for {not_running_alarm_minutes} minutes in a row "
            "(restarting, failing, cancelling, or the application is stopped and reports nothing): no telemetry "
            "reaches S3. Deploys and autoscaling restarts shorter than that do not fire it",
            # A stopped application publishes no metrics at all: that is an outage too, not an
            # absence of evidence.
            treat_missing_data=cloudwatch.TreatMissingData.BREACHING,
        )
        self._alarm(
            "CheckpointFailures",
            failed_checkpoints_rate(app),
            threshold=0,
            periods=1,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            description="Checkpoints failed in the last 5 minutes: the file sink commits no new files "
            "until one succeeds, so data stops appearing in Athena",
        )
        lag = application_metric(app, "records_lag_max", "Maximum", label="records behind latest (max partition)")
        self._alarm(
            "ConsumerLag",
            lag,
            threshold=consumer_lag_alarm_records,
            periods=5,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            description=f"The Kafka source has been at least {consumer_lag_alarm_records} records behind the "
            "newest offset of a partition for 5 minutes: the sink is not keeping up",
        )
        self._alarm(
            "DeadLetters",
            new_dead_letters(app),
            threshold=dead_letter_alarm_records,
            periods=1,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            description=f"At least {dead_letter_alarm_records} malformed records went to the dead-letter prefix "
            "in 5 minutes: a producer is sending messages the sink cannot parse",
        )
        self._alarm(
            "DeviceClocksOutOfRange",
            new_clock_out_of_range(app),
            threshold=clock_alarm_records,
            periods=1,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            description=f"At least {clock_alarm_records} readings in 5 minutes carried a device time before the "
            "table's first day or too far ahead of their ingest time; they are filed by ingest time (docs/lake.md, "
            "Device clocks): find the devices with SELECT device_id ... WHERE event_time < ... OR event_time > ingest_time",
        )

        dashboard.add_widgets(
            cloudwatch.TextWidget(markdown=f"## Telemetry sink `{app}` (Managed Flink)", width=24, height=1),
            cloudwatch.GraphWidget(
                title="Availability",
                left=[running],
                right=[application_metric(app, name, "Maximum", label=f"{name} (ms)") for name in health.outages],
                left_annotations=[cloudwatch.HorizontalAnnotation(value=0, label="not running: alarm")],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Checkpoints",
                left=[application_metric(app, "numberOfFailedCheckpoints", "Maximum", label="failed (since start)")],
                right=[application_metric(app, "lastCheckpointDuration", "Maximum", label="last duration (ms)")],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Kafka consumer lag (records)",
                left=[lag],
                left_annotations=[cloudwatch.HorizontalAnnotation(value=consumer_lag_alarm_records, label="alarm")],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Records per second",
                left=[
                    application_metric(app, "numRecordsInPerSecond", "Average", label="in"),
                    application_metric(app, "numRecordsOutPerSecond", "Average", label="out"),
                ],
                right=[application_metric(app, "KPUs", "Maximum", label="KPUs")],
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="Dead-letter records and wrong device clocks",
                left=[new_dead_letters(app), new_clock_out_of_range(app)],
                right=[application_metric(app, DEAD_LETTER_METRIC, "Maximum", label="dead letters since start")],
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
        comparison: cloudwatch.ComparisonOperator,
        description: str,
        # The rate alarms: a stopped application publishes nothing, which is not a checkpoint
        # failure, lag or dead letter (the NotRunning alarm covers a stopped application).
        treat_missing_data: cloudwatch.TreatMissingData = cloudwatch.TreatMissingData.MISSING,
    ) -> None:
        alarm = notifying_alarm(
            self,
            construct_id,
            action=self._action,
            alarm_name=f"{self._application_name}-{construct_id}",
            description=description,
            metric=metric,
            threshold=threshold,
            evaluation_periods=periods,
            comparison=comparison,
            treat_missing_data=treat_missing_data,
        )
        self.alarms.append(alarm)
