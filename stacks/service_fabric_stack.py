"""Service Fabric stack: seed nodes, the scaling node group, shared storage, the management and
application load balancers, the create-cluster document, alarms and dashboard widgets.

The machines come up prepared (userdata/prepare_node.ps1) but not yet a cluster:
telemetry/commands/cluster/bootstrap.py creates the cluster on the seeds, and the node lifecycle automation
joins and drains scaling nodes through the lifecycle hooks of `scaling_group`.
"""

from __future__ import annotations

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sns as sns
from constructs import Construct

from stacks.compliance import acknowledge
from stacks.config import CLOUDWATCH_AGENT_SIGNER, MICROSOFT_CODE_SIGNING_ROOTS, EnvironmentConfig
from stacks.constructs.cluster_monitoring import ClusterMonitoring
from stacks.constructs.command_document import command_document
from stacks.constructs.keys import rotating_key
from stacks.constructs.load_balancers import NodeLoadBalancer
from stacks.constructs.log_group import log_group
from stacks.constructs.msk_cluster import MskCluster
from stacks.constructs.node_instance import NodeRole
from stacks.constructs.node_scripts import (
    render_cluster_nodes_document,
    render_create_cluster_document,
    render_user_data,
)
from stacks.constructs.node_security import SCALING_SETUP_PORTS, SEED_SETUP_PORTS, NodeSecurity, firewall_ports
from stacks.constructs.scaling_node_group import ScalingNodeGroup
from stacks.constructs.secure_bucket import SecureBucket
from stacks.constructs.seed_nodes import SeedNodes, seed_alarm_name
from stacks.constructs.shared_storage import ROOT_VOLUME_PATH, SharedStorage
from stacks.naming import (
    CLIENT_CONNECTION_PORT,
    DEPLOYMENT_ACCOUNT,
    HTTP_GATEWAY_PORT,
    LAUNCH_HOOK_NAME,
    NODE_PREPARATION_STATUS_FILE,
    SCALING_NODE_TYPE,
    SEED_NODE_TYPE,
    SERVICE_FABRIC_METRICS_NAMESPACE,
    TERMINATE_HOOK_NAME,
    application_load_balancer_name,
    bootstrap_parameter_name,
    cluster_created_parameter_name,
    cluster_nodes_document_name,
    create_cluster_document_name,
    deployment_secret_name,
    gateway_thumbprint_parameter_name,
    management_load_balancer_name,
    node_application_parameters,
    node_log_group_name,
    runtime_package_path,
    scaling_group_name,
    service_fabric_cluster_name,
)
from stacks.removal import removal_policy
from stacks.seed_addresses import plan_seeds, seed_nodes_output


class ServiceFabricStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: EnvironmentConfig,
        vpc: ec2.IVpc,
        kafka: MskCluster,
        alarm_topic: sns.ITopic,
        dashboard: cloudwatch.Dashboard,
        **kwargs,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        settings = config.service_fabric
        cluster_name = service_fabric_cluster_name(config)
        retain = removal_policy(config)

        self.security = NodeSecurity(
            self,
            "NodeSecurity",
            vpc=vpc,
            cluster_name=cluster_name,
            application_port_range=settings.application_port_range,
            ephemeral_port_range=settings.ephemeral_port_range,
        )
        # Applications on the cluster produce to and consume from MSK.
        node_groups = [self.security.nodes, kafka.client_security_group]
        # The seeds' deployment-account password (cluster creation administers every seed as that
        # account): generated here, never typed or stored by an operator, readable by the seed role
        # alone (granted below). Scaling nodes have no stored password (add_node.yaml).
        # Its own key (CKV_AWS_149): decrypting the password takes this key too; its policy names the
        # seed role (grant_read below), beside the account's own delegation to IAM, and every use is in
        # CloudTrail. On an environment deployed before, Secrets Manager re-encrypts the current
        # versions with the new key and keeps older ones under the previous key ("Change the
        # encryption key for an AWS Secrets Manager secret").
        deployment_key = rotating_key(
            self,
            "SeedDeploymentPasswordKey",
            description=f"Encrypts the password of the seeds' deployment account of {cluster_name}",
            removal_policy=retain,
        )
        self.deployment_secret = secretsmanager.Secret(
            self,
            "SeedDeploymentPassword",
            secret_name=deployment_secret_name(config),
            encryption_key=deployment_key,
            description=f"Password of the seeds' local deployment account ({DEPLOYMENT_ACCOUNT}) of {cluster_name}",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                # A Windows password (complexity: every character class) read into a SecureString.
                password_length=32, require_each_included_type=True, exclude_characters="'\"`$%^&|<>,;",
            ),
        )
        acknowledge(
            self.deployment_secret,
            "AwsSolutions-SMG4",
            "The seeds' deployment account is used only while the cluster is created; the create-cluster command "
            "then disables it on every seed it reaches and names any it could not in create-cluster.unretired with a "
            "warning to disable it by hand (create_cluster.yaml), and a rebuilt seed never gets it back "
            "(prepare_node.ps1); a rotation function would have to reach each seed's SAM",
        )
        self.storage = SharedStorage(
            self,
            "SharedStorage",
            vpc=vpc,
            cluster_name=cluster_name,
            nodes=self.security.nodes,
            node_subnets=vpc.select_subnets(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS).subnets,
            deployment_type=settings.shared_storage_deployment,
            storage_gib=settings.shared_storage_gib,
            throughput_mbps=settings.shared_storage_throughput_mbps,
            backup_days=settings.shared_storage_backup_days,
            removal_policy=retain,
        )
        node_logs = log_group(
            self,
            "NodeLogs",
            log_group_name=node_log_group_name(config),
            retention_days=settings.node_log_retention_days,
            removal_policy=retain,
        )

        def node_role(construct_id: str, node_type: str) -> NodeRole:
            return NodeRole(
                self,
                construct_id,
                description=f"Service Fabric {node_type} nodes of {cluster_name}",
                certificate_secret_name=settings.cluster_certificate_secret,
                log_group=node_logs,
                metrics_namespace=SERVICE_FABRIC_METRICS_NAMESPACE,
                # What a node's applications read: the brokers, the gateway's thumbprint, and their
                # own settings under /<prefix>/applications/; a parameter added anywhere else later
                # (a secret among them) is not readable on every node.
                readable_parameters=[bootstrap_parameter_name(config), gateway_thumbprint_parameter_name(config),
                                     node_application_parameters(config),
                                     # a seed looks for it before it makes a deployment account (prepare_node.ps1)
                                     *([cluster_created_parameter_name(config)] if node_type == SEED_NODE_TYPE else [])],
            )

        # The seeds' fixed addresses (the same plan SeedNodes places them by): their firewall admits
        # set-up traffic from these alone.
        node_subnets = vpc.select_subnets(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS).subnets
        seed_sources = ",".join(
            p.address for p in plan_seeds(settings.seed_node_count, [(s.availability_zone, s.ipv4_cidr_block) for s in node_subnets], config.region)
        )

        def user_data(node_type: str) -> ec2.UserData:
            seed = node_type == SEED_NODE_TYPE
            script = render_user_data(
                "prepare_node.ps1",
                {
                    "cluster_name": cluster_name,
                    "node_type": node_type,
                    "region": config.region,
                    "vpc_cidr": config.network.cidr,
                    "node_ports": firewall_ports(self.security.node_ports, "tcp"),
                    # Seeds admit set-up from the other seeds (fixed addresses), scaling nodes from
                    # any node of the VPC (the security groups narrow both to nodes).
                    "setup_ports": firewall_ports(SEED_SETUP_PORTS if seed else SCALING_SETUP_PORTS, "tcp"),
                    "setup_sources": seed_sources if seed else config.network.cidr,
                    "application_ports": ",".join(str(p) for p in settings.application_ports),
                    "certificate_secret": settings.cluster_certificate_secret,
                    "file_system_dns": self.storage.dns_name,
                    "shared_storage_path": ROOT_VOLUME_PATH.replace("/", "\\"),
                    "runtime_version": settings.runtime_version,
                    "runtime_cab_url": settings.runtime_cab_url,
                    "runtime_cab": runtime_package_path(config),
                    "standalone_package_url": settings.standalone_package_url,
                    "standalone_package_sha256": settings.standalone_package_sha256 or "",
                    "microsoft_roots": ",".join(MICROSOFT_CODE_SIGNING_ROOTS),
                    "cloudwatch_agent_version": settings.cloudwatch_agent_version,
                    "cloudwatch_agent_signer": CLOUDWATCH_AGENT_SIGNER,
                    "log_group": node_log_group_name(config),
                    "metrics_namespace": SERVICE_FABRIC_METRICS_NAMESPACE,
                    "status_file": NODE_PREPARATION_STATUS_FILE,
                    "deployment_account": DEPLOYMENT_ACCOUNT,
                    "deployment_secret": deployment_secret_name(config) if seed else "",
                    # A seed prepared once this exists (a rebuilt seed) makes no deployment account.
                    "cluster_created_parameter": cluster_created_parameter_name(config),
                },
            )
            data = ec2.UserData.for_windows()
            data.add_commands(script)
            return data

        seed_role = node_role("SeedNodeRole", SEED_NODE_TYPE)
        self.deployment_secret.grant_read(seed_role.role)
        # No one else reads it, whatever their own policies allow (an administrator's secretsmanager:*
        # and kms:* among them): an explicit deny in the secret's resource policy wins over any allow
        # (IAM User Guide, "Policy evaluation logic"). aws:PrincipalArn of a role session is the role's
        # ARN ("AWS global condition context keys"). Break-glass is to change this policy, which
        # CloudTrail records; nothing of the stack reads the value (CloudFormation only creates it).
        self.deployment_secret.add_to_resource_policy(iam.PolicyStatement(
            sid="OnlyTheSeedsReadThePassword",
            effect=iam.Effect.DENY,
            principals=[iam.AnyPrincipal()],
            actions=["secretsmanager:GetSecretValue"],
            resources=["*"],
            conditions={"StringNotEquals": {"aws:PrincipalArn": seed_role.role.role_arn}},
        ))  # fmt: skip
        self.seeds = SeedNodes(
            self,
            "SeedNodes",
            vpc=vpc,
            region=config.region,
            cluster_name=cluster_name,
            seed_count=settings.seed_node_count,
            instance_type=settings.seed_instance_type,
            security_groups=[*node_groups, self.security.seeds],
            node_role=seed_role,
            user_data=user_data(SEED_NODE_TYPE),
            root_volume_gib=settings.root_volume_gib,
            data_volume_gib=settings.data_volume_gib,
            snapshot_interval_hours=settings.seed_snapshot_interval_hours,
            snapshot_retain_count=settings.seed_snapshot_retain_count,
            alarm_topic=alarm_topic,
        )
        self.scaling = ScalingNodeGroup(
            self,
            "ScalingNodes",
            vpc=vpc,
            cluster_name=cluster_name,
            group_name=scaling_group_name(config),
            instance_type=settings.node_instance_type,
            max_nodes=settings.scaling_max_nodes,
            security_groups=[*node_groups, self.security.scaling],
            node_role=node_role("ScalingNodeRole", SCALING_NODE_TYPE),
            user_data=user_data(SCALING_NODE_TYPE),
            root_volume_gib=settings.root_volume_gib,
            data_volume_gib=settings.data_volume_gib,
            launch_hook_name=LAUNCH_HOOK_NAME,
            terminate_hook_name=TERMINATE_HOOK_NAME,
            heartbeat_seconds=settings.lifecycle_heartbeat_seconds,
            cpu_target_percent=settings.scaling_cpu_target_percent,
            scale_in_cpu_percent=settings.scale_in_cpu_percent,
        )

        access_logs = SecureBucket(
            self, "LoadBalancerLogs", removal_policy=retain, expiration_days=settings.access_log_retention_days
        ).bucket
        self.management = NodeLoadBalancer(
            self,
            "ManagementLoadBalancer",
            vpc=vpc,
            load_balancer_name=management_load_balancer_name(config),
            purpose="Service Fabric management (client connection, HTTP gateway)",
            ports=(CLIENT_CONNECTION_PORT, HTTP_GATEWAY_PORT),
            client_cidrs=settings.management_cidrs,
            internet_facing=settings.management_internet_facing,
            node_security=self.security,
            access_logs=access_logs,
            deletion_protection=config.production,
            world_open_reason=(
                "Config opens cluster management to any address outside production; every call still "
                "needs the cluster's admin client certificate"
            ),
        )
        self.applications = NodeLoadBalancer(
            self,
            "ApplicationLoadBalancer",
            vpc=vpc,
            load_balancer_name=application_load_balancer_name(config),
            purpose="Service Fabric applications",
            ports=settings.application_ports,
            client_cidrs=settings.application_client_cidrs,
            internet_facing=settings.application_internet_facing,
            node_security=self.security,
            access_logs=access_logs,
            deletion_protection=config.production,
            world_open_reason=(
                "The application endpoint serves devices and clients anywhere on the internet, by "
                "config; only the configured application ports are open"
            ),
        )
        for balancer in (self.management, self.applications):
            balancer.add_instances(instance.ref for instance in self.seeds.instances)
            balancer.add_group(self.scaling.group)

        command_document(
            self,
            "CreateClusterDocument",
            name=create_cluster_document_name(config),
            content=render_create_cluster_document(
                {
                    "statusFile": NODE_PREPARATION_STATUS_FILE,
                    "deploymentSecret": deployment_secret_name(config),
                    "deploymentAccount": DEPLOYMENT_ACCOUNT,
                    "region": config.region,
                    "runtimePackage": runtime_package_path(config),
                }
            ),
        )

        # Read only: the cluster's nodes as a seed sees them (telemetry/shared/cluster_nodes.py).
        command_document(
            self,
            "ClusterNodesDocument",
            name=cluster_nodes_document_name(config),
            content=render_cluster_nodes_document({"statusFile": NODE_PREPARATION_STATUS_FILE}),
        )

        ClusterMonitoring(
            self,
            "Monitoring",
            cluster_name=cluster_name,
            management_endpoint=self.management.target_groups[0],
            scaling_group_name=scaling_group_name(config),
            seed_alarm_names=[
                seed_alarm_name(cluster_name, p.name, kind) for p in self.seeds.placements for kind in ("recovery", "impaired")
            ],
            region=config.region,
            load_balancer_names={
                "management": management_load_balancer_name(config),
                "applications": application_load_balancer_name(config),
            },
            alarm_topic=alarm_topic,
            dashboard=dashboard,
        )

        # What the node lifecycle stack and operators need.
        self.scaling_group = self.scaling.group
        self.node_security_group = self.security.nodes
        self.gateway_client_security_group = self.security.gateway_clients
        self.management_endpoint = f"{self.management.dns_name}:{CLIENT_CONNECTION_PORT}"
        # Fixed seed addresses: functions inside the VPC reach the HTTP gateway there, no load balancer.
        self.gateway_endpoints = [f"https://{p.address}:{HTTP_GATEWAY_PORT}" for p in self.seeds.placements]

        CfnOutput(self, "ManagementEndpoint", value=self.management_endpoint,
                  description="Cluster endpoint for the Azure DevOps service connection (certificate auth)")
        CfnOutput(self, "ExplorerUrl", value=f"https://{self.management.dns_name}:{HTTP_GATEWAY_PORT}/Explorer",
                  description="Service Fabric Explorer and the HTTP gateway (admin client certificate)")
        CfnOutput(self, "ApplicationEndpoint", value=self.applications.dns_name,
                  description=f"Application load balancer, TCP {', '.join(map(str, settings.application_ports))}")
        CfnOutput(self, "ScalingGroupName", value=self.scaling.group.auto_scaling_group_name)
        # What telemetry/shared/cluster_inventory.py reads (ClusterOutputs): operator tools find the cluster
        # from --env alone. All but the endpoints are literal, so a dry run reads them from cdk.out.
        CfnOutput(self, "HttpGatewayEndpoint", value=f"https://{self.management.dns_name}:{HTTP_GATEWAY_PORT}",
                  description="Service Fabric HTTP gateway for operator tools (admin client certificate)")
        CfnOutput(self, "Seeds", value=seed_nodes_output(self.seeds.placements),
                  description="Seed nodes: name, fixed address, zone, fault and upgrade domain (JSON)")
        CfnOutput(self, "ClusterCertificateSecret", value=settings.cluster_certificate_secret)
        CfnOutput(self, "AdminCertificateSecret", value=settings.admin_certificate_secret)
        CfnOutput(self, "CreateClusterDocumentName", value=create_cluster_document_name(config))
        CfnOutput(self, "ClusterNodesDocumentName", value=cluster_nodes_document_name(config))
