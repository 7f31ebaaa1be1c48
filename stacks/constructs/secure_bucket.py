"""An S3 bucket as every bucket of this platform should be: private, encrypted, TLS-only, logged."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_s3 as s3
from constructs import Construct

from stacks.compliance import acknowledge


class SecureBucket(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        removal_policy: RemovalPolicy,
        expiration_days: int | None = None,
        access_log_retention_days: int = 365,
    ) -> None:
        super().__init__(scope, construct_id)
        destroy = removal_policy == RemovalPolicy.DESTROY

        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,  # log delivery cannot write with a KMS key
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(access_log_retention_days))],
            removal_policy=removal_policy,
            auto_delete_objects=destroy,
        )
        acknowledge(
            self.access_logs,
            "AwsSolutions-S1",
            "This is the access-log bucket of its sibling bucket; logging it to itself would loop",
        )
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix="s3-access/",
            lifecycle_rules=[
                s3.LifecycleRule(
                    expiration=Duration.days(expiration_days) if expiration_days else None,
                    noncurrent_version_expiration=Duration.days(30),
                    abort_incomplete_multipart_upload_after=Duration.days(7),
                )
            ],
            removal_policy=removal_policy,
            auto_delete_objects=destroy,
        )
