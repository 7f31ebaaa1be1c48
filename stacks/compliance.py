"""Acknowledging a cdk-nag finding on the one construct it concerns, with its reason.

Rules that report findings per item (IAM4 per managed policy, IAM5 per wildcard) are acknowledged
per item, so a new managed policy or wildcard on the same construct is still a finding.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Stack, Validations
from constructs import IConstruct

PARTITION = "<AWS::Partition>"


def acknowledge(construct: IConstruct, rule: str, reason: str, *, finding: str | None = None) -> None:
    if len(reason.split()) < 6:
        raise ValueError(f"acknowledging {rule} needs a reason a security reviewer can check")
    rule_id = f"{rule}[{finding}]" if finding else rule
    Validations.of(construct).acknowledge(Acknowledgment(id=rule_id, reason=reason))


def managed_policy_finding(policy_name: str) -> str:
    return f"Policy::arn:{PARTITION}:iam::aws:policy/{policy_name}"


def wildcard_resource_finding(resource: str) -> str:
    return f"Resource::{resource}"


def attribute_ref(construct: IConstruct, attribute: str) -> str:
    """How cdk-nag writes a reference to a resource attribute, e.g. `<BucketLogicalId.Arn>`."""
    return f"<{Stack.of(construct).get_logical_id(construct.node.default_child)}.{attribute}>"
