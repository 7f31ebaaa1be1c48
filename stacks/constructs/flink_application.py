"""A Managed Service for Apache Flink application: its role, code, logging and VPC access.

The construct grants what any VPC-attached Flink application needs (its code, its log stream,
the network interfaces the service creates in the VPC). What the job reads and writes is granted
by the stack, where the resources meet: `application.role` is the grantee.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import ArnFormat, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kinesisanalyticsv2 as flink
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from stacks.compliance import acknowledge, skip_check, wildcard_resource_finding
from stacks.constructs.log_group import grant_find_log_group, grant_key_through_logs, log_group

LOG_STREAM = "application"
# What the service needs to place the application's network interfaces in the VPC (Managed
# Service for Apache Flink developer guide, "VPC application permissions").
VPC_ACTIONS = (
    "ec2:DescribeVpcs",
    "ec2:DescribeSubnets",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeDhcpOptions",
    "ec2:CreateNetworkInterface",
    "ec2:CreateNetworkInterfacePermission",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DeleteNetworkInterface",
)


class FlinkApplication(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        application_name: str,
        runtime: str,
        code: s3_assets.Asset,
        vpc: ec2.IVpc,
        security_groups: Sequence[ec2.ISecurityGroup],
        parallelism: int,
        parallelism_per_kpu: int,
        autoscaling: bool,
        checkpoint_interval_seconds: int,
        min_pause_between_checkpoints_seconds: int,
        property_groups: Mapping[str, Mapping[str, str]],
        log_group_name: str,
        log_retention_days: int,
        removal_policy: RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.application_name = application_name
        application_arn = stack.format_arn(
            service="kinesisanalytics", resource="application", resource_name=application_name
        )

        self.role = iam.Role(
            self,
            "ServiceRole",
            # Only this application, in this account, may act with the role (confused deputy).
            assumed_by=iam.ServicePrincipal(
                "kinesisanalytics.amazonaws.com",
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnEquals": {"aws:SourceArn": application_arn},
                },
            ),
            description=f"Service execution role of the Managed Flink application {application_name}",
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject", "s3:GetObjectVersion"],
                resources=[code.bucket.arn_for_objects(code.s3_object_key)],
            )
        )

        self.log_group = log_group(
            self, "Logs", log_group_name=log_group_name, retention_days=log_retention_days, removal_policy=removal_policy
        )
        log_stream = logs.LogStream(
            self, "LogStream", log_group=self.log_group, log_stream_name=LOG_STREAM, removal_policy=removal_policy
        )
        log_stream_arn = stack.format_arn(
            service="logs",
            resource="log-group",
            resource_name=f"{log_group_name}:log-stream:{LOG_STREAM}",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        # The service checks the log group and stream exist before it delivers to the stream.
        grant_find_log_group(self.log_group, self.role, "Managed Flink calls it to find its own log group before delivering")
        self.role.add_to_policy(iam.PolicyStatement(actions=["logs:PutLogEvents"], resources=[log_stream_arn]))
        grant_key_through_logs(self.log_group, self.role)

        self.role.add_to_policy(iam.PolicyStatement(actions=list(VPC_ACTIONS), resources=["*"]))
        acknowledge(
            self.role,
            "AwsSolutions-IAM5",
            "Managed Flink creates and deletes the application's network interfaces in the VPC with this "
            "role; the EC2 Describe calls take no resource, and the service names the interfaces it "
            "creates, so AWS documents these eight actions on all resources",
            finding=wildcard_resource_finding("*"),
        )
        vpc_reason = ("Managed Flink's VPC actions, which AWS documents on all resources (Managed Service for Apache "
                      "Flink Developer Guide, VPC permissions): it creates the application's network interfaces "
                      "before their ids exist, and shares them with CreateNetworkInterfacePermission")
        policy = self.role.node.find_child("DefaultPolicy")
        skip_check(policy, "CKV_AWS_111", vpc_reason)
        skip_check(policy, "CKV_AWS_109", vpc_reason)

        # Egress to AWS APIs (S3 through the gateway endpoint, KMS and CloudWatch): the MSK client
        # group given by the caller opens only the brokers' port.
        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            description=f"Managed Flink application {application_name}: HTTPS to AWS APIs; no inbound",
            allow_all_outbound=False,
        )
        self.security_group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "HTTPS to S3, KMS and CloudWatch")

        self.application = flink.CfnApplication(
            self,
            "Application",
            application_name=application_name,
            application_description="Copies the telemetry topic from MSK to Parquet files in S3, exactly once",
            runtime_environment=runtime,
            application_mode="STREAMING",
            service_execution_role=self.role.role_arn,
            application_configuration=flink.CfnApplication.ApplicationConfigurationProperty(
                application_code_configuration=flink.CfnApplication.ApplicationCodeConfigurationProperty(
                    code_content_type="ZIPFILE",
                    code_content=flink.CfnApplication.CodeContentProperty(
                        s3_content_location=flink.CfnApplication.S3ContentLocationProperty(
                            bucket_arn=code.bucket.bucket_arn, file_key=code.s3_object_key
                        )
                    ),
                ),
                flink_application_configuration=flink.CfnApplication.FlinkApplicationConfigurationProperty(
                    # The file sink only commits files on completed checkpoints: without them nothing
                    # would ever become visible in S3.
                    checkpoint_configuration=flink.CfnApplication.CheckpointConfigurationProperty(
                        configuration_type="CUSTOM",
                        checkpointing_enabled=True,
                        checkpoint_interval=checkpoint_interval_seconds * 1000,
                        min_pause_between_checkpoints=min_pause_between_checkpoints_seconds * 1000,
                    ),
                    parallelism_configuration=flink.CfnApplication.ParallelismConfigurationProperty(
                        configuration_type="CUSTOM",
                        parallelism=parallelism,
                        parallelism_per_kpu=parallelism_per_kpu,
                        auto_scaling_enabled=autoscaling,
                    ),
                    # Application level: the metrics alarms and the dashboard use carry only the
                    # `Application` dimension.
                    monitoring_configuration=flink.CfnApplication.MonitoringConfigurationProperty(
                        configuration_type="CUSTOM", log_level="INFO", metrics_level="APPLICATION"
                    ),
                ),
                application_snapshot_configuration=flink.CfnApplication.ApplicationSnapshotConfigurationProperty(
                    snapshots_enabled=True
                ),
                environment_properties=flink.CfnApplication.EnvironmentPropertiesProperty(
                    property_groups=[
                        flink.CfnApplication.PropertyGroupProperty(property_group_id=group, property_map=dict(values))
                        for group, values in property_groups.items()
                    ]
                ),
                vpc_configurations=[
                    flink.CfnApplication.VpcConfigurationProperty(
                        subnet_ids=vpc.select_subnets(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS).subnet_ids,
                        security_group_ids=[
                            self.security_group.security_group_id,
                            *(group.security_group_id for group in security_groups),
                        ],
                    )
                ],
            ),
            # When an update restarts a running application, it resumes from its latest snapshot, so
            # offsets and in-progress files survive a deploy.
            run_configuration=flink.CfnApplication.RunConfigurationProperty(
                application_restore_configuration=flink.CfnApplication.ApplicationRestoreConfigurationProperty(
                    application_restore_type="RESTORE_FROM_LATEST_SNAPSHOT"
                ),
                flink_run_configuration=flink.CfnApplication.FlinkRunConfigurationProperty(
                    allow_non_restored_state=False
                ),
            ),
        )
        # The service checks the role's permissions (code, VPC) when the application is created,
        # so its policy must exist first (the role itself is already referenced).
        self.application.node.add_dependency(self.role.node.find_child("DefaultPolicy"))
        self.application.apply_removal_policy(removal_policy)

        logging_option = flink.CfnApplicationCloudWatchLoggingOption(
            self,
            "Logging",
            application_name=application_name,
            cloud_watch_logging_option=flink.CfnApplicationCloudWatchLoggingOption.CloudWatchLoggingOptionProperty(
                log_stream_arn=log_stream_arn
            ),
        )
        logging_option.add_resource_dependency(self.application)
        logging_option.node.add_dependency(log_stream)

