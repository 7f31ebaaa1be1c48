"""Typed results of the Service Fabric REST API (only the fields the platform uses)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any


class NodeStatus(StrEnum):
    INVALID = "Invalid"
    UP = "Up"
    DOWN = "Down"
    ENABLING = "Enabling"
    DISABLING = "Disabling"
    DISABLED = "Disabled"
    UNKNOWN = "Unknown"
    REMOVED = "Removed"


class DeactivationIntent(StrEnum):
    PAUSE = "Pause"
    RESTART = "Restart"
    REMOVE_DATA = "RemoveData"
    # Reported in NodeDeactivationInfo; not in the documented REST request enum, so
    # runtimes may refuse it with E_INVALIDARG (callers fall back to REMOVE_DATA).
    REMOVE_NODE = "RemoveNode"


class DeactivationStatus(StrEnum):
    NONE = "None"
    SAFETY_CHECK_IN_PROGRESS = "SafetyCheckInProgress"
    SAFETY_CHECK_COMPLETE = "SafetyCheckComplete"
    COMPLETED = "Completed"


class UpgradeState(StrEnum):
    INVALID = "Invalid"
    ROLLING_BACK_IN_PROGRESS = "RollingBackInProgress"
    ROLLING_BACK_COMPLETED = "RollingBackCompleted"
    ROLLING_FORWARD_PENDING = "RollingForwardPending"
    ROLLING_FORWARD_IN_PROGRESS = "RollingForwardInProgress"
    ROLLING_FORWARD_COMPLETED = "RollingForwardCompleted"
    FAILED = "Failed"


_UPGRADE_RUNNING = {
    UpgradeState.ROLLING_BACK_IN_PROGRESS,
    UpgradeState.ROLLING_FORWARD_PENDING,
    UpgradeState.ROLLING_FORWARD_IN_PROGRESS,
}
_UPGRADE_FAILED = {UpgradeState.ROLLING_BACK_COMPLETED, UpgradeState.FAILED}


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


@dataclass(frozen=True)
class NodeInfo:
    name: str
    ip_address_or_fqdn: str
    node_type: str
    status: str
    is_seed_node: bool
    deactivation_status: str
    deactivation_intent: str
    fault_domain: str
    upgrade_domain: str
    health_state: str = ""
    node_down_time_in_seconds: int = 0
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_json(cls, item: Mapping[str, Any]) -> NodeInfo:
        deactivation = item.get("NodeDeactivationInfo") or {}
        return cls(
            name=str(item.get("Name", "")),
            ip_address_or_fqdn=str(item.get("IpAddressOrFQDN", "")),
            node_type=str(item.get("Type", "")),
            status=str(item.get("NodeStatus", NodeStatus.INVALID)),
            is_seed_node=bool(item.get("IsSeedNode", False)),
            deactivation_status=str(
                deactivation.get("NodeDeactivationStatus", DeactivationStatus.NONE)
            ),
            deactivation_intent=str(deactivation.get("NodeDeactivationIntent", "Invalid")),
            fault_domain=str(item.get("FaultDomain", "")),
            upgrade_domain=str(item.get("UpgradeDomain", "")),
            health_state=str(item.get("HealthState", "")),
            node_down_time_in_seconds=_int(item.get("NodeDownTimeInSeconds")),
            raw=dict(item),
        )

    @property
    def is_deactivated(self) -> bool:
        """Disabled with the deactivation finished: safe to stop the Fabric host."""
        return (
            self.status == NodeStatus.DISABLED
            and self.deactivation_status == DeactivationStatus.COMPLETED
        )


class HealthState(StrEnum):
    """HealthState (REST reference, sfclient-model-healthstate)."""

    INVALID = "Invalid"
    OK = "Ok"
    WARNING = "Warning"
    ERROR = "Error"
    UNKNOWN = "Unknown"


@dataclass(frozen=True)
class ClusterHealth:
    """GET /$/GetClusterHealth (REST reference, sfclient-api-getclusterhealth): the aggregated
    state, and the nodes and unhealthy evaluations behind it (only the fields used)."""

    aggregated_health_state: str
    node_health_states: Mapping[str, str]  # node name -> its aggregated health state
    unhealthy_evaluations: tuple[str, ...]  # each evaluation's Description, for the alarm

    @classmethod
    def from_json(cls, item: Mapping[str, Any]) -> ClusterHealth:
        nodes = {
            str(node.get("Name", "")): str(node.get("AggregatedHealthState", HealthState.UNKNOWN))
            for node in item.get("NodeHealthStates") or []
        }
        evaluations = tuple(
            str((wrapper.get("HealthEvaluation") or {}).get("Description", ""))
            for wrapper in item.get("UnhealthyEvaluations") or []
        )
        return cls(str(item.get("AggregatedHealthState", HealthState.UNKNOWN)), nodes, evaluations)

    @property
    def is_ok(self) -> bool:
        return self.aggregated_health_state == HealthState.OK

    def describe(self) -> str:
        """One line: the state and why ("Warning: ..."), for a wait's detail or an alarm."""
        why = "; ".join(e for e in self.unhealthy_evaluations if e)
        unhealthy = sorted(name for name, state in self.node_health_states.items() if state != HealthState.OK)
        if unhealthy and not why:
            why = "unhealthy nodes: " + ", ".join(unhealthy)
        return f"{self.aggregated_health_state}: {why}" if why else self.aggregated_health_state


