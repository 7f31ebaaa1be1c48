"""Where a patch run records how far it got, so that a rerun resumes where it stopped.

One item in the membership lock table (key `LockName` = "patch-progress"), beside the lock item:
the functions already read and write that table and nothing else scans it, so progress costs no
new resource, grant or stateful ID, and a conditional write makes the record a lease too (two
patch runs, the schedule's and an operator's, never work at once). An SSM parameter was the other
candidate: it would need a new grant, holds 4 KB in the standard tier and has no conditional
write. The item carries no `ExpiresAt`, so the table's TTL never removes it.

Attributes: Owner (the run working now, absent between runs) and LeaseUntil (epoch seconds: a run
that died without its failure path, e.g. stopped by hand, frees the lease after it); Done (nodes
patched or found up to date in this round); Current and Stage (the node being worked on and how
far); Stopped (why the last run stopped, for the next one and `telemetry cluster patch`).
A round ends when a run has been through every node: the item is deleted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from botocore.exceptions import ClientError

from .errors import LifecycleError

PROGRESS_KEY = {"LockName": {"S": "patch-progress"}}


class PatchRunInProgress(LifecycleError):
    """Another patch run holds the progress lease."""


@dataclass(frozen=True)
class PatchProgress:
    owner: str = ""
    lease_until: float = 0.0
    done: tuple[str, ...] = ()
    current: str = ""
    stage: str = ""
    stopped: str = ""
    round_started: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "done": list(self.done)}


def _number(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".")


def _progress(item: dict[str, Any] | None) -> PatchProgress:
    if not item:
        return PatchProgress()
    return PatchProgress(
        owner=item.get("Owner", {}).get("S", ""),
        lease_until=float(item.get("LeaseUntil", {}).get("N", "0")),
        done=tuple(value["S"] for value in item.get("Done", {}).get("L", [])),
        current=item.get("Current", {}).get("S", ""),
        stage=item.get("Stage", {}).get("S", ""),
        stopped=item.get("Stopped", {}).get("S", ""),
        round_started=float(item.get("RoundStarted", {}).get("N", "0")),
    )


@dataclass
class DynamoDbPatchProgress:
    client: Any
    table: str
    clock: Callable[[], float]

    def read(self) -> PatchProgress:
        return _progress(self.client.get_item(TableName=self.table, Key=PROGRESS_KEY, ConsistentRead=True).get("Item"))

    def claim(self, owner: str, *, lease_seconds: float) -> PatchProgress:
        """Take the lease (a new round when there is no record); PatchRunInProgress when another
        run holds it. Returns the record, with what earlier runs of the round did."""
        now = self.clock()
        try:
            answer = self.client.update_item(
                TableName=self.table,
                Key=PROGRESS_KEY,
                UpdateExpression="SET #owner = :owner, LeaseUntil = :until, RoundStarted = if_not_exists(RoundStarted, :now), "
                "Done = if_not_exists(Done, :empty)",
                ConditionExpression="attribute_not_exists(#owner) OR #owner = :owner OR LeaseUntil < :now",
                ExpressionAttributeNames={"#owner": "Owner"},
                ExpressionAttributeValues={":owner": {"S": owner}, ":until": {"N": _number(now + lease_seconds)},
                                           ":now": {"N": _number(now)}, ":empty": {"L": []}},
                ReturnValues="ALL_NEW",
            )  # fmt: skip
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            holder = self.read()
            raise PatchRunInProgress(
                f"another patch run ({holder.owner}) holds the patch progress until {holder.lease_until:.0f} "
                "(epoch s); let it finish, or stop that execution and wait for its lease to pass"
            ) from None
        return _progress(answer["Attributes"])

    def record(self, owner: str, *, current: str, stage: str, lease_seconds: float, done: str = "") -> None:
        """The node and stage now (the lease renewed); `done` appends a finished node."""
        now = self.clock()
        # Current is a DynamoDB reserved word: every attribute goes by a placeholder here.
        expression = "SET #current = :current, #stage = :stage, LeaseUntil = :until"
        values: dict[str, Any] = {":owner": {"S": owner}, ":current": {"S": current}, ":stage": {"S": stage},
                                  ":until": {"N": _number(now + lease_seconds)}}  # fmt: skip
        if done:
            expression += ", #done = list_append(if_not_exists(#done, :empty), :done)"
            values.update({":done": {"L": [{"S": done}]}, ":empty": {"L": []}})
        self.client.update_item(
            TableName=self.table, Key=PROGRESS_KEY, UpdateExpression=expression,
            ConditionExpression="#owner = :owner",
            ExpressionAttributeNames={"#owner": "Owner", "#current": "Current", "#stage": "Stage",
                                      **({"#done": "Done"} if done else {})},
            ExpressionAttributeValues=values,
        )  # fmt: skip

    def release(self, owner: str, *, stopped: str) -> bool:
        """Give the lease up, saying why the run stopped; False when it was not ours any more."""
        try:
            self.client.update_item(
                TableName=self.table, Key=PROGRESS_KEY, UpdateExpression="SET Stopped = :stopped REMOVE #owner, LeaseUntil",
                ConditionExpression="#owner = :owner", ExpressionAttributeNames={"#owner": "Owner"},
                ExpressionAttributeValues={":owner": {"S": owner}, ":stopped": {"S": stopped[:1000]}},
            )  # fmt: skip
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def finish(self, owner: str) -> None:
        """The round is complete: the next run starts a new one."""
        self.client.delete_item(
            TableName=self.table, Key=PROGRESS_KEY, ConditionExpression="#owner = :owner",
            ExpressionAttributeNames={"#owner": "Owner"}, ExpressionAttributeValues={":owner": {"S": owner}},
        )  # fmt: skip
