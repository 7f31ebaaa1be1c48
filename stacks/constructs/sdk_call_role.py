"""The role and log group a deploy-time AWS SDK call (custom_resources.AwsCustomResource) runs with.

Our own instead of the default role with the AWS-managed AWSLambdaBasicExecutionRole: the provider
function may write to its one log group and make the calls granted to this role, nothing more.
"""

from __future__ import annotations

from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct

from stacks.compliance import skip_check
from stacks.constructs.log_group import grant_write, log_group

# The construct id of the stack's one function behind every AwsCustomResource (the CDK's
# SingletonFunction: "AWS" and the provider's uuid without its dashes, custom-resources/aws-custom-resource).
SDK_CALL_FUNCTION_ID = "AWS679f53fac002430cb0da5b7982bd2287"


def sdk_call_role(scope: Construct, *, description: str) -> tuple[iam.Role, logs.LogGroup]:
    group = log_group(scope, "Logs", retention_days=30, removal_policy=RemovalPolicy.DESTROY)
    role = iam.Role(scope, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"), description=description)
    grant_write(group, role)
    return role, group


def skip_deploy_time_function_checks(function: Construct, calls: str) -> None:
    """checkov's Lambda checks that do not apply to a function CloudFormation runs for a custom
    resource during a deployment, each skipped on that function with its reason; `calls` names the
    AWS APIs it calls."""
    skip_check(function, "CKV_AWS_116", "CloudFormation invokes it for a custom resource and waits for its answer; "
               "a run that fails answers FAILED or times out, which fails and rolls back the deployment itself")
    skip_check(function, "CKV_AWS_115", "It runs only during deployments, once per custom resource event; a "
               "reservation would take concurrency from the account for nothing")
    skip_check(function, "CKV_AWS_117", f"It calls AWS APIs only ({calls}) and reaches nothing inside the VPC; "
               "outside it, it needs no network path of its own")


def skip_sdk_call_checks(scope: Construct, calls: str) -> None:
    """The checks above on the stack's AwsCustomResource function, once one exists."""
    function = Stack.of(scope).node.try_find_child(SDK_CALL_FUNCTION_ID)
    assert function is not None, "call after creating the AwsCustomResource"
    skip_deploy_time_function_checks(function, calls)
