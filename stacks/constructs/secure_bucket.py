"""An S3 bucket as every bucket of this platform should be: private, encrypted, TLS-only, logged."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from stacks.compliance import acknowledge, skip_check
from stacks.constructs.sdk_call_role import skip_deploy_time_function_checks


class SecureBucket(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        removal_policy: RemovalPolicy,
        expiration_days: int | None = None,
        access_log_retention_days: int = 365,
        encryption_key: kms.IKey | None = None,
        transitions: Sequence[s3.Transition] = (),
        noncurrent_version_expiration_days: int = 30,
        # Unfinished multipart uploads are storage nobody can read; a bucket whose writer resumes
        # uploads after a restart (a Flink file sink restoring a snapshot) needs a longer window.
        abort_incomplete_uploads_after_days: int = 7,
        extra_lifecycle_rules: Sequence[s3.LifecycleRule] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        destroy = removal_policy == RemovalPolicy.DESTROY
        self.encryption_key = encryption_key

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
        skip_check(self.access_logs, "CKV_AWS_18", "This is the access-log bucket of its sibling bucket; logging it "
                   "to itself would loop")
        skip_check(self.access_logs, "CKV_AWS_21", "Only S3 log delivery writes here, each log object once and never "
                   "over another; objects leave by the lifecycle expiration alone, so versions would only keep "
                   "expired logs")
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            # With a customer-managed key, an S3 Bucket Key keeps KMS requests (and their cost)
            # per bucket rather than per object.
            encryption=s3.BucketEncryption.KMS if encryption_key else s3.BucketEncryption.S3_MANAGED,
            encryption_key=encryption_key,
            bucket_key_enabled=True if encryption_key else None,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix="s3-access/",
            lifecycle_rules=[
                s3.LifecycleRule(
                    expiration=Duration.days(expiration_days) if expiration_days else None,
                    transitions=list(transitions) or None,
                    noncurrent_version_expiration=Duration.days(noncurrent_version_expiration_days),
                    abort_incomplete_multipart_upload_after=Duration.days(abort_incomplete_uploads_after_days),
                ),
                *extra_lifecycle_rules,
            ],
            removal_policy=removal_policy,
            auto_delete_objects=destroy,
        )
        if destroy:
            # The CDK's handler that empties the buckets before CloudFormation deletes them.
            provider = Stack.of(self).node.find_child("Custom::S3AutoDeleteObjectsCustomResourceProvider")
            skip_deploy_time_function_checks(provider.node.find_child("Handler"), "S3 ListObjectVersions and "
                                             "DeleteObjects on the stack's own buckets, when the stack is destroyed")  # fmt: skip

    def grant_write_under(self, grantee: iam.IGrantable, prefixes: Sequence[str]) -> None:
        """Let `grantee` write, read back and clean up objects under `prefixes` (e.g. a file sink's
        in-progress and committed parts), list only those prefixes, and use the bucket's key."""
        keys = [self.bucket.arn_for_objects(f"{prefix}/*") for prefix in prefixes]
        iam.Grant.add_to_principal(
            grantee=grantee,
            actions=[
                "s3:PutObject",
                "s3:GetObject",
                "s3:DeleteObject",
                "s3:AbortMultipartUpload",
                "s3:ListMultipartUploadParts",
            ],
            resource_arns=keys,
        )
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[self.bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [p for prefix in prefixes for p in (prefix, f"{prefix}/*")]}},
            )
        )
        iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["s3:GetBucketLocation", "s3:ListBucketMultipartUploads"],
            resource_arns=[self.bucket.bucket_arn],
        )
        if self.encryption_key:
            iam.Grant.add_to_principal(
                grantee=grantee,
                actions=["kms:Decrypt", "kms:GenerateDataKey"],
                resource_arns=[self.encryption_key.key_arn],
            )
