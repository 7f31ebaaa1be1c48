"""The VPC every other part runs in: three tiers over three zones, flow logs, private endpoints,
and the seed address block reserved in each private subnet before anything takes an address there.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from constructs import Construct

from stacks.constructs.log_group import grant_key_through_logs, log_group
from stacks.constructs.sdk_call_role import skip_deploy_time_function_checks
from stacks.constructs.seed_block_reservations import SeedBlockReservations
from stacks.constructs.service_trust import narrow_service_trust

# Reached from private subnets without NAT: SSM Run Command and Session Manager (simulator fleet,
# Service Fabric nodes), Secrets Manager (cluster certificates), CloudWatch Logs, STS (MSK IAM
# auth tokens) and the Kafka control plane (GetBootstrapBrokers from operator tools).
INTERFACE_ENDPOINTS = {
    "Ssm": ec2.InterfaceVpcEndpointAwsService.SSM,
    "SsmMessages": ec2.InterfaceVpcEndpointAwsService.SSM_MESSAGES,
    "Ec2Messages": ec2.InterfaceVpcEndpointAwsService.EC2_MESSAGES,
    "SecretsManager": ec2.InterfaceVpcEndpointAwsService.SECRETS_MANAGER,
    "CloudWatchLogs": ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,
    "Sts": ec2.InterfaceVpcEndpointAwsService.STS,
    "Kafka": ec2.InterfaceVpcEndpointAwsService.KAFKA,
}
# Endpoints whose service documents endpoint policies (each service's "VPC endpoint policy" page:
# Systems Manager, Secrets Manager, CloudWatch Logs, STS): they take calls from this account's
# principals only, so credentials of another account cannot carry data out through them. The
# agents' message endpoints (ssmmessages, ec2messages) and the Kafka control plane keep the default
# policy, as does the S3 gateway endpoint: the fleet's package repositories and the Windows agents'
# downloads are AWS-owned buckets read anonymously through it (SSM User Guide, "SSM Agent
# communications with AWS managed S3 buckets"), which a principal-account condition would refuse.
ACCOUNT_ONLY_ENDPOINTS = ("Ssm", "SecretsManager", "CloudWatchLogs", "Sts")


class PlatformNetwork(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cidr: str,
        availability_zones: Sequence[str],
        nat_gateways: int,
        flow_log_retention_days: int,
        removal_policy: RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)

        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(cidr),
            # Named zones: no account lookup at synth time.
            availability_zones=list(availability_zones),
            nat_gateways=nat_gateways,
            subnet_configuration=[
                ec2.SubnetConfiguration(name="Public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24),
                ec2.SubnetConfiguration(
                    name="Private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=22
                ),
                ec2.SubnetConfiguration(
                    name="Isolated", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED, cidr_mask=24
                ),
            ],
        )

        flow_logs = log_group(
            self, "FlowLogs", retention_days=flow_log_retention_days, removal_policy=removal_policy
        )
        flow_log = self.vpc.add_flow_log(
            "FlowLog",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_logs),
            traffic_type=ec2.FlowLogTrafficType.ALL,
        )
        # The flow logs service may use the CDK's role only for this account's flow logs (Amazon VPC
        # User Guide, "IAM role for publishing flow logs to CloudWatch Logs": aws:SourceAccount, and
        # aws:SourceArn with the flow log's id a wildcard while it is not known). Narrowed in place:
        # a new role would replace the flow log itself (its DeliverLogsPermissionArn cannot change).
        flow_log_role = flow_log.node.find_child("IAMRole")
        assert isinstance(flow_log_role, iam.Role)
        narrow_service_trust(flow_log_role, Stack.of(self).format_arn(service="ec2", resource="vpc-flow-log", resource_name="*"))
        grant_key_through_logs(flow_logs, flow_log_role)

        # The CDK's handler that empties the default security group's rules
        # (@aws-cdk/aws-ec2:restrictDefaultSecurityGroup), a custom resource provider of the stack.
        restrict_provider = Stack.of(self).node.find_child("Custom::VpcRestrictDefaultSGCustomResourceProvider")
        skip_deploy_time_function_checks(restrict_provider.node.find_child("Handler"),
                                         "EC2 RevokeSecurityGroupIngress and RevokeSecurityGroupEgress")  # fmt: skip

        seed_blocks = SeedBlockReservations(self, "SeedBlocks", subnets=self.vpc.private_subnets)

        self.vpc.add_gateway_endpoint("S3", service=ec2.GatewayVpcEndpointAwsService.S3)
        endpoint_security_group = ec2.SecurityGroup(
            self,
            "EndpointSecurityGroup",
            vpc=self.vpc,
            description="Interface endpoints: HTTPS from inside the VPC only",
            allow_all_outbound=False,
        )
        # The configured CIDR rather than the VPC's CidrBlock attribute, so the rule is
        # reviewable (and checkable by cdk-nag) in the synthesized template.
        endpoint_security_group.add_ingress_rule(ec2.Peer.ipv4(cidr), ec2.Port.tcp(443), "HTTPS from the VPC")
        private = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)
        for name, service in INTERFACE_ENDPOINTS.items():
            endpoint = self.vpc.add_interface_endpoint(
                name,
                service=service,
                subnets=private,
                private_dns_enabled=True,
                security_groups=[endpoint_security_group],
                open=False,  # the group above already admits the VPC
            )
            # An endpoint's network interfaces take addresses in the private subnets, and a reservation
            # made later would not move them (Amazon VPC User Guide, "Subnet CIDR reservations").
            endpoint.node.add_dependency(*seed_blocks.reservations)
            if name in ACCOUNT_ONLY_ENDPOINTS:
                endpoint.add_to_policy(iam.PolicyStatement(
                    principals=[iam.AnyPrincipal()], actions=["*"], resources=["*"],
                    conditions={"StringEquals": {"aws:PrincipalAccount": Stack.of(self).account}},
                ))  # fmt: skip
