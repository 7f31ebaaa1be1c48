"""The scaling node group (secondary node type): an Auto Scaling group whose launches and
terminations wait in lifecycle hooks until the node lifecycle automation has joined the node to
the cluster or drained it out.

The group is created empty, with its hooks in its own definition (LifecycleHookSpecificationList):
a hook created as a separate resource after the group does not cover the instances the group
launched before it existed, and before the cluster is bootstrapped no instance could join
anyway. `telemetry cluster scale --env ENV` brings the group to its configured size once the cluster
runs, and every instance it launches goes through the join.

Scale-out follows CPU by target tracking. Scale-in is a separate simple scaling policy that
removes one instance at a time: simple scaling waits until the previous activity (including its
terminate lifecycle hook, i.e. the whole drain) has finished and the cooldown has passed before it
acts again, which target tracking would not.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration, Tags
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from stacks.compliance import acknowledge
from stacks.constructs.node_instance import NodeRole, node_launch_template
from stacks.naming import CLUSTER_TAG, NODE_TYPE_TAG, SCALING_NODE_TYPE

# Preparing a Windows node and joining it takes minutes; its CPU says little before that.
INSTANCE_WARMUP = Duration.minutes(15)
SCALE_IN_COOLDOWN_SECONDS = 300


class ScalingNodeGroup(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        cluster_name: str,
        group_name: str,
        instance_type: str,
        max_nodes: int,
        security_groups: Sequence[ec2.ISecurityGroup],
        node_role: NodeRole,
        user_data: ec2.UserData,
        root_volume_gib: int,
        data_volume_gib: int,
        launch_hook_name: str,
        terminate_hook_name: str,
        heartbeat_seconds: int,
        cpu_target_percent: int,
        scale_in_cpu_percent: int,
    ) -> None:
        super().__init__(scope, construct_id)
        launch_template = node_launch_template(
            self,
            "LaunchTemplate",
            instance_type=instance_type,
            role=node_role.role,
            security_groups=security_groups,
            user_data=user_data,
            root_volume_gib=root_volume_gib,
            data_volume_gib=data_volume_gib,
        )
        self.group = autoscaling.AutoScalingGroup(
            self,
            "Group",
            vpc=vpc,
            vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            launch_template=launch_template,
            auto_scaling_group_name=group_name,
            # Empty until telemetry cluster scale (or telemetry deploy) applies the configured sizes after bootstrap; with no
            # DesiredCapacity in the template, a later deployment leaves the live sizes alone.
            min_capacity=0,
            max_capacity=max_nodes,
            default_instance_warmup=INSTANCE_WARMUP,
            group_metrics=[autoscaling.GroupMetrics.all()],
            # The oldest node goes first: it has run longest since its last patching.
            termination_policies=[autoscaling.TerminationPolicy.OLDEST_INSTANCE],
        )
        for key, value in ((CLUSTER_TAG, cluster_name), (NODE_TYPE_TAG, SCALING_NODE_TYPE)):
            Tags.of(self.group).add(key, value)
        acknowledge(
            self.group,
            "AwsSolutions-AS2",
            "Nodes are replaced only when EC2 finds the machine impaired; load balancer health reflects "
            "applications, and terminating nodes for that would drain healthy capacity out of the cluster",
        )
        acknowledge(
            self.group,
            "AwsSolutions-AS3",
            "Every launch and termination is a lifecycle action that the node lifecycle automation picks "
            "up from EventBridge, and it alarms when a join or drain fails; SNS notices would duplicate that",
        )

        group = self.group.node.default_child
        assert isinstance(group, autoscaling.CfnAutoScalingGroup)
        group.lifecycle_hook_specification_list = [
            # A launch nobody completes must not leave a half-joined node in service: Auto
            # Scaling terminates it, and its terminate hook drains what it left in the cluster.
            autoscaling.CfnAutoScalingGroup.LifecycleHookSpecificationProperty(
                lifecycle_hook_name=launch_hook_name,
                lifecycle_transition="autoscaling:EC2_INSTANCE_LAUNCHING",
                default_result="ABANDON",
                heartbeat_timeout=heartbeat_seconds,
            ),
            # A terminate action nobody completes is ABANDONed, and an ABANDONed one keeps its
            # instance (below): a node is never terminated undrained, whatever became of the drain.
            autoscaling.CfnAutoScalingGroup.LifecycleHookSpecificationProperty(
                lifecycle_hook_name=terminate_hook_name,
                lifecycle_transition="autoscaling:EC2_INSTANCE_TERMINATING",
                default_result="ABANDON",
                heartbeat_timeout=heartbeat_seconds,
            ),
        ]
        # Retention: a terminate action ABANDONed (by a failed drain, or by its timeout with that
        # default result) leaves the instance Terminating:Retained, running, outside desired
        # capacity, until someone calls TerminateInstanceInAutoScalingGroup (Amazon EC2 Auto Scaling
        # User Guide, "Control instance retention with instance lifecycle policies" and "Manage
        # retained instances"; API Reference, RetentionTriggers: retain | terminate).
        group.instance_lifecycle_policy = autoscaling.CfnAutoScalingGroup.InstanceLifecyclePolicyProperty(
            retention_triggers=autoscaling.CfnAutoScalingGroup.RetentionTriggersProperty(terminate_hook_abandon="retain")
        )

        self.group.scale_on_cpu_utilization(
            "ScaleOutOnCpu",
            target_utilization_percent=cpu_target_percent,
            disable_scale_in=True,
            estimated_instance_warmup=INSTANCE_WARMUP,
        )
        scale_in = autoscaling.CfnScalingPolicy(
            self,
            "ScaleInOneNode",
            auto_scaling_group_name=self.group.auto_scaling_group_name,
            policy_type="SimpleScaling",
            adjustment_type="ChangeInCapacity",
            scaling_adjustment=-1,
            cooldown=str(SCALE_IN_COOLDOWN_SECONDS),
        )
        idle = cloudwatch.Alarm(
            self,
            "IdleAlarm",
            alarm_description=f"{group_name}: CPU below {scale_in_cpu_percent}% for 15 minutes; remove one node",
            metric=cloudwatch.Metric(
                namespace="AWS/EC2",
                metric_name="CPUUtilization",
                dimensions_map={"AutoScalingGroupName": self.group.auto_scaling_group_name},
                statistic="Average",
                period=Duration.minutes(5),
            ),
            threshold=scale_in_cpu_percent,
            comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            evaluation_periods=3,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        alarm = idle.node.default_child
        assert isinstance(alarm, cloudwatch.CfnAlarm)
        alarm.alarm_actions = [scale_in.attr_arn]
