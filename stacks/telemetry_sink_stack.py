"""Telemetry sink stack: the telemetry bucket, the Managed Flink job that fills it from MSK, the
Glue table and Athena workgroup that query it, and the job's alarms and dashboard widgets."""

from __future__ import annotations

from aws_cdk import CfnOutput, Duration, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from stacks.compliance import PARTITION, acknowledge, attribute_ref, wildcard_resource_finding
from stacks.config import EnvironmentConfig
from stacks.constructs.flink_application import FlinkApplication
from stacks.constructs.flink_jar import flink_jar_asset
from stacks.constructs.keys import rotating_key
from stacks.constructs.msk_cluster import MskCluster
from stacks.constructs.secure_bucket import SecureBucket
from stacks.constructs.telemetry_catalog import TelemetryCatalog
from stacks.constructs.telemetry_sink_monitoring import TelemetrySinkMonitoring
from stacks.naming import (
    ATHENA_RESULTS_PREFIX,
    DEAD_LETTER_PREFIX,
    SMOKE_EXPIRE_DAYS,
    SMOKE_PREFIX,
    TELEMETRY_PREFIX,
    TELEMETRY_TABLE_NAME,
    athena_workgroup_name,
    bootstrap_parameter_name,
    telemetry_database_name,
    telemetry_sink_application_name,
    telemetry_sink_consumer_group,
    telemetry_sink_log_group_name,
)
from stacks.removal import removal_policy


