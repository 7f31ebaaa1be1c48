"""CloudWatch Logs groups whose retention comes from config as a number of days."""

from __future__ import annotations

from aws_cdk import ArnFormat, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
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


def grant_run_command_output(group: logs.LogGroup, role: iam.IRole, log_group_name: str) -> None:
    """What an instance's SSM agent needs to write a Run Command's output to `group` (SendCommand's
    CloudWatchOutputConfig), as the agent makes the calls (aws/amazon-ssm-agent): CreateLogGroup
    first, whose ResourceAlreadyExistsException it takes as success and without which it sends
    nothing at all (iohandler.go DefaultIOHandler.Init, cloudwatchlogsservice.go CreateLogGroup);
    then CreateLogStream and PutLogEvents per stream (StreamData), DescribeLogStreams for a
    sequence token (GetSequenceTokenForStream). All on this one group: its name, and its streams."""
    group.grant_write(role)
    stack = Stack.of(group)
    exact = stack.format_arn(service="logs", resource="log-group", resource_name=log_group_name,
                             arn_format=ArnFormat.COLON_RESOURCE_NAME)
    role.add_to_principal_policy(iam.PolicyStatement(
        actions=["logs:CreateLogGroup", "logs:DescribeLogStreams"], resources=[exact, group.log_group_arn]))
