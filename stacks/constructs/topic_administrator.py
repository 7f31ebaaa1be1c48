"""The topic administrator: the role operators assume to run scripts/manage_topics.py.

It holds only what the stack grants it (the MSK cluster's topic administration actions); no
instance, function or service can assume it. Its trust is this account, with MFA: any principal of
the account whose own policy allows sts:AssumeRole on it, and only in a session that signed in with
MFA. Lowering a topic's retention deletes data and adding partitions moves keys to other
partitions, so a leaked access key alone must not be enough.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_iam as iam
from constructs import Construct

# "Bool" rather than "BoolIfExists": a request signed with long-term access keys has no
# aws:MultiFactorAuthPresent key at all, and must be refused, not let through.
MFA_REQUIRED = {"Bool": {"aws:MultiFactorAuthPresent": "true"}}


class TopicAdministrator(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, role_name: str, cluster_name: str) -> None:
        super().__init__(scope, construct_id)
        self.role = iam.Role(
            self,
            "Role",
            role_name=role_name,
            description=f"Operators (with MFA) creating and altering the declared topics of MSK cluster {cluster_name}",
            assumed_by=iam.AccountRootPrincipal().with_conditions(MFA_REQUIRED),
            # A topic run takes seconds to minutes; role chaining caps sessions at one hour anyway.
            max_session_duration=Duration.hours(1),
        )