class TelemetrySinkStack(Stack):
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
        settings = config.telemetry_sink
        retain = removal_policy(config)
        application_name = telemetry_sink_application_name(config)
        consumer_group = telemetry_sink_consumer_group(config)

        key = rotating_key(
            self,
            "TelemetryKey",
            description=f"Encrypts the telemetry bucket and Athena results of {config.resource_prefix}",
            removal_policy=retain,
        )
        # Glacier Instant Retrieval: Athena reads it like any other class (Flexible Retrieval and
        # Deep Archive objects would need a restore first), at archive storage prices.
        storage = SecureBucket(
            self,
            "Telemetry",
            removal_policy=retain,
            encryption_key=key,
            transitions=[
                s3.Transition(
                    storage_class=s3.StorageClass.INFREQUENT_ACCESS,
                    transition_after=Duration.days(settings.infrequent_access_after_days),
                ),
                s3.Transition(
                    storage_class=s3.StorageClass.GLACIER_INSTANT_RETRIEVAL,
                    transition_after=Duration.days(settings.archive_after_days),
                ),
            ],
            noncurrent_version_expiration_days=settings.noncurrent_versions_expire_after_days,
            # The job's part files are multipart uploads that a snapshot restore resumes.
            abort_incomplete_uploads_after_days=settings.abort_incomplete_uploads_after_days,
            extra_lifecycle_rules=[
                s3.LifecycleRule(
                    id="ExpireAthenaResults",
                    prefix=f"{ATHENA_RESULTS_PREFIX}/",
                    expiration=Duration.days(settings.athena_results_expire_after_days),
                ),
                # The bucket is versioned: an expiration only adds a delete marker, so the versions
                # it hides expire a day later too, and the markers left alone are removed (S3 User
                # Guide, "Lifecycle configuration elements": NoncurrentVersionExpiration,
                # ExpiredObjectDeleteMarker, which cannot share a rule with Expiration in days).
                s3.LifecycleRule(
                    id="ExpireSmokeRuns",
                    prefix=f"{SMOKE_PREFIX}/",
                    expiration=Duration.days(SMOKE_EXPIRE_DAYS),
                    noncurrent_version_expiration=Duration.days(SMOKE_EXPIRE_DAYS),
                ),
                s3.LifecycleRule(
                    id="RemoveSmokeDeleteMarkers",
                    prefix=f"{SMOKE_PREFIX}/",
                    expired_object_delete_marker=True,
                ),
            ],
        )
        self.bucket = storage.bucket

        # Read from the parameter the MSK stack publishes, at every deploy: an export of the broker
        # string would block the MSK stack from ever changing it while this stack imports it.
        bootstrap_brokers = ssm.StringParameter.value_for_string_parameter(self, bootstrap_parameter_name(config))
        topic = settings.topic
        self.sink = FlinkApplication(
            self,
            "Sink",
            application_name=application_name,
            runtime=settings.runtime,
            code=flink_jar_asset(self, "SinkJar"),
            vpc=vpc,
            security_groups=[kafka.client_security_group],
            parallelism=settings.parallelism,
            parallelism_per_kpu=settings.parallelism_per_kpu,
            autoscaling=settings.autoscaling,
            checkpoint_interval_seconds=settings.checkpoint_interval_seconds,
            min_pause_between_checkpoints_seconds=settings.min_pause_between_checkpoints_seconds,
            # The contract with the job (flink/): group and key names it reads at start-up.
            property_groups={
                "KafkaSource": {
                    "bootstrap.servers": bootstrap_brokers,
                    "topic": topic,
                    "group.id": consumer_group,
                    "security.protocol": "SASL_SSL",
                    "starting.offsets": "committed-earliest",
                },
                "Sink": {
                    "output.path": f"s3://{self.bucket.bucket_name}/{TELEMETRY_PREFIX}",
                    "dead.letter.path": f"s3://{self.bucket.bucket_name}/{DEAD_LETTER_PREFIX}",
                    # Smoke runs' records (telemetry deploy) go here, outside the table's prefix.
                    "smoke.path": f"s3://{self.bucket.bucket_name}/{SMOKE_PREFIX}",
                    "max.part.size.mb": str(settings.max_part_size_mb),
                    # Readings whose device clock falls outside the table's projection are filed by
                    # their ingest time (flink/, DeviceClock).
                    "earliest.event.date": settings.projection_start_date,
                    "max.clock.ahead.seconds": str(settings.max_clock_ahead_seconds),
                },
            },
            log_group_name=telemetry_sink_log_group_name(config),
            log_retention_days=settings.log_retention_days,
            removal_policy=retain,
        )

        kafka.grant_consume(self.sink.role, topic, consumer_group)
        acknowledge(
            self.sink.role,
            "AwsSolutions-IAM5",
            f"Group ARNs carry the cluster's UUID, which is only known after deployment; the wildcard "
            f"stands for that UUID alone, on the one consumer group {consumer_group} of this cluster",
            finding=wildcard_resource_finding(
                f"arn:{PARTITION}:kafka:{config.region}:{config.account}:group/{kafka.cluster_name}/*/{consumer_group}"
            ),
        )
        storage.grant_write_under(self.sink.role, [TELEMETRY_PREFIX, DEAD_LETTER_PREFIX, SMOKE_PREFIX])
        for prefix in (TELEMETRY_PREFIX, DEAD_LETTER_PREFIX, SMOKE_PREFIX):
            acknowledge(
                self.sink.role,
                "AwsSolutions-IAM5",
                f"The Flink file sink names its part files at run time (partition, subtask, counter), so it "
                f"writes, reads back and cleans up objects by prefix; only under {prefix}/ of its own bucket",
                finding=wildcard_resource_finding(f"{attribute_ref(storage.bucket, 'Arn')}/{prefix}/*"),
            )

        self.catalog = TelemetryCatalog(
            self,
            "Catalog",
            bucket=self.bucket,
            prefix=TELEMETRY_PREFIX,
            database_name=telemetry_database_name(config),
            table_name=TELEMETRY_TABLE_NAME,
            projection_start_date=settings.projection_start_date,
            workgroup_name=athena_workgroup_name(config),
            results_prefix=ATHENA_RESULTS_PREFIX,
            results_key=key,
            delete_workgroup_with_history=not config.production,
        )

        TelemetrySinkMonitoring(
            self,
            "Monitoring",
            application_name=application_name,
            runtime=settings.runtime,
            consumer_lag_alarm_records=settings.consumer_lag_alarm_records,
            dead_letter_alarm_records=settings.dead_letter_alarm_records,
            clock_alarm_records=settings.clock_alarm_records,
            not_running_alarm_minutes=settings.not_running_alarm_minutes,
            alarm_topic=alarm_topic,
            dashboard=dashboard,
        )

        CfnOutput(self, "TelemetryBucket", value=self.bucket.bucket_name)
        CfnOutput(self, "ApplicationName", value=application_name)
        CfnOutput(self, "AthenaWorkgroup", value=athena_workgroup_name(config))
        CfnOutput(
            self,
            "AthenaTable",
            value=f"{telemetry_database_name(config)}.{TELEMETRY_TABLE_NAME}",
        )
