"""Device gateway stack: field devices into MSK through AWS IoT Core, with no Lambda in the path.

The SCRAM user and its secret, the VPC topic rule destination, the topic rule with the Kafka action
and the queue its error action fills, the devices' IoT policy, alarms and dashboard widgets. The MSK stack owns
the SCRAM listener and the security group that reaches it.
"""

from __future__ import annotations

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sns as sns
from constructs import Construct

from stacks.compliance import acknowledge, wildcard_resource_finding
from stacks.config import EnvironmentConfig
from stacks.constructs.bootstrap_brokers import BootstrapBrokers
from stacks.constructs.destination_keeper import DestinationKeeper
from stacks.constructs.device_gateway_monitoring import DeviceGatewayMonitoring
from stacks.constructs.device_policy import DevicePolicy
from stacks.constructs.failed_deliveries import FailedDeliveries
from stacks.constructs.kafka_topic_rule import KafkaTopicRule
from stacks.constructs.keys import rotating_key
from stacks.constructs.msk_cluster import MskCluster
from stacks.constructs.scram_user import ScramUser
from stacks.naming import (
    DEVICE_ENVIRONMENT_ATTRIBUTE,
    DEVICE_THING_LEVEL,
    FAILED_DELIVERIES_QUEUE_OUTPUT,
    device_credentials_path,
    device_failed_deliveries_queue_name,
    device_gateway_secret_name,
    device_policy_name,
    device_rule_name,
    device_topic_filter,
    device_topic_prefix,
    scram_bootstrap_parameter_name,
)
from stacks.removal import removal_policy


class DeviceGatewayStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: EnvironmentConfig,
        vpc: ec2.IVpc,
        kafka: MskCluster,
        fleet_role: iam.IRole,
        alarm_topic: sns.ITopic,
        dashboard: cloudwatch.Dashboard,
        **kwargs,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        settings = config.device_gateway
        scram_user = ScramUser(
            self,
            "ScramUser",
            secret_name=device_gateway_secret_name(config),
            username=settings.scram_username,
            cluster_arn=kafka.cluster_arn,
            removal_policy=removal_policy(config),
        )
        brokers = BootstrapBrokers(
            self,
            "ScramBootstrapBrokers",
            cluster_arn=kafka.cluster_arn,
            broker_count=config.msk.broker_count,
            parameter_name=scram_bootstrap_parameter_name(config),
            listener="SaslScram",
        )
        failed = FailedDeliveries(
            self,
            "FailedDeliveries",
            queue_name=device_failed_deliveries_queue_name(config),
            alarm_name_prefix=f"{config.resource_prefix}-device-gateway",
            alarm_topic=alarm_topic,
            removal_policy=removal_policy(config),
        )
        rule = KafkaTopicRule(
            self,
            "TelemetryRule",
            vpc=vpc,
            subnets=vpc.select_subnets(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS).subnets,
            security_group=kafka.scram_client_security_group,
            rule_name=device_rule_name(config),
            topic_filter=device_topic_filter(config),
            thing_level=DEVICE_THING_LEVEL,
            kafka_topic=settings.topic,
            bootstrap_brokers=brokers.brokers,
            scram_user=scram_user,
            error_queue=failed.queue,
        )
        keeper = DestinationKeeper(
            self,
            "DestinationKeeper",
            destination_arn=rule.destination.attr_arn,
            destination_role=rule.destination_role,
            environment=config.resource_prefix,
            alarm_name_prefix=f"{config.resource_prefix}-device-gateway",
            alarm_topic=alarm_topic,
            log_retention_days=settings.log_retention_days,
            removal_policy=removal_policy(config),
        )
        DevicePolicy(
            self,
            "DevicePolicy",
            policy_name=device_policy_name(config),
            environment_attribute=DEVICE_ENVIRONMENT_ATTRIBUTE,
            environment=config.name,
            topic_prefix=device_topic_prefix(config),
        )
        DeviceGatewayMonitoring(
            self,
            "Monitoring",
            rule_name=device_rule_name(config),
            alarm_name_prefix=f"{config.resource_prefix}-device-gateway",
            failure_alarm_messages=settings.failure_alarm_messages,
            publish_quota_per_s=settings.publish_quota_per_s,
            connect_quota_per_s=settings.connect_quota_per_s,
            quota_alarm_percent=settings.quota_alarm_percent,
            alarm_topic=alarm_topic,
            dashboard=dashboard,
        )
        self._device_credentials(config, fleet_role)
        CfnOutput(self, "TopicRuleName", value=rule.rule_name)
        CfnOutput(self, FAILED_DELIVERIES_QUEUE_OUTPUT, value=failed.queue.queue_url)
        CfnOutput(self, "DestinationKeeperLogGroup", value=keeper.log_group.log_group_name)
        CfnOutput(self, "ScramSecretArn", value=scram_user.secret.secret_arn)
        CfnOutput(self, "DevicePolicyName", value=device_policy_name(config))

    def _device_credentials(self, config: EnvironmentConfig, fleet_role: iam.IRole) -> None:
        """The key telemetry/commands/devices/provision.py encrypts each simulator device's certificate and
        private key with (SSM SecureString parameters under one path), and the fleet hosts' right
        to read them back: that path only, decrypted only through SSM."""
        key = rotating_key(
            self,
            "DeviceCredentialsKey",
            description=f"Encrypts the simulator devices' credentials under {device_credentials_path(config)}",
            removal_policy=removal_policy(config),
        )
        path = device_credentials_path(config)  # "/<prefix>/devices"
        parameters = self.format_arn(service="ssm", resource="parameter", resource_name=path.lstrip("/"))
        policy = iam.Policy(
            self,
            "FleetReadsDeviceCredentials",
            roles=[fleet_role],
            statements=[
                iam.PolicyStatement(actions=["ssm:GetParametersByPath"], resources=[parameters]),
                iam.PolicyStatement(
                    actions=["ssm:GetParameter", "ssm:GetParameters"], resources=[f"{parameters}/*"]
                ),
                iam.PolicyStatement(
                    actions=["kms:Decrypt"],
                    resources=[key.key_arn],
                    conditions={"StringEquals": {"kms:ViaService": f"ssm.{self.region}.amazonaws.com"}},
                ),
            ],
        )
        acknowledge(
            policy,
            "AwsSolutions-IAM5",
            "Fleet hosts read the credentials of the devices they simulate: one parameter per device "
            "under this environment's device path, named by telemetry/commands/devices/provision.py",
            finding=wildcard_resource_finding(f"{parameters}/*"),
        )
        CfnOutput(self, "DeviceCredentialsKeyArn", value=key.key_arn)
        CfnOutput(self, "DeviceCredentialsPath", value=path)
