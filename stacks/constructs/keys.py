"""The platform's customer managed KMS keys: rotated yearly, and kept pending deletion for a window
before KMS deletes them, so a key deleted by mistake can be recovered."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_kms as kms
from constructs import Construct


def rotating_key(scope: Construct, construct_id: str, *, description: str, removal_policy: RemovalPolicy,
                 pending_days: int = 30) -> kms.Key:  # fmt: skip
    return kms.Key(scope, construct_id, description=description, enable_key_rotation=True,
                   pending_window=Duration.days(pending_days), removal_policy=removal_policy)  # fmt: skip
