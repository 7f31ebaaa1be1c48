"""CloudWatch Logs groups whose retention comes from config as a number of days."""

from __future__ import annotations

from aws_cdk import ArnFormat, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

from stacks.compliance import PARTITION, acknowledge, attribute_ref, skip_check, wildcard_resource_finding
from stacks.constructs.keys import rotating_key


LOGS_KEY_ID = "LogsKey"
# What CloudWatch Logs does with a log group's key (Amazon CloudWatch Logs User Guide, "Encrypt log
# data in CloudWatch Logs using AWS Key Management Service": the key policy statement for
# logs.<region>.amazonaws.com, scoped by the kms:EncryptionContext:aws:logs:arn of the groups).
LOGS_KEY_ACTIONS = ("kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*")
_KEEPS = (RemovalPolicy.RETAIN, RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE, RemovalPolicy.SNAPSHOT)


def logs_key(scope: Construct, removal_policy: RemovalPolicy) -> kms.Key:
    """The stack's one key for its log groups (a customer managed key: who may use it is this key
    policy, and its use is in CloudTrail). CloudWatch Logs encrypts and decrypts with it for the
    groups of this account and region only; a writer may use it through CloudWatch Logs alone
    (grant_key_through_logs).
    Kept as long as the longest-kept group it encrypts: a retained group outlives its stack."""
    stack = Stack.of(scope)
    key = stack.node.try_find_child(LOGS_KEY_ID)
    if key is None:
        key = rotating_key(stack, LOGS_KEY_ID, description=f"CloudWatch Logs log groups of {stack.stack_name}",
                           removal_policy=removal_policy)  # fmt: skip
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
    customer_managed_key: bool = True,
) -> logs.LogGroup:
    """A log group encrypted with its stack's logs key (logs_key), or, with customer_managed_key
    False, with CloudWatch Logs' own: for a group an AWS service delivers to through CloudWatch
    Logs' log delivery (Step Functions execution logs, MSK broker logs), which no page says works
    with a customer managed key (Cognito's log delivery says it does not)."""
    group = logs.LogGroup(
        scope, construct_id, log_group_name=log_group_name, removal_policy=removal_policy,
        encryption_key=logs_key(scope, removal_policy) if customer_managed_key else None,
    )
    if not customer_managed_key:
        skip_check(group, "CKV_AWS_158", "An AWS service writes this group through CloudWatch Logs' log delivery, "
                   "whose support for a customer managed key no page states; CloudWatch Logs encrypts it at rest "
                   "with its own key")
    # Config validates the value against the retentions CloudWatch accepts; the enum form of
    # RetentionDays has no lookup by number, so set the property directly.
    resource = group.node.default_child
    assert isinstance(resource, logs.CfnLogGroup)
    resource.retention_in_days = retention_days
    return group


def grant_write(group: logs.LogGroup, grantee: iam.IGrantable) -> None:
    """CreateLogStream and PutLogEvents on `group`, and, when the group has a customer managed key,
    that key's use through CloudWatch Logs alone: CloudWatch Logs makes its KMS calls on behalf of
    the caller ("You should add this to your roles which call CloudWatch Logs in either your Key
    Policy or in IAM", CloudWatch Logs User Guide, "Encrypt log data in CloudWatch Logs using AWS Key
    Management Service"; kms:ViaService logs.<region>.amazonaws.com)."""
    group.grant_write(grantee)
    grant_key_through_logs(group, grantee)


def grant_key_through_logs(group: logs.LogGroup, grantee: iam.IGrantable) -> None:
    """The group's key (if it has one of ours) for calls CloudWatch Logs makes on the grantee's behalf."""
    key = group.node.default_child.kms_key_id if isinstance(group.node.default_child, logs.CfnLogGroup) else None
    if key is None:
        return
    stack = Stack.of(group)
    grantee.grant_principal.add_to_principal_policy(iam.PolicyStatement(
        actions=["kms:Encrypt", "kms:Decrypt", "kms:GenerateDataKey"],
        resources=[key],
        conditions={"StringEquals": {"kms:ViaService": f"logs.{stack.region}.amazonaws.com"}},
    ))  # fmt: skip


def function_role(scope: Construct, construct_id: str, *, group: logs.LogGroup, description: str) -> iam.Role:
    """A Lambda function's execution role that writes its own log group and no other.

    Lambda's default, the AWS managed AWSLambdaBasicExecutionRole, allows logs:CreateLogGroup,
    CreateLogStream and PutLogEvents on every log group of the account (AWS Managed Policy
    Reference): a function of one environment could write into another's logs. The function
    writes to the group it is given (its LoggingConfig), which exists before it runs, so the role
    needs only CreateLogStream and PutLogEvents on that group's streams ("Sending Lambda function
    logs to CloudWatch Logs": the permissions Lambda's logging needs)."""
    role = iam.Role(scope, construct_id, assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"), description=description)
    grant_write(group, role)
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
    grant_write(group, role)
    grant_find_log_group(group, role, "the SSM agent calls it to find the Run Command output's log group before "
                         "writing to it")
