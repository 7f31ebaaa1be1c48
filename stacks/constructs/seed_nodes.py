"""The seed nodes (primary node type): fixed machines, each with one address for life.

Each seed is a single EC2 instance whose one network interface has a fixed primary private
address from the seed block of its zone's private subnet (stacks/seed_addresses.py), which the
network stack reserves so EC2 never hands it to anything else. That address is what Service
Fabric binds (ClusterConfig.json names it), what the HTTP gateway clients call, and what the
load balancers' instance targets reach: "traffic is routed to instances using the primary private
IP address" (Elastic Load Balancing, Network Load Balancer target groups). There is no second
interface, so no asymmetric routing within one subnet.

Why single instances and not groups of one: a replacement instance from a group would need the
same address, which only a second interface or a secondary address moved at boot could give,
and Windows configures neither by itself (a secondary address needs a static IP configuration,
EC2 User Guide "Configure a secondary private IPv4 address for your Windows instance"). A seed
instead stays the same machine: on a host failure the recovery alarm below moves it to healthy
hardware with "the same instance ID, private IP addresses, ... and all instance metadata" and its
EBS volumes (EC2 User Guide, "Automatic instance recovery"), so Service Fabric sees a reboot, not
a new node. Termination protection keeps it from being removed by hand.

A deployment never touches a running seed. Every instance property that would replace it
(ImageId, LaunchTemplate, SubnetId, PrivateIpAddress are create-only in the AWS::EC2::Instance
schema) or stop it (UserData, InstanceType) is held in version 1 of the seed launch template,
which the instances name by number: later versions (a new monthly Windows image, a changed
preparation script) reach only seeds built after them. A seed lost for good (its zone or its
volumes gone) is rebuilt by an operator; nothing here does it automatically.

Seeds sit in a spread placement group (no two on one rack) and their data volumes are
snapshotted by Data Lifecycle Manager.

The instances have no CreationPolicy: the stack completes while the seeds still prepare themselves
(userdata/prepare_node.ps1). `telemetry cluster bootstrap` sends its create only once every seed's
agent is Online and its preparation succeeded, and otherwise says when to run it again
(telemetry/commands/cluster/bootstrap.py, ready_for_create). A signal from the Windows boot would tie the
stack to a path no test here runs, roll the whole stack back on one failed download, and a seed
rebuilt later would still need the bootstrap's check.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import CfnTag, Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_dlm as dlm
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sns as sns
from constructs import Construct

from stacks.compliance import acknowledge, managed_policy_finding
from stacks.constructs.node_instance import NodeRole, node_launch_template
from stacks.naming import CLUSTER_TAG, NODE_NAME_TAG, NODE_TYPE_TAG, SEED_NODE_TYPE
from stacks.seed_addresses import plan_seeds

SNAPSHOT_TAG = "sf:snapshots"
# Seeds keep the launch template version they were created from (see the module docstring).
SEED_LAUNCH_TEMPLATE_VERSION = "1"
DLM_POLICY = "service-role/AWSDataLifecycleManagerServiceRole"


def seed_alarm_name(cluster_name: str, seed_name: str, kind: str) -> str:
    """Named, so the dashboard in the monitoring stack can show them without a cross-stack reference."""
    return f"{cluster_name}-{seed_name}-{kind}"


def instance_metric(instance_id: str, metric_name: str) -> cloudwatch.Metric:
    return cloudwatch.Metric(
        namespace="AWS/EC2",
        metric_name=metric_name,
        dimensions_map={"InstanceId": instance_id},
        statistic="Maximum",
        period=Duration.minutes(1),
    )


class SeedNodes(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        region: str,
        cluster_name: str,
        seed_count: int,
        instance_type: str,
        security_groups: Sequence[ec2.ISecurityGroup],
        node_role: NodeRole,
        user_data: ec2.UserData,
        root_volume_gib: int,
        data_volume_gib: int,
        snapshot_interval_hours: int,
        snapshot_retain_count: int,
        alarm_topic: sns.ITopic,
    ) -> None:
        super().__init__(scope, construct_id)
        subnets = vpc.select_subnets(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS).subnets
        self.placements = plan_seeds(seed_count, [(s.availability_zone, s.ipv4_cidr_block) for s in subnets], region)
        placement_group = ec2.PlacementGroup(
            self, "SpreadPlacement", strategy=ec2.PlacementGroupStrategy.SPREAD, spread_level=ec2.PlacementGroupSpreadLevel.RACK
        )
        launch_template = node_launch_template(
            self,
            "LaunchTemplate",
            instance_type=instance_type,
            role=node_role.role,
            security_groups=security_groups,
            user_data=user_data,
            root_volume_gib=root_volume_gib,
            data_volume_gib=data_volume_gib,
            placement_group=placement_group,
        )
        notify = cloudwatch_actions.SnsAction(alarm_topic)
        self.instances: list[ec2.CfnInstance] = []
        for placement in self.placements:
            part = f"Seed{placement.index}"
            instance = ec2.CfnInstance(
                self,
                part,
                launch_template=ec2.CfnInstance.LaunchTemplateSpecificationProperty(
                    launch_template_id=launch_template.launch_template_id, version=SEED_LAUNCH_TEMPLATE_VERSION
                ),
                subnet_id=subnets[placement.zone_index].subnet_id,
                private_ip_address=placement.address,
                disable_api_termination=True,
                tags=[
                    CfnTag(key=key, value=value)
                    for key, value in (
                        ("Name", f"{cluster_name}-{placement.name}"),
                        (CLUSTER_TAG, cluster_name),
                        (NODE_TYPE_TAG, SEED_NODE_TYPE),
                        (NODE_NAME_TAG, placement.name),
                        (SNAPSHOT_TAG, f"{cluster_name}-seeds"),
                    )
                ],
            )
            acknowledge(
                instance,
                "AwsSolutions-EC28",
                "Detailed monitoring is on: it is set in the seed launch template the instance is launched from",
            )
            def status_alarm(kind: str, metric_name: str, periods: int, description: str) -> cloudwatch.Alarm:
                return cloudwatch.Alarm(
                    self,
                    f"{part}{kind.capitalize()}",
                    alarm_name=seed_alarm_name(cluster_name, placement.name, kind),
                    alarm_description=f"Seed {placement.name}: {description}",
                    metric=instance_metric(instance.ref, metric_name),
                    threshold=1,
                    comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                    evaluation_periods=periods,
                )

            # CloudWatch action based recovery (EC2 User Guide, "Configure CloudWatch action based
            # recovery"): StatusCheckFailed_System, to-the-minute, with a notification of each attempt.
            status_alarm(
                "recovery",
                "StatusCheckFailed_System",
                2,
                "the EC2 host failed its system status check; the instance is being recovered onto healthy "
                "hardware (same id, address and volumes)",
            ).add_alarm_action(cloudwatch_actions.Ec2Action(cloudwatch_actions.Ec2InstanceAction.RECOVER), notify)
            # A failed instance status check is Windows itself (a full disk, a hung boot): recovery
            # does not help, an operator does.
            status_alarm(
                "impaired",
                "StatusCheckFailed_Instance",
                5,
                "Windows fails its instance status check; the cluster is short of a seed until an operator "
                "restores it (EC2 console screenshot and system log, Session Manager)",
            ).add_alarm_action(notify)
            self.instances.append(instance)
        self._snapshot_data_volumes(cluster_name, snapshot_interval_hours, snapshot_retain_count)

    def _snapshot_data_volumes(self, cluster_name: str, interval_hours: int, retain_count: int) -> None:
        # The trust has no aws:SourceAccount/aws:SourceArn: neither the EBS guide's "IAM service roles
        # for Amazon Data Lifecycle Manager" nor DLM's condition keys say DLM sets them when it assumes
        # the role, and a condition on a key that is absent fails, which would stop the snapshots
        # silently. Only a principal allowed iam:PassRole on this role can hand it to a policy.
        role = iam.Role(
            self,
            "SnapshotRole",
            assumed_by=iam.ServicePrincipal("dlm.amazonaws.com"),
            description=f"Data Lifecycle Manager: snapshots of the seed data volumes of {cluster_name}",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(DLM_POLICY)],
        )
        acknowledge(
            role,
            "AwsSolutions-IAM4",
            "The AWS-maintained service role policy for Data Lifecycle Manager: create, tag and delete "
            "the EBS snapshots its policies manage; assumable by DLM only",
            finding=managed_policy_finding(DLM_POLICY),
        )
        dlm.CfnLifecyclePolicy(
            self,
            "DataVolumeSnapshots",
            description=f"Seed data volumes of {cluster_name}",
            state="ENABLED",
            execution_role_arn=role.role_arn,
            policy_details=dlm.CfnLifecyclePolicy.PolicyDetailsProperty(
                policy_type="EBS_SNAPSHOT_MANAGEMENT",
                resource_types=["INSTANCE"],
                target_tags=[CfnTag(key=SNAPSHOT_TAG, value=f"{cluster_name}-seeds")],
                # D: holds the Service Fabric data root; C: is rebuilt from the AMI anyway.
                parameters=dlm.CfnLifecyclePolicy.ParametersProperty(exclude_boot_volume=True),
                schedules=[
                    dlm.CfnLifecyclePolicy.ScheduleProperty(
                        name=f"Every {interval_hours} hours keep {retain_count}",
                        create_rule=dlm.CfnLifecyclePolicy.CreateRuleProperty(interval=interval_hours, interval_unit="HOURS"),
                        retain_rule=dlm.CfnLifecyclePolicy.RetainRuleProperty(count=retain_count),
                        copy_tags=True,
                    )
                ],
            ),
        )
