"""The cluster-wide membership lock: one item in a DynamoDB table, taken by conditional put.

Service Fabric refuses a configuration upgrade (and AddNode) while another runs, so
scale-outs, scale-ins and the reaper change membership one at a time, each holding
this lock. An owner that dies leaves its lock to expire; the next owner takes it over.

Table: partition key `LockName` (string). Attributes: `Owner` (string), `ExpiresAt`
(number, epoch seconds; usable as the table's TTL attribute, which only tidies up:
expiry is enforced by the conditions below, not by TTL deletion, which lags), and what the
holder says of itself for whoever is refused or looks: `Intent` (string: drain, join, patch,
...), `Node` (string, the node it works on, '' for none) and `Since` (number, epoch seconds when
this owner took the lock; its renewals keep it, a take-over starts a new one).
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

    def acquire(self, owner: str, *, ttl_seconds: float, intent: str = "", node: str = "") -> LockGrant:
        """Take the lock if it is free, ours already (renewed), or expired (taken over).

        Two conditional writes, each atomic, so no read decides a write: a renewal first (the item
        is ours: Since kept), else a take (no item, or an expired one: Since is now)."""
        if not owner:
            raise ValueError("a lock owner must be named")
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive")
        now = self._clock()
        expires_at = float(math.ceil(now + ttl_seconds))  # whole seconds, as TTL wants
        stated = {":owner": {"S": owner}, ":expires": {"N": _number(expires_at)}, ":intent": {"S": intent},
                  ":node": {"S": node}, ":now": {"N": _number(now)}}  # fmt: skip
        try:
            renewed = self._client.update_item(
                TableName=self._table,
                Key=self._key,
                UpdateExpression="SET ExpiresAt = :expires, Intent = :intent, #node = :node, "
                "Since = if_not_exists(Since, :now)",
                ConditionExpression="#owner = :owner",
                ExpressionAttributeNames={"#owner": "Owner", "#node": "Node"},
                ExpressionAttributeValues=stated,
                ReturnValues="ALL_NEW",
            )
            return _grant(renewed["Attributes"], acquired=True, renewed=True)
        except ClientError as err:
            if not _condition_failed(err):
                raise
        item = {**self._key, "Owner": {"S": owner}, "ExpiresAt": stated[":expires"], "Intent": stated[":intent"],
                "Node": stated[":node"], "Since": stated[":now"]}  # fmt: skip
        try:
            self._client.put_item(
                TableName=self._table,
                Item=item,
                ConditionExpression="attribute_not_exists(LockName) OR ExpiresAt < :now",
                ExpressionAttributeValues={":now": stated[":now"]},
            )
        except ClientError as err:
            if not _condition_failed(err):
                raise
            held = self._item()
            return _grant(held, acquired=False) if held else LockGrant(acquired=False, holder="", expires_at=0.0)
        return _grant(item, acquired=True)

    def current(self) -> LockGrant | None:
        """Who holds the lock now, for what, on which node and since when (`acquired` False: this
        is a look, not a take); None when nobody does (no item, or an expired one)."""
        item = self._item()
        if not item or float(item["ExpiresAt"]["N"]) < self._clock():
            return None
        return _grant(item, acquired=False)

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
        item = self._item()
        if not item:
            return "", 0.0
        return item["Owner"]["S"], float(item["ExpiresAt"]["N"])

    def _item(self) -> dict[str, Any] | None:
        return self._client.get_item(TableName=self._table, Key=self._key, ConsistentRead=True).get("Item")


def _grant(item: dict[str, Any], *, acquired: bool, renewed: bool = False) -> LockGrant:
    """The LockGrant an item says (an item an older release wrote has no Intent, Node or Since)."""
    return LockGrant(
        acquired=acquired,
        holder=item["Owner"]["S"],
        expires_at=float(item["ExpiresAt"]["N"]),
        intent=item.get("Intent", {}).get("S", ""),
        node=item.get("Node", {}).get("S", ""),
        since=float(item.get("Since", {}).get("N", "0")),
        renewed=renewed,
    )


def _number(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".")
