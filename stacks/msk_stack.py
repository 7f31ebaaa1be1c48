"""MSK stack: the Kafka cluster, its bootstrap broker parameter, the topic administrator role,
alarms and dashboard widgets."""

from __future__ import annotations

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_sns as sns
from constructs import Construct

from stacks import sizing
from stacks.config import MIN_INSYNC_REPLICAS, EnvironmentConfig
from stacks.constructs.bootstrap_brokers import BootstrapBrokers
from stacks.constructs.msk_cluster import MskCluster
from stacks.constructs.msk_monitoring import MskMonitoring
from stacks.constructs.topic_administrator import TopicAdministrator
from stacks.naming import bootstrap_parameter_name, topic_admin_role_name
from stacks.removal import removal_policy


class MskStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: EnvironmentConfig,
        vpc: ec2.IVpc,
        alarm_topic: sns.ITopic,
        dashboard: cloudwatch.Dashboard,
        **kwargs,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        settings = config.msk
        self.kafka = MskCluster(
            self,
            "Kafka",
            vpc=vpc,
            cluster_name=config.resource_prefix,
            kafka_version=settings.kafka_version,
            broker_instance_type=settings.broker_instance_type,
            broker_count=settings.broker_count,
            ebs_volume_gib=settings.ebs_volume_gib,
            storage_autoscaling_max_gib=settings.storage_autoscaling_max_gib,
            storage_autoscaling_target_percent=settings.storage_autoscaling_target_percent,
            enhanced_monitoring=settings.enhanced_monitoring,
            log_retention_hours=settings.log_retention_hours,
            min_insync_replicas=MIN_INSYNC_REPLICAS,
            broker_log_retention_days=settings.broker_log_retention_days,
            removal_policy=removal_policy(config),
            tiered_storage=settings.tiered_storage is not None,
        )
        self.bootstrap_brokers = BootstrapBrokers(
            self,
            "BootstrapBrokers",
            cluster_arn=self.kafka.cluster_arn,
            broker_count=settings.broker_count,
            parameter_name=bootstrap_parameter_name(config),
        )
        self.topic_administrator = TopicAdministrator(
            self,
            "TopicAdministrator",
            role_name=topic_admin_role_name(config),
            cluster_name=self.kafka.cluster_name,
            administrators=config.msk.topic_administrators,
        )
        self.kafka.grant_topic_administration(
            self.topic_administrator.role, [topic.name for topic in settings.topics]
        )
        MskMonitoring(
            self,
            "Monitoring",
            cluster_name=self.kafka.cluster_name,
            broker_count=settings.broker_count,
            cpu_alarm_percent=settings.cpu_alarm_percent,
            disk_alarm_percent=settings.disk_alarm_percent,
            bytes_in_alarm_bytes_s=sizing.broker_bytes_in_alarm_bytes_s(config),
            bytes_in_counts_replication=sizing.bytes_in_counts_replication(config),
            compression_ratio=config.workload.compression_ratio,
            environment=config.name,
            alarm_topic=alarm_topic,
            dashboard=dashboard,
        )
        CfnOutput(self, "ClusterArn", value=self.kafka.cluster_arn)
        CfnOutput(
            self,
            "BootstrapBrokersParameter",
            value=self.bootstrap_brokers.parameter.parameter_name,
            description="SSM parameter holding the SASL/IAM bootstrap brokers",
        )
        CfnOutput(
            self,
            "TopicAdministratorRoleArn",
            value=self.topic_administrator.role.role_arn,
            description="Role operators assume (with MFA) to run telemetry topics",
        )
