"""Shared storage the Windows nodes can mount: FSx for OpenZFS, exported over NFS v3 to the node
subnets only, encrypted with its own key, backed up daily.

Windows' NFS client speaks NFS v2/v3, and Amazon EFS serves NFS v4 only ("Amazon EFS does not
support mounting from EC2 Windows instances", EFS user guide), so EFS is not deployed. FSx for
OpenZFS serves NFS v3 without a directory service; FSx for Windows File Server would need one.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_kms as kms
from constructs import Construct

# Root volume of every FSx for OpenZFS file system; Windows reaches it as \\<dns name>\fsx.
ROOT_VOLUME_PATH = "/fsx"
# NFS ports an FSx for OpenZFS file system needs open from its clients, TCP and UDP
# (FSx for OpenZFS user guide, "File system access control with Amazon VPC"): the portmapper,
# NFS, and the mount, lock and status daemons.
NFS_PORTS = ((111, 111), (2049, 2049), (20001, 20003))
# rw, and root as root: Windows' NFS client maps anonymous access to AnonymousUid 0 (set by
# prepare_node.ps1), which root squashing would turn into nobody. crossmnt and sync are FSx's
# defaults, kept explicit because a client configuration replaces them.
# Why no_root_squash is acceptable here: the only clients are the Service Fabric nodes (the
# security group below admits NFS from their group alone), and every one of them reaches the share
# as the same identity (Windows' anonymous uid), so squashing root would take nothing from one node
# that another keeps; the share holds no setuid binaries anyone executes (Windows clients). The
# root volume is owned by root, so a squashed client could not write at all.
EXPORT_OPTIONS = ["rw", "crossmnt", "sync", "no_root_squash"]


class SharedStorage(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        cluster_name: str,
        nodes: ec2.ISecurityGroup,
        node_subnets: Sequence[ec2.ISubnet],
        deployment_type: str,
        storage_gib: int,
        throughput_mbps: int,
        backup_days: int,
        removal_policy: RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            description=f"Shared storage of {cluster_name}: NFS from the cluster nodes only",
            allow_all_outbound=False,
        )
        for low, high in NFS_PORTS:
            for port in (ec2.Port.tcp_range(low, high), ec2.Port.udp_range(low, high)):
                self.security_group.add_ingress_rule(nodes, port, "NFS from the Service Fabric nodes")
                nodes.add_egress_rule(self.security_group, port, "NFS to the shared storage")
        self.key = kms.Key(
            self,
            "Key",
            description=f"Encrypts the shared file system of {cluster_name}",
            enable_key_rotation=True,
            removal_policy=removal_policy,
        )
        self.file_system = fsx.CfnFileSystem(
            self,
            "FileSystem",
            file_system_type="OPENZFS",
            storage_capacity=storage_gib,
            # Single-AZ types live in one subnet; every node subnet reaches it through the VPC.
            subnet_ids=[node_subnets[0].subnet_id],
            security_group_ids=[self.security_group.security_group_id],
            kms_key_id=self.key.key_id,
            open_zfs_configuration=fsx.CfnFileSystem.OpenZFSConfigurationProperty(
                deployment_type=deployment_type,
                throughput_capacity=throughput_mbps,
                automatic_backup_retention_days=backup_days,
                copy_tags_to_backups=True,
                copy_tags_to_volumes=True,
                root_volume_configuration=fsx.CfnFileSystem.RootVolumeConfigurationProperty(
                    data_compression_type="LZ4",
                    nfs_exports=[
                        fsx.CfnFileSystem.NfsExportsProperty(
                            client_configurations=[
                                fsx.CfnFileSystem.ClientConfigurationsProperty(
                                    clients=subnet.ipv4_cidr_block, options=EXPORT_OPTIONS
                                )
                                for subnet in node_subnets
                            ]
                        )
                    ],
                ),
            ),
            tags=[{"key": "Name", "value": f"{cluster_name}-shared"}],
        )
        self.file_system.apply_removal_policy(removal_policy)

    @property
    def dns_name(self) -> str:
        return self.file_system.attr_dns_name
