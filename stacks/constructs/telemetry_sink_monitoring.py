"""Alarms and dashboard widgets of the telemetry sink (the Managed Flink application).

Metrics name the application by its physical name, so the widgets can live on the monitoring
stack's dashboard without a reference back to this stack. All are published by the service at
the application's metrics level APPLICATION, with the single dimension `Application`.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_sns as sns
from constructs import Construct

from stacks.constructs.alarm_topic import notifying_alarm
from stacks.naming import DEAD_LETTER_METRIC, FLINK_METRICS_NAMESPACE

PERIOD = Duration.minutes(1)
WINDOW = Duration.minutes(5)


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


def new_dead_letters(application_name: str) -> cloudwatch.MathExpression:
    # The job's counter is cumulative since it (re)started: the increase over the window is the
    # number of records dead-lettered in it (a restart resets it, which reads as negative).
    return cloudwatch.MathExpression(
        expression="DIFF(deadletters)",
        using_metrics={"deadletters": application_metric(application_name, DEAD_LETTER_METRIC, "Maximum", period=WINDOW)},
        label="records dead-lettered per 5 minutes",
        period=WINDOW,
    )


class TelemetrySinkMonitoring(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        application_name: str,
        consumer_lag_alarm_records: int,
        dead_letter_alarm_records: int,
        alarm_topic: sns.ITopic,
        dashboard: cloudwatch.Dashboard,
    ) -> None:
        super().__init__(scope, construct_id)
        self._application_name = application_name
        self._action = actions.SnsAction(alarm_topic)
        self.alarms: list[cloudwatch.Alarm] = []
        app = application_name

        downtime = application_metric(app, "downtime", "Average")
        self._alarm(
            "Downtime",
            downtime,
            threshold=0,
            periods=3,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            description="The Flink job has been failing or restarting for 3 minutes: no telemetry reaches S3",
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

        dashboard.add_widgets(
            cloudwatch.TextWidget(markdown=f"## Telemetry sink `{app}` (Managed Flink)", width=24, height=1),
            cloudwatch.GraphWidget(
                title="Availability",
                left=[downtime],
                right=[application_metric(app, "KPUs", "Maximum", label="KPUs")],
                left_annotations=[cloudwatch.HorizontalAnnotation(value=0, label="downtime alarm above")],
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
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="Dead-letter records",
                left=[new_dead_letters(app)],
                right=[application_metric(app, DEAD_LETTER_METRIC, "Maximum", label="since start")],
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
            # A stopped application publishes nothing; that is not an outage of a running one.
            treat_missing_data=cloudwatch.TreatMissingData.MISSING,
        )
        self.alarms.append(alarm)
