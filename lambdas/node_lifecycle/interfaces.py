"""What the scale-in logic needs from AWS, as small interfaces.

The step functions take these, never boto3 clients, so a Lambda creates the AWS
adapters once (see lifecycle_hooks.py, instances.py, fabric_host.py,
membership_lock.py) and tests pass moto-backed adapters or stand-ins.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

NODE_NAME_TAG = "sf:nodename"


@dataclass(frozen=True)
class LifecycleHook:
    """One pending lifecycle action of the scaling group (from the EventBridge event)."""

    group_name: str
    hook_name: str
    instance_id: str
    token: str = ""  # without a token the action is addressed by instance id

    @classmethod
    def from_event_detail(cls, detail: Mapping[str, Any]) -> LifecycleHook:
        """From the `detail` of an "EC2 Instance-terminate Lifecycle Action" event."""
        return cls(
            group_name=str(detail["AutoScalingGroupName"]),
            hook_name=str(detail["LifecycleHookName"]),
            instance_id=str(detail["EC2InstanceId"]),
            token=str(detail.get("LifecycleActionToken") or ""),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class InstanceInfo:
    instance_id: str
    state: str  # EC2 state name: pending, running, shutting-down, terminated, ...
    private_ip: str = ""
    tags: Mapping[str, str] = field(default_factory=dict)
    availability_zone: str = ""

    @property
    def node_name(self) -> str:
        """The Service Fabric node name that scale-out tagged the instance with ('' if none)."""
        return self.tags.get(NODE_NAME_TAG, "")


# LifecycleState of an instance held by a lifecycle hook, and the transition it waits in
# (Amazon EC2 Auto Scaling User Guide, "Amazon EC2 Auto Scaling instance lifecycle").
WAITING_STATES = {"Pending:Wait": "launch", "Terminating:Wait": "terminate"}
# An instance whose terminate action was ABANDONed, kept by the group's retention policy
# (LifecycleState Terminating:Retained, "Manage retained instances", Auto Scaling User Guide).
RETAINED_STATE = "Terminating:Retained"
# An instance serving in the group (LifecycleState, Auto Scaling API Reference, Instance).
IN_SERVICE = "InService"


@dataclass(frozen=True)
class WaitingInstance:
    instance_id: str
    transition: str  # launch | terminate


# get_command_invocation statuses that end a command.
COMMAND_SUCCEEDED = "Success"
COMMAND_FAILED = frozenset({"Failed", "Cancelled", "TimedOut", "Cancelling"})


@dataclass(frozen=True)
class CommandStatus:
    command_id: str
    status: str  # Pending, InProgress, Delayed, Success, Failed, Cancelled, TimedOut, ...
    detail: str = ""

    @property
    def succeeded(self) -> bool:
        return self.status == COMMAND_SUCCEEDED

    @property
    def failed(self) -> bool:
        return self.status in COMMAND_FAILED


@dataclass(frozen=True)
class LockGrant:
    """The answer to an acquire: whether we hold the lock, and who does, for what and since when."""

    acquired: bool
    holder: str  # '' when nobody holds it
    expires_at: float  # epoch seconds; 0 when nobody holds it
    intent: str = ""  # what the holder does while it holds it: drain, join, patch, reap, ...
    node: str = ""  # the node it takes out of service or changes membership for ('' for none)
    since: float = 0.0  # epoch seconds when the holder took it (renewals keep it); 0 when unknown
    # Acquired as a renewal of our own item, not taken afresh: a caller that already held the lock
    # and gets it taken afresh had lost it meanwhile (another operation may have held it since).
    renewed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LockRelease:
    released: bool  # True when this owner's lock was deleted
    holder: str  # who holds it now ('' = nobody), e.g. when another owner does

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class AutoScalingLifecycle(Protocol):
    def complete_lifecycle_action(self, hook: LifecycleHook, result: str) -> bool:
        """Complete the action; False when no such action is pending (already completed)."""
        ...

    def record_lifecycle_action_heartbeat(self, hook: LifecycleHook) -> bool:
        """Restart the hook's heartbeat timer; False when no such action is pending."""
        ...

    def waiting_instances(self, group_name: str) -> list[WaitingInstance]:
        """The group's instances a lifecycle hook holds now."""
        ...

    def instance_state(self, group_name: str, instance_id: str) -> str:
        """The instance's LifecycleState in the group; '' when the group does not list it."""
        ...


class InstanceDirectory(Protocol):
    def describe_instance(self, instance_id: str) -> InstanceInfo | None:
        """The instance, or None when EC2 no longer knows it."""
        ...

    def list_node_instances(self) -> list[InstanceInfo]:
        """Instances tagged with a node name, in any state (terminated ones while EC2 lists them)."""
        ...

    def tag_node_name(self, instance_id: str, node_name: str) -> None:
        """Tag the instance with the node name it joined the cluster as (idempotent)."""
        ...


class FabricHost(Protocol):
    def send_stop_command(self, instance_id: str) -> str:
        """Ask the instance to stop its Fabric host service; returns the command id."""
        ...

    def send_add_node_command(self, instance_id: str, parameters: Mapping[str, str]) -> str | None:
        """Run AddNode.ps1 on the instance; the command id, or None while the instance
        cannot take Run Commands yet (its SSM agent has not registered)."""
        ...

    def command_status(self, command_id: str, instance_id: str) -> CommandStatus: ...


class MembershipLock(Protocol):
    def acquire(self, owner: str, *, ttl_seconds: float, intent: str = "", node: str = "") -> LockGrant:
        """Take the lock, or renew it when `owner` holds it already; expired locks are taken over.
        `intent` and `node` say what the owner does with it, for whoever is refused."""
        ...

    def release(self, owner: str) -> LockRelease:
        """Give the lock up; only its owner can."""
        ...