@dataclass(frozen=True)
class ClusterConfigurationUpgradeStatus:
    upgrade_state: str
    progress_status: int
    config_version: str
    details: str

    @classmethod
    def from_json(cls, item: Mapping[str, Any]) -> ClusterConfigurationUpgradeStatus:
        return cls(
            upgrade_state=str(item.get("UpgradeState", UpgradeState.INVALID)),
            progress_status=_int(item.get("ProgressStatus")),
            config_version=str(item.get("ConfigVersion", "")),
            details=str(item.get("Details", "")),
        )

    @property
    def is_running(self) -> bool:
        return self.upgrade_state in _UPGRADE_RUNNING

    @property
    def is_completed(self) -> bool:
        return self.upgrade_state == UpgradeState.ROLLING_FORWARD_COMPLETED

    @property
    def has_failed(self) -> bool:
        return self.upgrade_state in _UPGRADE_FAILED


def iso8601_duration(value: timedelta) -> str:
    """timedelta -> 'PT#H#M#S', the duration format of ClusterConfigurationUpgradeDescription."""
    total = int(value.total_seconds())
    if total < 0:
        raise ValueError(f"duration must not be negative, got {value}")
    hours, rest = divmod(total, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"PT{hours}H{minutes}M{seconds}S"


@dataclass(frozen=True)
class UpgradeHealthPolicy:
    """Optional health-policy fields of StartClusterConfigurationUpgrade; None = server default."""

    health_check_retry_timeout: timedelta | None = None
    health_check_wait_duration: timedelta | None = None
    health_check_stable_duration: timedelta | None = None
    upgrade_domain_timeout: timedelta | None = None
    upgrade_timeout: timedelta | None = None
    max_percent_unhealthy_applications: int | None = None
    max_percent_unhealthy_nodes: int | None = None
    max_percent_delta_unhealthy_nodes: int | None = None
    max_percent_upgrade_domain_delta_unhealthy_nodes: int | None = None

    def to_body(self) -> dict[str, Any]:
        durations = {
            "HealthCheckRetryTimeout": self.health_check_retry_timeout,
            "HealthCheckWaitDurationInSeconds": self.health_check_wait_duration,
            "HealthCheckStableDurationInSeconds": self.health_check_stable_duration,
            "UpgradeDomainTimeoutInSeconds": self.upgrade_domain_timeout,
            "UpgradeTimeoutInSeconds": self.upgrade_timeout,
        }
        percents = {
            "MaxPercentUnhealthyApplications": self.max_percent_unhealthy_applications,
            "MaxPercentUnhealthyNodes": self.max_percent_unhealthy_nodes,
            "MaxPercentDeltaUnhealthyNodes": self.max_percent_delta_unhealthy_nodes,
            "MaxPercentUpgradeDomainDeltaUnhealthyNodes": (
                self.max_percent_upgrade_domain_delta_unhealthy_nodes
            ),
        }
        body: dict[str, Any] = {
            key: iso8601_duration(value) for key, value in durations.items() if value is not None
        }
        for key, value in percents.items():
            if value is None:
                continue
            if not 0 <= value <= 100:
                raise ValueError(f"{key} must be between 0 and 100, got {value}")
            body[key] = value
        return body
