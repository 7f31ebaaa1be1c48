"""The seed nodes (primary node type): fixed machines with a stable identity each.

Each seed is an Auto Scaling group of exactly one instance, pinned to one private subnet, plus a
persistent network interface with a fixed private address that every instance of that group
attaches at boot (userdata/prepare_node.ps1). A replaced instance therefore comes back with the
same address and node name, so the cluster configuration stays valid. Seeds are protected from
scale-in, have no scaling policy, sit in a spread placement group (no two on one rack) and have
their data volumes snapshotted by Data Lifecycle Manager.

Addresses: seed `i` lives in zone `i % 3` and takes address `i // 3` of the /28 just below the
last /28 of its zone's private subnet, far from the low addresses EC2 tends to hand out first. The
subnet CIDRs come from the VPC built in the same app (from config), so the addresses are plain,
reviewable values in the template and need no lookup. The block is not reserved: CloudFormation
does not offer AWS::EC2::SubnetCidrReservation in every region (eu-west-1 among them). Should an
address already be taken, creating its interface fails with "address already in use" before any
seed instance starts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from aws_cdk import CfnTag, Tags
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_dlm as dlm
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from constructs import Construct

from stacks.compliance import acknowledge, managed_policy_finding
from stacks.constructs.node_instance import NodeRole, node_launch_template
from stacks.naming import CLUSTER_TAG, NODE_NAME_TAG, NODE_TYPE_TAG, SEED_NODE_TYPE, seed_node_name
from stacks.seed_addresses import seed_block

SNAPSHOT_TAG = "sf:snapshots"
DLM_POLICY = "service-role/AWSDataLifecycleManagerServiceRole"


@dataclass(frozen=True)
class SeedPlacement:
    index: int
    name: str
    zone_index: int
    availability_zone: str
    address: str
    fault_domain: str
    upgrade_domain: str


def plan_seeds(count: int, zones: Sequence[tuple[str, str]], region: str) -> list[SeedPlacement]:
    """Seed `i` in zone `i % len(zones)`; `zones` lists (availability zone, private subnet CIDR)."""
    placements = []
    for index in range(count):
        zone_index, slot = index % len(zones), index // len(zones)
        zone, cidr = zones[zone_index]
        placements.append(
            SeedPlacement(
                index=index,
                name=seed_node_name(index),
                zone_index=zone_index,
                availability_zone=zone,
                address=str(seed_block(cidr)[slot]),
                # A zone is what fails together on AWS; the spread placement group keeps two
                # seeds of one zone off the same rack. Upgrade domains are one per seed.
                fault_domain=f"fd:/{region}/{zone}",
                upgrade_domain=f"UD{index}",
            )
        )
    return placements


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
        user_data: Callable[[str], ec2.UserData],
        group_name: Callable[[int], str],
        root_volume_gib: int,
        data_volume_gib: int,
        snapshot_interval_hours: int,
        snapshot_retain_count: int,
    ) -> None:
        super().__init__(scope, construct_id)
        subnets = vpc.select_subnets(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS).subnets
        self.placements = plan_seeds(seed_count, [(s.availability_zone, s.ipv4_cidr_block) for s in subnets], region)
        placement_group = ec2.PlacementGroup(
            self, "SpreadPlacement", strategy=ec2.PlacementGroupStrategy.SPREAD, spread_level=ec2.PlacementGroupSpreadLevel.RACK
        )
        self.interfaces: list[ec2.CfnNetworkInterface] = []
        self.groups: list[autoscaling.AutoScalingGroup] = []
        for placement in self.placements:
            part = f"Seed{placement.index}"
            interface = ec2.CfnNetworkInterface(
                self,
                f"{part}Interface",
                subnet_id=subnets[placement.zone_index].subnet_id,
                private_ip_address=placement.address,
                group_set=[group.security_group_id for group in security_groups],
                description=f"Persistent address of Service Fabric seed node {placement.name} of {cluster_name}",
                tags=[CfnTag(key=CLUSTER_TAG, value=cluster_name), CfnTag(key=NODE_NAME_TAG, value=placement.name)],
            )
            launch_template = node_launch_template(
                self,
                f"{part}LaunchTemplate",
                instance_type=instance_type,
                role=node_role.role,
                security_groups=security_groups,
                user_data=user_data(interface.ref),
                root_volume_gib=root_volume_gib,
                data_volume_gib=data_volume_gib,
                placement_group=placement_group,
            )
            group = autoscaling.AutoScalingGroup(
                self,
                f"{part}Group",
                vpc=vpc,
                vpc_subnets=ec2.SubnetSelection(subnets=[subnets[placement.zone_index]]),
                launch_template=launch_template,
                auto_scaling_group_name=group_name(placement.index),
                min_capacity=1,
                max_capacity=1,
                new_instances_protected_from_scale_in=True,
                group_metrics=[autoscaling.GroupMetrics.all()],
            )
            for key, value in (
                (CLUSTER_TAG, cluster_name),
                (NODE_TYPE_TAG, SEED_NODE_TYPE),
                (NODE_NAME_TAG, placement.name),
                (SNAPSHOT_TAG, f"{cluster_name}-seeds"),
            ):
                Tags.of(group).add(key, value)
            acknowledge(
                group,
                "AwsSolutions-AS2",
                "Seeds are replaced only when EC2 finds the machine impaired; load balancer health reflects "
                "Service Fabric and applications, and replacing a seed for that would cost cluster quorum",
            )
            acknowledge(
                group,
                "AwsSolutions-AS3",
                "A fixed group of one with no scaling policy; a replacement is visible in the seed "
                "in-service alarm and on the dashboard, so per-event notifications would add nothing",
            )
            self.interfaces.append(interface)
            self.groups.append(group)
        node_role.allow_attach_network_interfaces([i.ref for i in self.interfaces], cluster_name=cluster_name)
        self._snapshot_data_volumes(cluster_name, snapshot_interval_hours, snapshot_retain_count)

    def _snapshot_data_volumes(self, cluster_name: str, interval_hours: int, retain_count: int) -> None:
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
