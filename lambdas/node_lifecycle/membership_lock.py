"""The cluster-wide membership lock: one item in a DynamoDB table, taken by conditional put.

Service Fabric refuses a configuration upgrade (and AddNode) while another runs, so
scale-outs, scale-ins and the reaper change membership one at a time, each holding
this lock. An owner that dies leaves its lock to expire; the next owner takes it over.

Table: partition key `LockName` (string). Attributes: `Owner` (string), `ExpiresAt`
(number, epoch seconds; usable as the table's TTL attribute, which only tidies up:
expiry is enforced by the conditions below, not by TTL deletion, which lags).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from .interfaces import LockGrant, LockRelease

DEFAULT_LOCK_NAME = "cluster-membership"


def _condition_failed(err: ClientError) -> bool:
    return err.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"


class DynamoDbMembershipLock:
    def __init__(
        self,
        dynamodb_client: Any,
        table_name: str,
        *,
        lock_name: str = DEFAULT_LOCK_NAME,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = dynamodb_client
        self._table = table_name
        self._key = {"LockName": {"S": lock_name}}
        self._clock = clock

    def acquire(self, owner: str, *, ttl_seconds: float) -> LockGrant:
        """Take the lock if it is free, ours already (renewed), or expired (taken over)."""
        if not owner:
            raise ValueError("a lock owner must be named")
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive")
        now = self._clock()
        expires_at = float(math.ceil(now + ttl_seconds))  # whole seconds, as TTL wants
        try:
            self._client.put_item(
                TableName=self._table,
                Item={
                    **self._key,
                    "Owner": {"S": owner},
                    "ExpiresAt": {"N": _number(expires_at)},
                },
                ConditionExpression=(
                    "attribute_not_exists(LockName) OR #owner = :owner OR ExpiresAt < :now"
                ),
                ExpressionAttributeNames={"#owner": "Owner"},
                ExpressionAttributeValues={":owner": {"S": owner}, ":now": {"N": _number(now)}},
            )
        except ClientError as err:
            if not _condition_failed(err):
                raise
            holder, held_until = self._holder()
            return LockGrant(acquired=False, holder=holder, expires_at=held_until)
        return LockGrant(acquired=True, holder=owner, expires_at=expires_at)

    def release(self, owner: str) -> LockRelease:
        """Delete the lock if `owner` holds it; someone else's lock is left alone."""
        try:
            self._client.delete_item(
                TableName=self._table,
                Key=self._key,
                ConditionExpression="#owner = :owner",
                ExpressionAttributeNames={"#owner": "Owner"},
                ExpressionAttributeValues={":owner": {"S": owner}},
            )
        except ClientError as err:
            if not _condition_failed(err):
                raise
            holder, _ = self._holder()
            return LockRelease(released=False, holder=holder)
        return LockRelease(released=True, holder="")

    def _holder(self) -> tuple[str, float]:
        item = self._client.get_item(TableName=self._table, Key=self._key, ConsistentRead=True).get(
            "Item"
        )
        if not item:
            return "", 0.0
        return item["Owner"]["S"], float(item["ExpiresAt"]["N"])


def _number(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".")
