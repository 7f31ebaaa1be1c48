"""An SQS queue that holds what a service could not deliver until an operator or a tool reads it:
SQS-managed encryption (the writing service needs no key policy; a customer managed key would need
one granting it kms:GenerateDataKey), TLS only, and the longest retention SQS allows."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from stacks.compliance import acknowledge, skip_check
from stacks.naming import SQS_MAX_RETENTION_DAYS

RETENTION = cdk.Duration.days(SQS_MAX_RETENTION_DAYS)


def dead_letter_queue(
    scope: Construct, *, queue_name: str, why_no_further_queue: str, removal_policy: cdk.RemovalPolicy | None = None
) -> sqs.Queue:
    """The queue, as `scope`'s child "Queue"; `why_no_further_queue` answers cdk-nag's SQS3."""
    queue = sqs.Queue(
        scope,
        "Queue",
        queue_name=queue_name,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        retention_period=RETENTION,
        removal_policy=removal_policy,
    )
    acknowledge(queue, "AwsSolutions-SQS3", why_no_further_queue)
    skip_check(queue, "CKV_AWS_27", "Encrypted at rest with SQS-managed keys (SqsManagedSseEnabled), which this "
               "check does not recognise: it looks for a KMS key only")
    return queue
