"""The topic administrator: the role operators assume to run telemetry/commands/topics.py.

It holds only what the stack grants it (the MSK cluster's topic administration actions); no
instance, function or service can assume it. Its trust is this account's principals named in
config (`msk.topic_administrators`, compared with aws:PrincipalArn by ArnLike, so another
environment's operators sharing the account are not among them), whose own policy allows
sts:AssumeRole on it, and only with MFA. Lowering a topic's retention deletes data and adding
partitions moves keys to other partitions, so a leaked access key alone must not be enough.

The principal is the account with a condition on aws:PrincipalArn rather than the principals
themselves: a trust policy naming a user or role that does not exist yet cannot be saved ("IAM JSON
policy elements: Principal": "Invalid principal in policy"), and a pattern can name every user
under a path (IAM User Guide, "AWS global condition context keys", aws:PrincipalArn).
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration
from aws_cdk import aws_iam as iam
from constructs import Construct

# "Bool" rather than "BoolIfExists": a request signed with long-term access keys has no
# aws:MultiFactorAuthPresent key at all, and must be refused, not let through.
MFA_REQUIRED = {"Bool": {"aws:MultiFactorAuthPresent": "true"}}


class TopicAdministrator(Construct):
    def __init__(
        self, scope: Construct, construct_id: str, *, role_name: str, cluster_name: str, administrators: Sequence[str]
    ) -> None:
        super().__init__(scope, construct_id)
        self.role = iam.Role(
            self,
            "Role",
            role_name=role_name,
            description=f"Operators (with MFA) creating and altering the declared topics of MSK cluster {cluster_name}",
            assumed_by=iam.AccountRootPrincipal().with_conditions(
                {**MFA_REQUIRED, "ArnLike": {"aws:PrincipalArn": list(administrators)}}
            ),
            # A topic run takes seconds to minutes; role chaining caps sessions at one hour anyway.
            max_session_duration=Duration.hours(1),
        )
