"""Typed results of the scale-in steps; `to_dict()` gives the JSON a state machine passes on."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any


class Outcome(StrEnum):
    REQUESTED = "requested"  # this call sent the write
    ALREADY_DONE = "already_done"  # an earlier (or concurrent) run did it
    NOT_NEEDED = "not_needed"  # the node is past the point where this step matters
    NOT_A_MEMBER = "not_a_member"  # the cluster does not know the node
    WAIT_FOR_UPGRADE = "wait_for_upgrade"  # another configuration upgrade runs: wait, then retry
    WAIT_FOR_INSTANCE = "wait_for_instance"  # the instance cannot take Run Commands yet: retry


class _Result:
    def to_dict(self) -> dict[str, Any]:
        document = asdict(self)  # type: ignore[call-overload]
        if "outcome" in document:
            document["changed"] = self.changed  # type: ignore[attr-defined]
        return document

    @property
    def changed(self) -> bool:
        return getattr(self, "outcome", None) == Outcome.REQUESTED


@dataclass(frozen=True)
class NodeResolution(_Result):
    instance_id: str
    node_name: str  # '' when no node could be found for the instance
    found_by: str  # "tag", "ip" or ''
    is_member: bool  # False: nothing to drain, complete the lifecycle action at once
    reason: str = ""


@dataclass(frozen=True)
class SeedCheck(_Result):
    node_name: str
    refused: bool
    reason: str = ""


@dataclass(frozen=True)
class Deactivation(_Result):
    node_name: str
    outcome: Outcome
    intent: str = ""  # the intent asked for (or found), RemoveNode or RemoveData


@dataclass(frozen=True)
class HostStop(_Result):
    node_name: str
    instance_id: str
    outcome: Outcome
    command_id: str = ""  # pass to poll_node_down to watch the command


@dataclass(frozen=True)
class NodeStateRemoval(_Result):
    node_name: str
    outcome: Outcome


@dataclass(frozen=True)
class ConfigurationChange(_Result):
    """A membership upgrade asked for: pass it (as a dict) to poll_configuration_upgrade."""

    node_name: str
    outcome: Outcome
    target_version: str = ""  # the version our upgrade moves to
    detail: str = ""
    kind: str = ""  # "removal" or "registration"
    confirmed: bool = False  # the start call answered: the orchestration has ended
    started_at: float = 0.0  # epoch seconds of the start, for the grace period
    manifest_before: int = 0  # the status's ProgressStatus (manifest version) before the start


@dataclass(frozen=True)
class NodeRemovalCheck(_Result):
    """After the removal upgrade: is the node out of the node list?"""

    node_name: str
    removed: bool
    status: str  # as `describe` words it; "Absent" once the gateway answers 204
    down: bool = False  # still listed and Down: RemoveNodeState can finish it


@dataclass(frozen=True)
class LifecycleCompletion(_Result):
    instance_id: str
    outcome: Outcome
    result: str = "CONTINUE"


@dataclass(frozen=True)
class WaitStatus(_Result):
    """One poll of a wait step: the state machine loops (with a Wait state) until `done`."""

    done: bool
    status: str  # NodeStatus, UpgradeState, ... as the cluster reports it
    detail: str = ""
    heartbeat: bool | None = None  # None: no hook given; False: no pending lifecycle action


@dataclass(frozen=True)
class NodePlan(_Result):
    """Who a launching instance becomes in the cluster: AddNode.ps1's arguments."""

    instance_id: str
    node_name: str
    node_type: str
    ip_address: str
    fault_domain: str
    upgrade_domain: str
    client_connection_endpoint: str  # an Up seed node's IP:port that AddNode.ps1 joins through

    def add_node_parameters(self) -> dict[str, str]:
        """The add-node Run Command document's parameters."""
        return {
            "nodeName": self.node_name,
            "nodeType": self.node_type,
            "ipAddress": self.ip_address,
            "faultDomain": self.fault_domain,
            "upgradeDomain": self.upgrade_domain,
            "clientConnectionEndpoint": self.client_connection_endpoint,
        }


@dataclass(frozen=True)
class NodeJoin(_Result):
    node_name: str
    instance_id: str
    outcome: Outcome
    command_id: str = ""  # pass to poll_node_up to watch AddNode.ps1
    detail: str = ""


@dataclass(frozen=True)
class JoinCleanup(_Result):
    instance_id: str
    node_name: str
    deactivated: bool  # the half-added node was told to move its replicas away
    detail: str = ""  # why the clean-up stopped short, if it did
