"""The cluster code (runtime) upgrade's documents: the monitored upgrade the client starts and
the progress it reads (Service Fabric REST reference: StartClusterUpgradeDescription,
MonitoringPolicyDescription, ClusterHealthPolicy, ClusterUpgradeProgressObject)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .models import iso8601_duration

# ClusterUpgradeProgressObject.UpgradeState: where the runs end.
FORWARD_COMPLETED = "RollingForwardCompleted"
ROLLED_BACK = "RollingBackCompleted"
FAILED = "Failed"


@dataclass(frozen=True)
class MonitoredCodeUpgrade:
    """A Rolling, Monitored code upgrade that rolls back on a health or time-out violation."""

    code_version: str
    health_check_wait: timedelta = timedelta(minutes=5)
    health_check_stable: timedelta = timedelta(minutes=2)
    health_check_retry_timeout: timedelta = timedelta(minutes=10)
    upgrade_domain_timeout: timedelta = timedelta(hours=1)
    upgrade_timeout: timedelta = timedelta(hours=6)
    max_percent_unhealthy_nodes: int = 0
    max_percent_unhealthy_applications: int = 0

    def to_body(self) -> dict[str, Any]:
        return {
            "CodeVersion": self.code_version,
            "UpgradeKind": "Rolling",
            "RollingUpgradeMode": "Monitored",
            "MonitoringPolicy": {
                "FailureAction": "Rollback",
                "HealthCheckWaitDurationInMilliseconds": iso8601_duration(self.health_check_wait),
                "HealthCheckStableDurationInMilliseconds": iso8601_duration(self.health_check_stable),
                "HealthCheckRetryTimeoutInMilliseconds": iso8601_duration(self.health_check_retry_timeout),
                "UpgradeDomainTimeoutInMilliseconds": iso8601_duration(self.upgrade_domain_timeout),
                "UpgradeTimeoutInMilliseconds": iso8601_duration(self.upgrade_timeout),
            },
            "ClusterHealthPolicy": {
                "ConsiderWarningAsError": False,
                "MaxPercentUnhealthyNodes": self.max_percent_unhealthy_nodes,
                "MaxPercentUnhealthyApplications": self.max_percent_unhealthy_applications,
            },
        }


@dataclass(frozen=True)
class CodeUpgradeProgress:
    code_version: str  # the target while an upgrade runs, else the cluster's version
    state: str
    domains: tuple[tuple[str, str], ...]  # (name, state)
    next_domain: str
    failure_reason: str

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> CodeUpgradeProgress:
        return cls(
            code_version=str(document.get("CodeVersion") or ""),
            state=str(document.get("UpgradeState") or "Invalid"),
            domains=tuple((str(d.get("Name", "")), str(d.get("State", ""))) for d in document.get("UpgradeDomains") or []),
            next_domain=str(document.get("NextUpgradeDomain") or ""),
            failure_reason=str(document.get("FailureReason") or ""),
        )

    @property
    def running(self) -> bool:
        return self.state not in (FORWARD_COMPLETED, ROLLED_BACK, FAILED, "Invalid")

    def summary(self) -> str:
        done = sum(state == "Completed" for _, state in self.domains)
        domains = f", {done}/{len(self.domains)} upgrade domains done" if self.domains else ""
        following = f", next {self.next_domain}" if self.next_domain else ""
        reason = f", failure: {self.failure_reason}" if self.failure_reason and self.failure_reason != "None" else ""
        return f"{self.state} to {self.code_version}{domains}{following}{reason}"
