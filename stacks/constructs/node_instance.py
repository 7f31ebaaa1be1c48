"""What every Service Fabric node is made of: its IAM role and its launch template.

Seed nodes and the scaling node group use the same machine definition (Windows Server 2022 from
the public SSM parameter, IMDSv2, encrypted root and data volumes, detailed monitoring); only the
user data, instance type and a few seed-only permissions differ.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from stacks.compliance import acknowledge, attribute_ref, wildcard_resource_finding
from stacks.constructs.instance_core import grant_instance_core
from stacks.constructs.log_group import grant_run_command_output

WINDOWS_ROOT_DEVICE = "/dev/sda1"
DATA_DEVICE = "xvdb"  # appears as the first RAW disk, which userdata/prepare_node.ps1 formats as D:


class NodeRole(Construct):
    """The instance role of one node type: SSM agent, the cluster certificate secret, its log group,
    and its metrics namespace, and nothing else (the shared file system is NFS: the network, not
    IAM, decides who mounts it)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        description: str,
        certificate_secret_name: str,
        log_group: logs.LogGroup,
        metrics_namespace: str,
        readable_parameters: Sequence[str],
    ) -> None:
        super().__init__(scope, construct_id)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description=description,
        )
        # The agent's actions, and reads of the parameters a node's applications use only, where the
        # managed policy reads every parameter of the account (instance_core.py).
        self._resource_star_reasons = [grant_instance_core(self.role, readable_parameters=readable_parameters)]

        # By name from config: the secret is created out of band, before the first deployment.
        secret = secretsmanager.Secret.from_secret_name_v2(self, "ClusterCertificate", certificate_secret_name)
        secret.grant_read(self.role)
        stack = Stack.of(self)
        acknowledge(
            self.role,
            "AwsSolutions-IAM5",
            "Secrets Manager appends six random characters to a secret's ARN; the node may read only the "
            "one cluster certificate secret named in config, whatever its suffix",
            finding=wildcard_resource_finding(
                f"arn:<AWS::Partition>:secretsmanager:{stack.region}:{stack.account}:secret:"
                f"{certificate_secret_name}-??????"
            ),
        )

        # The CloudWatch agent's streams, and the SSM agent's for Run Command output (create-cluster,
        # cluster-nodes: telemetry/shared/run_command_output.py).
        grant_run_command_output(log_group, self.role)
        acknowledge(
            self.role,
            "AwsSolutions-IAM5",
            "The CloudWatch agent writes one stream per instance and source into the node log group, and "
            "the SSM agent one per Run Command and step; streams are named at run time, so the grant covers "
            "the streams of that one group (create the existing group, create, list and write its streams)",
            finding=wildcard_resource_finding(f"{attribute_ref(log_group, 'Arn')}:*"),
        )
        self._resource_star_reasons += [
            "cloudwatch:PutMetricData has no resource-level permissions; it is limited to the node "
            f"metrics namespace {metrics_namespace} by condition"
        ]
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=["cloudwatch:PutMetricData"],
                resources=["*"],
                conditions={"StringEquals": {"cloudwatch:namespace": metrics_namespace}},
            )
        )
        # A node reads its environment's parameters (for the applications it runs), but not the
        # platform's secrets in Parameter Store, of any environment or region: the topic
        # administrator's MSK token and the simulator devices' keys (both also under keys a node
        # may not use). GetParametersByPath
        # not at all: a principal allowed a path reads what lies under it recursively, denies on the
        # children notwithstanding (SSM User Guide, "Restricting access to Parameter Store
        # parameters using IAM policies"), and a node needs no path read.
        stack = Stack.of(self)
        self.role.add_to_policy(iam.PolicyStatement(
            effect=iam.Effect.DENY,
            actions=list(PARAMETER_READS),
            resources=[stack.format_arn(service="ssm", region="*", resource="parameter", resource_name=path)
                       for path in PLATFORM_SECRET_PARAMETERS],
        ))  # fmt: skip
        self.role.add_to_policy(iam.PolicyStatement(
            effect=iam.Effect.DENY,
            actions=["ssm:GetParametersByPath"],
            resources=[stack.format_arn(service="ssm", region="*", resource="parameter", resource_name="*")],
        ))  # fmt: skip
        self._acknowledge_resource_star()

    def _acknowledge_resource_star(self) -> None:
        # One finding id for every statement on "*"; the reason names each of them.
        acknowledge(
            self.role, "AwsSolutions-IAM5", "; ".join(self._resource_star_reasons), finding=wildcard_resource_finding("*")
        )


# Every Parameter Store read of named parameters (SSM Service Authorization Reference; the path read,
# GetParametersByPath, is denied on every path) and the platform's secret paths, in every
# environment: /<prefix>/msk/topics-token/<run>, /<prefix>/devices/<thing> (naming.py).
PARAMETER_READS = ("ssm:GetParameter", "ssm:GetParameters", "ssm:GetParameterHistory")
PLATFORM_SECRET_PARAMETERS = ("*/msk/topics-token", "*/msk/topics-token/*", "*/devices", "*/devices/*")


def windows_node_image() -> ec2.IMachineImage:
    # The public SSM parameter for the latest Windows Server 2022 base AMI, resolved at deploy time.
    return ec2.MachineImage.latest_windows(ec2.WindowsVersion.WINDOWS_SERVER_2022_ENGLISH_FULL_BASE)


def node_launch_template(
    scope: Construct,
    construct_id: str,
    *,
    instance_type: str,
    role: iam.IRole,
    security_groups: Sequence[ec2.ISecurityGroup],
    user_data: ec2.UserData,
    root_volume_gib: int,
    data_volume_gib: int,
    placement_group: ec2.IPlacementGroup | None = None,
) -> ec2.LaunchTemplate:
    def volume(size: int) -> ec2.BlockDeviceVolume:
        # The account's default EBS key: a customer key would also need grants for the Auto
        # Scaling service-linked role, or launches fail.
        return ec2.BlockDeviceVolume.ebs(
            size, encrypted=True, volume_type=ec2.EbsDeviceVolumeType.GP3, delete_on_termination=True
        )

    template = ec2.LaunchTemplate(
        scope,
        construct_id,
        machine_image=windows_node_image(),
        instance_type=ec2.InstanceType(instance_type),
        role=role,
        security_group=security_groups[0],
        user_data=user_data,
        require_imdsv2=True,
        http_put_response_hop_limit=1,
        detailed_monitoring=True,
        placement_group=placement_group,
        block_devices=[
            ec2.BlockDevice(device_name=WINDOWS_ROOT_DEVICE, volume=volume(root_volume_gib)),
            ec2.BlockDevice(device_name=DATA_DEVICE, volume=volume(data_volume_gib)),
        ],
    )
    for group in security_groups[1:]:
        template.connections.add_security_group(group)
    return template
