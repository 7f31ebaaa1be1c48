"""Alarms and dashboard widgets of the Service Fabric cluster.

Alarms (in this stack, to the environment's alarm topic): a management endpoint with no healthy
node (each seed's own recovery and impaired alarms are in stacks/constructs/seed_nodes.py).
Dashboard widgets (in the monitoring stack) name groups, alarms and load balancers by their
literal physical names: tokens would make the monitoring stack depend on the Service Fabric
stack, which already depends on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Aws
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_sns as sns
from constructs import Construct


def group_metric(group_name: str, metric_name: str, *, statistic: str = "Maximum", label: str | None = None) -> cloudwatch.Metric:
    return cloudwatch.Metric(
        namespace="AWS/AutoScaling",
        metric_name=metric_name,
        dimensions_map={"AutoScalingGroupName": group_name},
        statistic=statistic,
        label=label,
    )


def healthy_hosts(load_balancer_name: str, label: str) -> cloudwatch.MathExpression:
    # NLB metrics carry generated ids in their dimensions; a search by name needs none.
    return cloudwatch.MathExpression(
        expression=(
            "SEARCH('{AWS/NetworkELB,LoadBalancer,TargetGroup} MetricName=\"HealthyHostCount\" "
            f"\"net/{load_balancer_name}/\"', 'Minimum', 60)"
        ),
        label=label,
        using_metrics={},
    )


class ClusterMonitoring(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        management_endpoint: elbv2.NetworkTargetGroup,
        scaling_group_name: str,
        seed_alarm_names: Sequence[str],
        region: str,
        load_balancer_names: Mapping[str, str],
        alarm_topic: sns.ITopic,
        dashboard: cloudwatch.Dashboard,
    ) -> None:
        super().__init__(scope, construct_id)
        action = cloudwatch_actions.SnsAction(alarm_topic)
        cloudwatch.Alarm(
            self,
            "ManagementEndpointDown",
            alarm_description="No node answers on the management endpoint (19000): deployments will fail",
            metric=management_endpoint.metrics.healthy_host_count(statistic="Minimum"),
            threshold=1,
            comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            evaluation_periods=5,
        ).add_alarm_action(action)

        dashboard.add_widgets(
            cloudwatch.TextWidget(markdown=f"## Service Fabric cluster `{cluster_name}`", width=24, height=1),
            cloudwatch.GraphWidget(
                title="Scaling node group",
                left=[
                    group_metric(scaling_group_name, "GroupInServiceInstances", label="in service"),
                    group_metric(scaling_group_name, "GroupDesiredCapacity", label="desired"),
                    group_metric(scaling_group_name, "GroupPendingInstances", label="joining (pending)"),
                    group_metric(scaling_group_name, "GroupTerminatingInstances", label="draining (terminating)"),
                ],
                width=8,
            ),
            cloudwatch.AlarmStatusWidget(
                title="Seed nodes",
                alarms=[
                    cloudwatch.Alarm.from_alarm_arn(
                        self, f"SeedAlarm{index}", f"arn:{Aws.PARTITION}:cloudwatch:{region}:{Aws.ACCOUNT_ID}:alarm:{name}"
                    )
                    for index, name in enumerate(seed_alarm_names)
                ],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Load balancers: healthy nodes per port",
                left=[healthy_hosts(name, label) for label, name in load_balancer_names.items()],
                width=8,
            ),
        )
