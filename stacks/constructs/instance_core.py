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

from collections.abc import Sequence

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


def grant_instance_core(role: iam.Role, *, readable_parameters: Sequence[str] = ()) -> str:
    """The SSM agent's permissions on role, and GetParameter(s) on readable_parameters alone
    (names such as "/telemetry-dev/msk/bootstrap-brokers-iam", or "/telemetry-dev/applications/*"
    for a subtree; in the role's own region and account), so a parameter added later elsewhere is
    not readable by every instance. Returns the reason for its statements on "*", which the caller
    acknowledges with its own (cdk-nag reports one finding per construct for every statement on "*")."""
    for actions in AGENT_ACTIONS:
        role.add_to_policy(iam.PolicyStatement(actions=list(actions), resources=["*"]))
    reason = (
        f"The SSM agent's actions of {MANAGED_POLICY} (messaging channels, associations, inventory, patch "
        "snapshots), which AWS grants on all resources because they take no resource-level permission or act on "
        "the calling instance itself; its GetParameter and GetParameters on all resources are left out"
    )
    skip_check(role.node.find_child("DefaultPolicy"), "CKV_AWS_111", reason)
    if readable_parameters:
        stack = Stack.of(role)
        arns = [stack.format_arn(service="ssm", resource="parameter", resource_name=name.lstrip("/"))
                for name in readable_parameters]  # fmt: skip
        role.add_to_policy(iam.PolicyStatement(actions=list(PARAMETER_READS_OF_THE_MANAGED_POLICY), resources=arns))
        for name, arn in zip(readable_parameters, arns, strict=True):
            if name.endswith("/*"):
                acknowledge(
                    role,
                    "AwsSolutions-IAM5",
                    f"Reads of the parameters under {name[:-2]}/, the part of {MANAGED_POLICY}'s parameter reads "
                    "this role keeps: the place its applications' settings are kept; nothing else is named",
                    finding=wildcard_resource_finding(arn),
                )
    return reason
