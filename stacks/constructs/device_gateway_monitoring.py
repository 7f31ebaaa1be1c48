"""Alarms and dashboard widgets of the device gateway's topic rule.

Metrics (namespace AWS/IoT, AWS IoT Developer Guide, "AWS IoT metrics and dimensions"): rule
metrics `TopicMatch`, `ParseError` and `RuleMessageThrottled` by `RuleName`; rule action metrics
`Success`/`Failure` and `ErrorActionSuccess`/`ErrorActionFailure` by `RuleName` and `ActionType`.
The page lists no ActionType values, and a guessed value is a series that never exists (an alarm
on it stays OK forever), so the action metrics are read with a Metrics Insights query over the
schema (RuleName, ActionType) filtered on the rule alone: every ActionType the rule has, summed.
The rule has one action and one error action, so that sum is theirs.
Message broker metrics `PublishIn.Success`/`PublishIn.Throttle` and `Connect.Success`/
`Connect.Throttle`/`Connect.ClientIDThrottle` are per account and region, by `Protocol`; these
count MQTT only (the devices' protocol), so another workload of the account shows up here too.
Widgets name the rule by its literal name: a token would make the monitoring stack depend on this
one, which already depends on it.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_sns as sns
from constructs import Construct

from stacks.constructs.alarm_topic import notifying_alarm
from stacks.naming import IOT_MQTT_PROTOCOL

NAMESPACE = "AWS/IoT"
PERIOD = Duration.minutes(5)
QUOTA_PERIOD = Duration.minutes(1)


def broker_metric(name: str, *, period: Duration = PERIOD, label: str | None = None) -> cloudwatch.Metric:
    return cloudwatch.Metric(
        namespace=NAMESPACE,
        metric_name=name,
        dimensions_map={"Protocol": IOT_MQTT_PROTOCOL},
        statistic="Sum",
        period=period,
        label=label or name,
    )


def per_second(metric_name: str, label: str) -> cloudwatch.MathExpression:
    """The metric's one-minute sum as a rate per second, comparable with a per-second quota."""
    return cloudwatch.MathExpression(
        expression="m / 60",
        using_metrics={"m": broker_metric(metric_name, period=QUOTA_PERIOD)},
        label=label,
        period=QUOTA_PERIOD,
    )


def rule_metric(rule_name: str, name: str, *, label: str | None = None) -> cloudwatch.Metric:
    """A rule metric (dimension RuleName only)."""
    return cloudwatch.Metric(
        namespace=NAMESPACE,
        metric_name=name,
        dimensions_map={"RuleName": rule_name},
        statistic="Sum",
        period=PERIOD,
        label=label or name,
    )


def rule_action_metric(rule_name: str, name: str, *, label: str) -> cloudwatch.MathExpression:
    """A rule action metric summed over every ActionType of the rule (Metrics Insights)."""
    return cloudwatch.MathExpression(
        expression=f"SELECT SUM({name}) FROM SCHEMA(\"{NAMESPACE}\", ActionType, RuleName) WHERE RuleName = '{rule_name}'",
        using_metrics={},
        label=label,
        period=PERIOD,
    )


