"""Lifecycle actions that wait with no execution working on them, and starting one for each.

Auto Scaling sends its lifecycle events "on a best-effort basis" (Amazon EC2 Auto Scaling User
Guide, "Amazon EC2 Auto Scaling event reference"), and EventBridge gives up on a StartExecution
after the target's retry policy (the queue then holds the event, usually after the action has
all but timed out). Either way an instance waits in `Pending:Wait` or `Terminating:Wait` (User
Guide, "Amazon EC2 Auto Scaling instance lifecycle") until its heartbeat timeout passes: a launch
is abandoned, and a terminating instance leaves with its node still in the cluster. The reaper
runs every few minutes, well inside the heartbeat timeout (validated in stacks/config.py), finds
such an action by its instance's lifecycle state, records a heartbeat for it (addressed by
instance id: the event's token is not known) and starts the state machine with the event
EventBridge would have passed. An action some execution already worked on is left alone, even
one that ended (a failed drain's hold is over: the action is meant to time out). A duplicate of
an execution EventBridge starts late is harmless: every step is idempotent.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any, Protocol

from .interfaces import WaitingInstance

DETAIL_TYPES = {"launch": "EC2 Instance-launch Lifecycle Action", "terminate": "EC2 Instance-terminate Lifecycle Action"}
TRANSITIONS = {"launch": "autoscaling:EC2_INSTANCE_LAUNCHING", "terminate": "autoscaling:EC2_INSTANCE_TERMINATING"}
EVENT_SOURCE = "telemetry.node-lifecycle.reaper"


class Executions(Protocol):
    def instances_served(self, state_machine_arn: str, *, since: datetime) -> set[str]:
        """The instances named by the executions of the state machine started since then."""
        ...

    def start(self, state_machine_arn: str, name: str, event: Mapping[str, Any]) -> str:
        """Start an execution with the event as input; its ARN."""
        ...


@dataclass(frozen=True)
class Restart:
    instance_id: str
    transition: str
    execution_arn: str
    heartbeat: bool | None  # False: the action was no longer pending by then

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def lifecycle_event(
    *, group_name: str, hook_name: str, instance_id: str, transition: str, account: str, region: str, now: datetime
) -> dict[str, Any]:
    """The event EventBridge would have passed (EventBridge User Guide / Auto Scaling User Guide,
    event examples), without the action's token, which only the lost event carried."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": DETAIL_TYPES[transition],
        "source": EVENT_SOURCE,
        "account": account,
        "time": now.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [],
        "detail": {
            "AutoScalingGroupName": group_name,
            "LifecycleHookName": hook_name,
            "EC2InstanceId": instance_id,
            "LifecycleTransition": TRANSITIONS[transition],
        },
    }


def orphans(waiting: Iterable[WaitingInstance], served: Mapping[str, set[str]]) -> list[WaitingInstance]:
    """The waiting instances no execution of their transition's state machine names."""
    return [w for w in waiting if w.instance_id not in served.get(w.transition, set())]


def execution_name(instance_id: str, now: datetime) -> str:
    # Names are unique per state machine for 90 days and at most 80 characters (Step Functions
    # API Reference, StartExecution, name).
    return f"reaper-{instance_id}-{now.strftime('%Y%m%dT%H%M%S')}"


def instance_of(execution_input: str) -> str:
    """The instance an execution's input (a lifecycle event) names, or ''."""
    try:
        return str(json.loads(execution_input)["detail"]["EC2InstanceId"])
    except (ValueError, KeyError, TypeError):
        return ""
