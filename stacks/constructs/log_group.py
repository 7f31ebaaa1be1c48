"""CloudWatch Logs groups whose retention comes from config as a number of days."""

from __future__ import annotations

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

from stacks.compliance import PARTITION, acknowledge, attribute_ref, wildcard_resource_finding


LOGS_KEY_ID = "LogsKey"
# What CloudWatch Logs does with a log group's key (Amazon CloudWatch Logs User Guide, "Encrypt log
# data in CloudWatch Logs using AWS Key Management Service": the key policy statement for
# logs.<region>.amazonaws.com, scoped by the kms:EncryptionContext:aws:logs:arn of the groups).
LOGS_KEY_ACTIONS = ("kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*")
_KEEPS = (RemovalPolicy.RETAIN, RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE, RemovalPolicy.SNAPSHOT)


def logs_key(scope: Construct, removal_policy: RemovalPolicy) -> kms.Key:
    """The stack's one key for its log groups (a customer managed key: who may use it is this key
    policy, and its use is in CloudTrail). CloudWatch Logs encrypts and decrypts with it for the
    groups of this account and region only; writers and readers need no KMS permission of their own.
    Kept as long as the longest-kept group it encrypts: a retained group outlives its stack."""
    stack = Stack.of(scope)
    key = stack.node.try_find_child(LOGS_KEY_ID)
    if key is None:
        key = kms.Key(stack, LOGS_KEY_ID, description=f"CloudWatch Logs log groups of {stack.stack_name}",
                      enable_key_rotation=True, pending_window=Duration.days(30), removal_policy=removal_policy)  # fmt: skip
        key.add_to_resource_policy(iam.PolicyStatement(
            sid="CloudWatchLogsForThisAccountsGroups",
            principals=[iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],
            actions=list(LOGS_KEY_ACTIONS),
            resources=["*"],  # in a key policy, "*" is this key
            conditions={"ArnLike": {"kms:EncryptionContext:aws:logs:arn": stack.format_arn(
                service="logs", resource="log-group", resource_name="*", arn_format=ArnFormat.COLON_RESOURCE_NAME)}},
        ))  # fmt: skip
    assert isinstance(key, kms.Key)
    if removal_policy in _KEEPS:
        key.apply_removal_policy(removal_policy)
    return key


def log_group(
    scope: Construct,
    construct_id: str,
    *,
    retention_days: int,
    removal_policy: RemovalPolicy,
    log_group_name: str | None = None,
) -> logs.LogGroup:
    """A log group encrypted with its stack's logs key (logs_key)."""
    group = logs.LogGroup(
        scope, construct_id, log_group_name=log_group_name, removal_policy=removal_policy,
        encryption_key=logs_key(scope, removal_policy),
    )
    # Config validates the value against the retentions CloudWatch accepts; the enum form of
    # RetentionDays has no lookup by number, so set the property directly.
    resource = group.node.default_child
    assert isinstance(resource, logs.CfnLogGroup)
    resource.retention_in_days = retention_days
    return group


def function_role(scope: Construct, construct_id: str, *, group: logs.LogGroup, description: str) -> iam.Role:
    """A Lambda function's execution role that writes its own log group and no other.

    Lambda's default, the AWS managed AWSLambdaBasicExecutionRole, allows logs:CreateLogGroup,
    CreateLogStream and PutLogEvents on every log group of the account (AWS Managed Policy
    Reference): a function of one environment could write into another's logs. The function
    writes to the group it is given (its LoggingConfig), which exists before it runs, so the role
    needs only CreateLogStream and PutLogEvents on that group's streams ("Sending Lambda function
    logs to CloudWatch Logs": the permissions Lambda's logging needs)."""
    role = iam.Role(scope, construct_id, assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"), description=description)
    group.grant_write(role)
    acknowledge(
        role,
        "AwsSolutions-IAM5",
        "Lambda writes one stream per execution environment, named at run time, into the function's own log "
        "group; the grant covers that one group's streams",
        finding=wildcard_resource_finding(f"{attribute_ref(group, 'Arn')}:*"),
    )
    return role


def grant_find_log_group(group: logs.ILogGroup, role: iam.IRole, finder: str) -> None:
    """DescribeLogGroups (a list call: authorized on log-group:* alone, CloudWatch Logs' "Actions,
    resources, and condition keys") and DescribeLogStreams on `group`, for a service or agent that
    looks its group up before it writes; `finder` says who and why, for the nag acknowledgment."""
    stack = Stack.of(group)
    every_group = stack.format_arn(service="logs", resource="log-group", resource_name="*",
                                   arn_format=ArnFormat.COLON_RESOURCE_NAME)
    role.add_to_principal_policy(iam.PolicyStatement(actions=["logs:DescribeLogGroups"], resources=[every_group]))
    role.add_to_principal_policy(iam.PolicyStatement(actions=["logs:DescribeLogStreams"], resources=[group.log_group_arn]))
    acknowledge(
        role,
        "AwsSolutions-IAM5",
        f"logs:DescribeLogGroups is a list call with no per-group resource; {finder}. It reads names only, no log data",
        finding=wildcard_resource_finding(f"arn:{PARTITION}:logs:{stack.region}:{stack.account}:log-group:*"),
    )


def grant_run_command_output(group: logs.LogGroup, role: iam.IRole) -> None:
    """What an instance's SSM agent needs to write a Run Command's output to `group` (SendCommand's
    CloudWatchOutputConfig), as the agent makes the calls (aws/amazon-ssm-agent): CreateLogGroup
    first; refused, it looks the group up with DescribeLogGroups and goes on when it exists, and
    without either it sends nothing (iohandler.go DefaultIOHandler.Init, cloudwatchlogsservice.go
    CreateLogGroup and IsLogGroupPresent); then CreateLogStream and PutLogEvents per stream
    (StreamData), DescribeLogStreams for a sequence token (GetSequenceTokenForStream). The lookup,
    not the creation: an instance that may create the group could make it again, without its
    retention, after the stack deleted it."""
    group.grant_write(role)
    grant_find_log_group(group, role, "the SSM agent calls it to find the Run Command output's log group before "
                         "writing to it")
