"""Acknowledging a cdk-nag or checkov finding on the one construct it concerns, with its reason.

Rules that report findings per item (IAM4 per managed policy, IAM5 per wildcard) are acknowledged
per item, so a new managed policy or wildcard on the same construct is still a finding.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, CfnResource, Stack, Token, Validations
from constructs import IConstruct

# How cdk-nag writes the partition when it is a reference. With @aws-cdk/core:enablePartitionLiterals
# the ARNs a stack formats (Stack.format_arn) carry its region's literal partition instead, and
# resource findings name it literally; AWS managed policy ARNs keep the reference (ManagedPolicy
# builds them with the AWS::Partition pseudo parameter).
PARTITION = "<AWS::Partition>"


def acknowledge(construct: IConstruct, rule: str, reason: str, *, finding: str | None = None) -> None:
    if len(reason.split()) < 6:
        raise ValueError(f"acknowledging {rule} needs a reason a security reviewer can check")
    partition = Stack.of(construct).partition
    if finding and finding.startswith("Resource::") and not Token.is_unresolved(partition):
        finding = finding.replace(PARTITION, partition)
    rule_id = f"{rule}[{finding}]" if finding else rule
    Validations.of(construct).acknowledge(Acknowledgment(id=rule_id, reason=reason))


def skip_check(construct: IConstruct, check_id: str, reason: str) -> None:
    """A checkov finding acknowledged on the one resource it concerns: checkov's skip in that
    resource's template metadata (`Metadata.checkov.skip`, [{id, comment}], checkov's
    "Suppressing/Skipping" for CloudFormation), never for a check id as a whole. `construct` is the
    resource or an L2 construct whose default child it is."""
    if len(reason.split()) < 6:
        raise ValueError(f"skipping {check_id} needs a reason a security reviewer can check")
    resource = construct if isinstance(construct, CfnResource) else construct.node.default_child
    if not isinstance(resource, CfnResource):
        raise TypeError(f"{construct.node.path} is not a CloudFormation resource")
    metadata = resource.get_metadata("checkov") or {"skip": []}
    if check_id not in {skip["id"] for skip in metadata["skip"]}:
        metadata["skip"].append({"id": check_id, "comment": reason})
    resource.add_metadata("checkov", metadata)


def managed_policy_finding(policy_name: str) -> str:
    return f"Policy::arn:{PARTITION}:iam::aws:policy/{policy_name}"


def wildcard_resource_finding(resource: str) -> str:
    return f"Resource::{resource}"


def attribute_ref(construct: IConstruct, attribute: str) -> str:
    """How cdk-nag writes a reference to a resource attribute, e.g. `<BucketLogicalId.Arn>`."""
    return f"<{Stack.of(construct).get_logical_id(construct.node.default_child)}.{attribute}>"
