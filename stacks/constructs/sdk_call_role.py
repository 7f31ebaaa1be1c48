"""The role and log group a deploy-time AWS SDK call (custom_resources.AwsCustomResource) runs with.

Our own instead of the default role with the AWS-managed AWSLambdaBasicExecutionRole: the provider
function may write to its one log group and make the calls granted to this role, nothing more.
"""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct

from stacks.constructs.log_group import log_group


def sdk_call_role(scope: Construct, *, description: str) -> tuple[iam.Role, logs.LogGroup]:
    group = log_group(scope, "Logs", retention_days=30, removal_policy=RemovalPolicy.DESTROY)
    role = iam.Role(scope, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"), description=description)
    group.grant_write(role)
    return role, group
