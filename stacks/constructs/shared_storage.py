"""Shared storage for the applications on the cluster: an encrypted, backed-up EFS file system that
only the Service Fabric nodes reach, with mount targets in the private subnets."""

from __future__ import annotations

from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_efs as efs
from constructs import Construct


class SharedStorage(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        cluster_name: str,
        nodes: ec2.ISecurityGroup,
        removal_policy: RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            description=f"Shared storage of {cluster_name}: NFS from the cluster nodes only",
            allow_all_outbound=False,
        )
        self.file_system = efs.FileSystem(
            self,
            "FileSystem",
            vpc=vpc,
            vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            security_group=security_group,
            file_system_name=f"{cluster_name}-shared",
            encrypted=True,
            enable_automatic_backups=True,
            performance_mode=efs.PerformanceMode.GENERAL_PURPOSE,
            throughput_mode=efs.ThroughputMode.ELASTIC,
            removal_policy=removal_policy,
        )
        self.file_system.connections.allow_default_port_from(nodes, "NFS from the Service Fabric nodes")

    @property
    def dns_name(self) -> str:
        return f"{self.file_system.file_system_id}.efs.{Stack.of(self).region}.amazonaws.com"
