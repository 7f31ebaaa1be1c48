"""What the SSM agent needs on an instance, without AmazonSSMManagedInstanceCore's parameter reads.

AmazonSSMManagedInstanceCore (AWS Managed Policy Reference, version v2, edited 2019-05-23, the
default version when read on 2026-11-26) allows ssm:GetParameter and ssm:GetParameters on "*":
attached to every instance role, it lets any host read any environment's parameters in the
account. The roles here carry its other actions as they are (the agent's messaging, associations,
inventory and patching calls: none of them names a parameter) and read parameters only where
their own environment's prefix says: nodes, for the applications they run, under /<prefix>/;
fleet hosts only the parameters their documents name, granted where each is used.

What the left-out reads cost (aws/amazon-ssm-agent): the agent calls ssm:GetParameters as the
instance only to resolve `{{ssm:name}}` references in a document's inputs
(agent/framework/docparser/parameterstore/parameterstore.go, Resolve) and SSM references in
aws:downloadContent (agent/ssm/ssmparameterresolver); none of the platform's documents has one.
Someone who sends a document with such a reference gets AccessDenied for a parameter outside the
role's own.

tests/stacks/test_instance_core.py compares these actions with the managed policy's document as
moto ships it, so a new version of the managed policy fails a test instead of silently leaving an
agent feature without its permission.
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam

from stacks.compliance import acknowledge, skip_check, wildcard_resource_finding

MANAGED_POLICY = "AmazonSSMManagedInstanceCore"
PARAMETER_READS_OF_THE_MANAGED_POLICY = ("ssm:GetParameter", "ssm:GetParameters")

# The managed policy's three statements, less the parameter reads. The actions take no resource-level
# permission or are the instance's own calls (Service Authorization Reference, Systems Manager,
# Amazon Message Delivery Service, Amazon Message Gateway Service), which is why AWS grants them on "*".
AGENT_ACTIONS = (
    (
        "ssm:DescribeAssociation",
        "ssm:GetDeployablePatchSnapshotForInstance",
        "ssm:GetDocument",
        "ssm:DescribeDocument",
        "ssm:GetManifest",
        "ssm:ListAssociations",
        "ssm:ListInstanceAssociations",
        "ssm:PutInventory",
        "ssm:PutComplianceItems",
        "ssm:PutConfigurePackageResult",
        "ssm:UpdateAssociationStatus",
        "ssm:UpdateInstanceAssociationStatus",
        "ssm:UpdateInstanceInformation",
    ),
    (
        "ssmmessages:CreateControlChannel",
        "ssmmessages:CreateDataChannel",
        "ssmmessages:OpenControlChannel",
        "ssmmessages:OpenDataChannel",
    ),
    (
        "ec2messages:AcknowledgeMessage",
        "ec2messages:DeleteMessage",
        "ec2messages:FailMessage",
        "ec2messages:GetEndpoint",
        "ec2messages:GetMessages",
        "ec2messages:SendReply",
    ),
)


def grant_instance_core(role: iam.Role, *, parameter_prefix: str | None = None) -> str:
    """The SSM agent's permissions on role, and, when parameter_prefix is given ("/telemetry-dev"),
    GetParameter(s) on the parameters under it (in the role's own region and account). Returns the
    reason for its statements on "*", which the caller acknowledges with its own (cdk-nag reports
    one finding per construct for every statement on "*")."""
    for actions in AGENT_ACTIONS:
        role.add_to_policy(iam.PolicyStatement(actions=list(actions), resources=["*"]))
    reason = (
        f"The SSM agent's actions of {MANAGED_POLICY} (messaging channels, associations, inventory, patch "
        "snapshots), which AWS grants on all resources because they take no resource-level permission or act on "
        "the calling instance itself; its GetParameter and GetParameters on all resources are left out"
    )
    skip_check(role.node.find_child("DefaultPolicy"), "CKV_AWS_111", reason)
    if parameter_prefix:
        stack = Stack.of(role)
        parameters = stack.format_arn(service="ssm", resource="parameter", resource_name=f"{parameter_prefix.strip('/')}/*")
        role.add_to_policy(iam.PolicyStatement(actions=list(PARAMETER_READS_OF_THE_MANAGED_POLICY), resources=[parameters]))
        acknowledge(
            role,
            "AwsSolutions-IAM5",
            f"Reads of the parameters of its own environment (under {parameter_prefix}/), the part of "
            f"{MANAGED_POLICY}'s parameter reads this role keeps; other environments' are not named",
            finding=wildcard_resource_finding(parameters),
        )
    return reason
