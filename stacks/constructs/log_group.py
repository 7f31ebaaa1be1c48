"""CloudWatch Logs groups whose retention comes from config as a number of days."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_logs as logs
from constructs import Construct


def log_group(
    scope: Construct,
    construct_id: str,
    *,
    retention_days: int,
    removal_policy: RemovalPolicy,
    log_group_name: str | None = None,
) -> logs.LogGroup:
    group = logs.LogGroup(
        scope, construct_id, log_group_name=log_group_name, removal_policy=removal_policy
    )
    # Config validates the value against the retentions CloudWatch accepts; the enum form of
    # RetentionDays has no lookup by number, so set the property directly.
    resource = group.node.default_child
    assert isinstance(resource, logs.CfnLogGroup)
    resource.retention_in_days = retention_days
    return group