class DeviceGatewayMonitoring(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        rule_name: str,
        alarm_name_prefix: str,
        failure_alarm_messages: int,
        publish_quota_per_s: int,
        connect_quota_per_s: int,
        quota_alarm_percent: int,
        alarm_topic: sns.ITopic,
        dashboard: cloudwatch.Dashboard,
    ) -> None:
        super().__init__(scope, construct_id)
        action = actions.SnsAction(alarm_topic)
        kafka_failures = rule_action_metric(rule_name, "Failure", label="Kafka action failures")
        error_action_failures = rule_action_metric(
            rule_name, "ErrorActionFailure", label="error action failures (messages lost)"
        )
        error_action_deliveries = rule_action_metric(
            rule_name, "ErrorActionSuccess", label="messages kept by the error action"
        )
        throttled = rule_metric(rule_name, "RuleMessageThrottled", label="messages throttled")
        matched = rule_metric(rule_name, "TopicMatch", label="messages matched")
        delivered = rule_action_metric(rule_name, "Success", label="delivered to Kafka")
        parse_errors = rule_metric(rule_name, "ParseError", label="parse errors")
        publish_throttles = broker_metric("PublishIn.Throttle", label="publishes throttled (per connection or account)")
        connect_throttles = cloudwatch.MathExpression(
            expression="account + client",
            using_metrics={
                "account": broker_metric("Connect.Throttle"),
                "client": broker_metric("Connect.ClientIDThrottle"),
            },
            label="connects throttled (account rate or one client id)",
            period=PERIOD,
        )
        publish_rate = per_second("PublishIn.Success", "publishes/s accepted")
        connect_rate = per_second("Connect.Success", "connects/s accepted")
        share = quota_alarm_percent / 100

        self.alarms = [
            notifying_alarm(
                self,
                alarm_id,
                action=action,
                alarm_name=f"{alarm_name_prefix}-{alarm_id}",
                description=description,
                metric=metric,
                threshold=threshold,
                evaluation_periods=1,
                comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )
            for alarm_id, metric, threshold, description in (
                (
                    "KafkaActionFailures",
                    kafka_failures,
                    failure_alarm_messages,
                    f"Device messages the Kafka action could not write to MSK (rule {rule_name}); "
                    "they wait in the failed-deliveries queue for `telemetry devices replay`",
                ),
                (
                    "ErrorActionFailures",
                    error_action_failures,
                    1,
                    f"Failed device messages the error action could not keep either (rule {rule_name}): "
                    "these messages are lost",
                ),
                (
                    "RuleThrottles",
                    throttled,
                    failure_alarm_messages,
                    f"Device messages throttled by the rules engine (rule {rule_name}): the account's "
                    "rules quota is reached",
                ),
                (
                    "PublishThrottles",
                    publish_throttles,
                    1,
                    "MQTT publishes throttled by AWS IoT Core: a connection above 100 publishes/s or the "
                    "account above its inbound publish quota; throttled messages never reach the rule",
                ),
                (
                    "ConnectThrottles",
                    connect_throttles,
                    1,
                    "MQTT connects throttled by AWS IoT Core: the account's connect rate quota, or one "
                    "client id reconnecting too often",
                ),
            )
        ]
        # Near the quotas: three minutes in a row above quota_alarm_percent of the account's rate.
        for alarm_id, rate, quota, what in (
            ("PublishRateNearQuota", publish_rate, publish_quota_per_s, "inbound publish"),
            ("ConnectRateNearQuota", connect_rate, connect_quota_per_s, "connect"),
        ):
            self.alarms.append(
                notifying_alarm(
                    self,
                    alarm_id,
                    action=action,
                    alarm_name=f"{alarm_name_prefix}-{alarm_id}",
                    description=f"MQTT {what} rate above {quota_alarm_percent}% of the account's quota of "
                    f"{quota}/s for 3 minutes (device_gateway config): raise the quota before devices are throttled",
                    metric=rate,
                    threshold=quota * share,
                    evaluation_periods=3,
                    comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                    treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                )
            )

        dashboard.add_widgets(
            cloudwatch.TextWidget(markdown=f"## Device gateway (IoT rule `{rule_name}`)", width=24, height=1),
            cloudwatch.GraphWidget(title="Rule messages (per 5 min)", left=[matched, delivered], width=8),
            cloudwatch.GraphWidget(
                title="Failures (per 5 min)",
                left=[kafka_failures, error_action_failures, throttled, parse_errors],
                width=8,
            ),
            cloudwatch.GraphWidget(title="Error action deliveries (per 5 min)", left=[error_action_deliveries], width=8),
            cloudwatch.GraphWidget(
                title="MQTT publishes/s against the account quota",
                left=[publish_rate],
                left_annotations=[cloudwatch.HorizontalAnnotation(value=publish_quota_per_s, label="quota")],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="MQTT connects/s against the account quota",
                left=[connect_rate],
                left_annotations=[cloudwatch.HorizontalAnnotation(value=connect_quota_per_s, label="quota")],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="MQTT throttles (per 5 min)", left=[publish_throttles, connect_throttles], width=8
            ),
        )
