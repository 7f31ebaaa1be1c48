"""The trust of a role the CDK made for an AWS service, narrowed in place to that service acting
for this account (IAM User Guide, "The confused deputy problem": aws:SourceAccount and
aws:SourceArn in the policies that grant a service principal). In place: the CDK's role keeps its
logical id, where a role of our own would be a replacement of the role and of what names it."""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from constructs import IConstruct


def narrow_service_trust(role: IConstruct, source_arn: str, *, exact: bool = False) -> iam.CfnRole:
    """Sets the one statement's condition of `role` (an iam.Role the CDK made, trusting one
    service principal): this account, and `source_arn`, exactly (ArnEquals) or as a pattern
    (ArnLike). Returns the CloudFormation role, for a caller that must remove what the CDK wrote."""
    assert isinstance(role, iam.Role), f"{role.node.path} is not an iam.Role"
    cfn_role = role.node.default_child
    assert isinstance(cfn_role, iam.CfnRole)
    cfn_role.add_property_override("AssumeRolePolicyDocument.Statement.0.Condition", {
        "StringEquals": {"aws:SourceAccount": Stack.of(role).account},
        "ArnEquals" if exact else "ArnLike": {"aws:SourceArn": source_arn}})  # fmt: skip
    return cfn_role
