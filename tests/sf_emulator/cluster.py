"""In-memory model of a standalone Service Fabric cluster, as the HTTP gateway shows it.

Time is counted in polls, not seconds, so tests are deterministic: a deactivation
finishes on the Nth read of the node after Deactivate, an upgrade on the Nth status read.
All methods are thread-safe (the HTTP server handles requests on several threads).
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

ALL_INTENTS = ("Pause", "Restart", "RemoveData", "RemoveNode")
DOCUMENTED_INTENTS = ("Pause", "Restart", "RemoveData")  # the REST reference's request enum


class EmulatedFabricError(Exception):
    def __init__(self, status: int, code: str, message: str = "") -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message = status, code, message


@dataclass
class EmulatedNode:
    name: str
    ip: str
    node_type: str
    is_seed: bool
    fault_domain: str
    upgrade_domain: str
    status: str = "Up"
    deactivation_intent: str = "Invalid"
    deactivation_status: str = "None"
    host_running: bool = True
    stuck_in_safety_check: bool = False
    polls_until_disabled: int = 0
    down_since: float | None = None

    def to_json(self, now: float) -> dict[str, Any]:
        down = int(now - self.down_since) if self.down_since is not None else 0
        return {
            "Name": self.name,
            "IpAddressOrFQDN": self.ip,
            "Type": self.node_type,
            "NodeStatus": self.status,
            "IsSeedNode": self.is_seed,
            "UpgradeDomain": self.upgrade_domain,
            "FaultDomain": self.fault_domain,
            "HealthState": "Ok" if self.status == "Up" else "Warning",
            "NodeDeactivationInfo": {
                "NodeDeactivationIntent": self.deactivation_intent,
                "NodeDeactivationStatus": self.deactivation_status,
                "NodeDeactivationTask": [],
                "PendingSafetyChecks": [],
            },
            "IsStopped": not self.host_running,
            "NodeDownTimeInSeconds": str(down),
        }

    def config_entry(self) -> dict[str, str]:
        return {
            "nodeName": self.name,
            "iPAddress": self.ip,
            "nodeTypeRef": self.node_type,
            "faultDomain": self.fault_domain,
            "upgradeDomain": self.upgrade_domain,
        }


def _not_found(name: str) -> EmulatedFabricError:
    return EmulatedFabricError(404, "FABRIC_E_NODE_NOT_FOUND", f"Node {name} not found")


class EmulatedCluster:
    def __init__(
        self,
        *,
        deactivation_polls: int = 2,
        upgrade_polls: int = 2,
        page_size: int = 100,
        accepted_intents: Iterable[str] = ALL_INTENTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.deactivation_polls = deactivation_polls
        self.upgrade_polls = upgrade_polls
        self.page_size = page_size
        self.accepted_intents = tuple(accepted_intents)
        self.upgrade_outcome = "RollingForwardCompleted"
        self.clock = clock
        self.lock = threading.RLock()
        self.nodes: dict[str, EmulatedNode] = {}
        self.config: dict[str, Any] = {
            "name": "emulated-cluster",
            "clusterConfigurationVersion": "1.0.0",
            "apiVersion": "10-2017",
            "nodes": [],
            "properties": {"fabricSettings": []},
        }
        self.upgrade_state = "RollingForwardCompleted"
        self.upgrade_requests: list[dict[str, Any]] = []
        self._pending_config: dict[str, Any] | None = None
        self._upgrade_polls_left = 0

    # -- set-up and out-of-band events (what tests do to the "machines") -----------------

    def add_node(
        self,
        name: str,
        *,
        ip: str = "",
        node_type: str = "ScalingNodeType",
        is_seed: bool = False,
        fault_domain: str = "fd:/aws/az0",
        upgrade_domain: str = "UD0",
        in_config: bool = False,
    ) -> EmulatedNode:
        """A node joins (as AddNode.ps1 does); `in_config` also lists it in the config."""
        with self.lock:
            node = EmulatedNode(
                name,
                ip or f"10.0.9.{len(self.nodes) + 10}",
                node_type,
                is_seed,
                fault_domain,
                upgrade_domain,
            )
            self.nodes[name] = node
            if in_config:
                self.config["nodes"].append(node.config_entry())
            return node

    def stop_host(self, name: str) -> None:
        """The FabricHostSvc on the node's machine stops (or the machine goes away)."""
        with self.lock:
            node = self.nodes[name]
            node.host_running = False
            if node.status != "Removed":
                node.status = "Down"
                node.down_since = self.clock()

    def start_host(self, name: str) -> None:
        with self.lock:
            node = self.nodes[name]
            node.host_running = True
            node.down_since = None
            if node.status == "Down":
                node.status = "Up" if node.deactivation_intent == "Invalid" else "Disabled"

    def set_stuck_in_safety_check(self, name: str, stuck: bool = True) -> None:
        with self.lock:
            self.nodes[name].stuck_in_safety_check = stuck

    def node(self, name: str) -> EmulatedNode | None:
        with self.lock:
            return copy.copy(self.nodes.get(name))

    def set_config(self, config: dict[str, Any]) -> None:
        with self.lock:
            self.config = copy.deepcopy(config)

    # -- gateway operations ---------------------------------------------------------------

    def _poll(self, node: EmulatedNode) -> dict[str, Any]:
        if node.status == "Disabling" and not node.stuck_in_safety_check:
            node.polls_until_disabled -= 1
            if node.polls_until_disabled <= 0:
                node.status, node.deactivation_status = "Disabled", "Completed"
        return node.to_json(self.clock())

    def get_node(self, name: str) -> dict[str, Any] | None:
        with self.lock:
            node = self.nodes.get(name)
            return self._poll(node) if node else None

    def list_nodes(self, token: str, status_filter: str, max_results: int) -> dict[str, Any]:
        with self.lock:
            wanted = status_filter.lower() or "default"
            names = sorted(n for n in self.nodes if not token or n > token)
            matching = [
                self.nodes[n]
                for n in names
                if wanted == "all"
                or (wanted == "default" and self.nodes[n].status not in ("Unknown", "Removed"))
                or self.nodes[n].status.lower() == wanted
            ]
            size = min(self.page_size, max_results) if max_results > 0 else self.page_size
            page = matching[:size]
            more = len(matching) > size
            return {
                "ContinuationToken": page[-1].name if more else "",
                "Items": [self._poll(node) for node in page],
            }

    def deactivate(self, name: str, intent: str) -> None:
        with self.lock:
            node = self.nodes.get(name)
            if node is None:
                raise _not_found(name)
            if intent not in self.accepted_intents:
                raise EmulatedFabricError(400, "E_INVALIDARG", f"DeactivationIntent {intent}")
            node.deactivation_intent = intent
            if node.status in ("Down", "Removed"):
                node.deactivation_status = "Completed"
            elif node.status in ("Up", "Enabling"):
                node.status, node.deactivation_status = "Disabling", "SafetyCheckInProgress"
                node.polls_until_disabled = self.deactivation_polls
                if self.deactivation_polls <= 0 and not node.stuck_in_safety_check:
                    node.status, node.deactivation_status = "Disabled", "Completed"

    def activate(self, name: str) -> None:
        with self.lock:
            node = self.nodes.get(name)
            if node is None:
                raise _not_found(name)
            node.deactivation_intent, node.deactivation_status = "Invalid", "None"
            if node.status in ("Disabling", "Disabled"):
                node.status = "Up"

    def remove_node_state(self, name: str) -> None:
        with self.lock:
            node = self.nodes.get(name)
            if node is None:
                raise _not_found(name)
            if node.status not in ("Down", "Removed"):
                # The REST reference lists FABRIC_E_NODE_IS_UP under HTTP 500.
                raise EmulatedFabricError(500, "FABRIC_E_NODE_IS_UP", f"Node {name} is up")
            node.status = "Removed"

    def get_configuration(self) -> dict[str, Any]:
        with self.lock:
            return {"ClusterConfiguration": json.dumps(self.config)}

    def start_upgrade(self, body: Any) -> None:
        with self.lock:
            if not isinstance(body, dict) or not isinstance(body.get("ClusterConfig"), str):
                raise EmulatedFabricError(400, "E_INVALIDARG", "ClusterConfig string required")
            try:
                config = json.loads(body["ClusterConfig"])
            except ValueError as exc:
                raise EmulatedFabricError(400, "E_INVALIDARG", f"ClusterConfig: {exc}") from exc
            if self._pending_config is not None:
                raise EmulatedFabricError(
                    409,
                    "FABRIC_E_FABRIC_UPGRADE_IN_PROGRESS",
                    "a configuration upgrade is in progress",
                )
            version = config.get("clusterConfigurationVersion")
            if version == self.config.get("clusterConfigurationVersion"):
                raise EmulatedFabricError(
                    400,
                    "FABRIC_E_INVALID_CONFIGURATION",
                    f"clusterConfigurationVersion {version} is current",
                )
            self.upgrade_requests.append(copy.deepcopy(body))
            self._pending_config = config
            self._upgrade_polls_left = self.upgrade_polls
            self.upgrade_state = "RollingForwardInProgress"
            if self.upgrade_polls <= 0:
                self._finish_upgrade()

    def upgrade_status(self) -> dict[str, Any]:
        with self.lock:
            if self._pending_config is not None:
                self._upgrade_polls_left -= 1
                if self._upgrade_polls_left <= 0:
                    self._finish_upgrade()
            target = self._pending_config or self.config
            return {
                "UpgradeState": self.upgrade_state,
                "ProgressStatus": 0,
                "ConfigVersion": str(target.get("clusterConfigurationVersion", "")),
                "Details": "",
            }

    def _finish_upgrade(self) -> None:
        config, self._pending_config = self._pending_config, None
        self.upgrade_state = self.upgrade_outcome
        if config is None or self.upgrade_outcome != "RollingForwardCompleted":
            return
        self.config = config
        for name in _nodes_to_be_removed(config):
            node = self.nodes.get(name)
            if node is not None and node.status in ("Down", "Removed"):
                del self.nodes[name]


def _nodes_to_be_removed(config: dict[str, Any]) -> list[str]:
    for section in (config.get("properties") or {}).get("fabricSettings") or []:
        if section.get("name") == "Setup":
            for parameter in section.get("parameters") or []:
                if parameter.get("name") == "NodesToBeRemoved":
                    return [
                        n.strip() for n in str(parameter.get("value", "")).split(",") if n.strip()
                    ]
    return []
