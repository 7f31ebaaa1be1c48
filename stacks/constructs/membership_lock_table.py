"""The cluster-wide membership lock's table (see lambdas/node_lifecycle/membership_lock.py).

One item at most lives here at a time; expiry is enforced by the lock's conditional writes,
and TTL only tidies up items of holders that died. Nothing in it is worth keeping.
"""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct


class MembershipLockTable(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, table_name: str) -> None:
        super().__init__(scope, construct_id)
        self.table = dynamodb.TableV2(
            self,
            "Table",
            table_name=table_name,
            partition_key=dynamodb.Attribute(name="LockName", type=dynamodb.AttributeType.STRING),
            billing=dynamodb.Billing.on_demand(),
            time_to_live_attribute="ExpiresAt",
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            removal_policy=RemovalPolicy.DESTROY,
        )
