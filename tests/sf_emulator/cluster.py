"""A standalone Service Fabric cluster as its HTTP gateway shows it: the Failover Manager's
node list (failover_manager.py), the Upgrade Orchestration Service (upgrade_orchestration.py)
and the machines the nodes run on.

Time is a logical clock: every gateway request is one tick (the server calls `tick()` before
answering), so a deactivation's safety checks or a configuration upgrade take a set number of
requests, whatever the wall clock does. A start request blocks like the real one
(UpgradeOrchestrationMessageProcessor awaits the orchestration) for at most
`start_wait_ticks` ticks, then answers as the gateway does when its timeout passes.

All methods are thread-safe (the HTTP server handles requests on several threads).
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from .failover_manager import (
    ALL_INTENTS,
    DOCUMENTED_INTENTS,
    EmulatedFabricError,
    EmulatedNode,
    FailoverManager,
)
from .cluster_manager import ClusterManager
from .image_store import ImageStore
from .upgrade_orchestration import Orchestration, UpgradeOrchestrationService, nodes_to_be_removed

__all__ = [
    "ALL_INTENTS",
    "DOCUMENTED_INTENTS",
    "EmulatedCluster",
    "EmulatedFabricError",
    "EmulatedNode",
    "nodes_to_be_removed",
]

# How the gateway answers an operation that outlives the request's `timeout`: FABRIC_E_TIMEOUT,
# which the gateway maps to HTTP 504 Gateway Timeout (httpgateway error mapping), while the
# operation itself goes on.
GATEWAY_TIMEOUT = (504, "FABRIC_E_TIMEOUT")


def _setting(part: str, name: str, convert: Callable[[Any], Any] = lambda value: value) -> Any:
    """A property that reads and writes `name` on the FM ("fm") or the UOS ("uos")."""
    return property(
        lambda self: getattr(getattr(self, part), name),
        lambda self, value: setattr(getattr(self, part), name, convert(value)),
    )


class EmulatedCluster:
    def __init__(
        self,
        *,
        deactivation_ticks: int = 2,
        upgrade_ticks: int = 3,
        start_wait_ticks: int = 1,
        page_size: int = 100,
        accepted_intents: Iterable[str] = ALL_INTENTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lock = threading.RLock()
        self.fm = FailoverManager(
            clock=lambda: self.clock(), manifest_nodes=lambda: self.uos.topology
        )
        self.uos = UpgradeOrchestrationService(self.fm)
        self.image_store = ImageStore(clock=lambda: self.clock())  # files and upload sessions
        self.cm = ClusterManager(self.image_store)  # the fabric (runtime code) upgrade
        self.clock = clock
        self.page_size = page_size
        self.deactivation_ticks = deactivation_ticks
        self.upgrade_ticks = upgrade_ticks
        self.start_wait_ticks = start_wait_ticks
        self.accepted_intents = tuple(accepted_intents)
        self.ticks = 0
        # Health reports on the cluster entity (ReportClusterHealth), as a watchdog or an operator
        # sends them: (source, property) -> (state, description).
        self.cluster_reports: dict[tuple[str, str], tuple[str, str]] = {}

    # -- settings passed through to the parts -----------------------------------------------

    deactivation_ticks = _setting("fm", "deactivation_ticks")
    seed_wait_seconds = _setting("fm", "seed_wait_seconds")
    accepted_intents = _setting("fm", "accepted_intents", convert=tuple)
    upgrade_ticks = _setting("uos", "upgrade_ticks")
    upgrade_outcome = _setting("uos", "upgrade_outcome")
    removes_node_state = _setting("uos", "removes_node_state")
    uninstalls_removed_nodes = _setting("uos", "uninstalls_removed_nodes")

    @property
    def nodes(self) -> dict[str, EmulatedNode]:
        return self.fm.nodes

    @property
    def config(self) -> dict[str, Any]:
        """What GetClusterConfiguration answers now."""
        with self.lock:
            return self.uos.configuration()

    @property
    def upgrade_requests(self) -> list[dict[str, Any]]:
        """Every StartClusterConfigurationUpgrade body received, accepted or refused."""
        return self.uos.requests

    @property
    def upgrades(self) -> list[Orchestration]:
        """Configuration upgrades that ended (completed, rolled back or aborted), in order."""
        return self.uos.history

    @property
    def uos_nodes(self) -> list[str]:
        """The nodes the UOS knows (its topology), which GetClusterConfiguration does not show."""
        with self.lock:
            return sorted(self.uos.topology)

    # -- set-up and what happens to the machines ----------------------------------------------

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
        """A node joins the FM (what AddNode.ps1 does). `in_config`: the UOS knows it too, as
        for the nodes the cluster was created with."""
        with self.lock:
            node = EmulatedNode(
                name,
                ip or f"10.0.9.{len(self.fm.nodes) + 10}",
                node_type,
                is_seed,
                fault_domain,
                upgrade_domain,
            )
            self.fm.nodes[name] = node
            self.fm.started(node)
            if in_config:
                self.uos.topology[name] = node.config_entry()
            return node

    def join_by_add_node(self, parameters: dict[str, str]) -> EmulatedNode:
        """What AddNode.ps1 does on a machine, given the add-node document's parameters
        (stacks/documents/add_node.yaml): the node joins the FM; the UOS does not know it yet."""
        return self.add_node(
            parameters["nodeName"],
            ip=parameters["ipAddress"],
            node_type=parameters["nodeType"],
            fault_domain=parameters["faultDomain"],
            upgrade_domain=parameters["upgradeDomain"],
        )

    def set_properties(self, properties: dict[str, Any]) -> None:
        with self.lock:
            self.uos.current["properties"] = copy.deepcopy(properties)

    def stop_host(self, name: str) -> None:
        """FabricHostSvc on the node's machine stops; the machine still answers on 445."""
        with self.lock:
            self.fm.host_stopped(name)

    def start_host(self, name: str) -> None:
        with self.lock:
            self.fm.host_started(name)

    def restart_host(self, name: str, *, after_ticks: int = 0) -> None:
        """The machine rebooted and its host is back before the FM noticed it had gone: a new
        instance, never Down (failover_manager.py, host_restarted); with `after_ticks`, the FM
        hears from the new instance that many ticks later, showing the last one until then."""
        with self.lock:
            if after_ticks > 0:
                self.fm.restarts_unseen[name] = after_ticks
            else:
                self.fm.host_restarted(name)

    def terminate_machine(self, name: str) -> None:
        """The node's machine is gone: its host stops and nothing answers on its address."""
        with self.lock:
            self.fm.nodes[name].machine_reachable = False
            self.fm.host_stopped(name)

    def run_other_upgrade(self, ticks: int) -> None:
        """Another party's upgrade that cannot be interrupted (a code upgrade) runs for
        `ticks` ticks; starts meanwhile are refused as "already in progress"."""
        with self.lock:
            self.uos.run_other_upgrade(ticks)

    def set_stuck_in_safety_check(self, name: str, stuck: bool = True) -> None:
        with self.lock:
            self.fm.nodes[name].stuck_in_safety_check = stuck

    def report_cluster_health(self, state: str, description: str, *, source: str = "Watchdog",
                              prop: str = "Availability") -> None:  # fmt: skip
        """A health report on the cluster entity (REST: POST /$/ReportClusterHealth); "Ok"
        replaces an earlier report of the same source and property, as a new report does."""
        with self.lock:
            self.cluster_reports[(source, prop)] = (state, description)

    def node(self, name: str) -> EmulatedNode | None:
        with self.lock:
            return copy.copy(self.fm.nodes.get(name))

    # -- time -------------------------------------------------------------------------------

    def tick(self, count: int = 1) -> None:
        with self.lock:
            for _ in range(count):
                self.ticks += 1
                self.fm.tick()
                self.uos.tick()
                self.cm.tick()

    # -- gateway operations -----------------------------------------------------------------

    def get_node(self, name: str) -> dict[str, Any] | None:
        with self.lock:
            node = self.fm.visible(name)
            return self._node_info(node) if node else None

    def list_nodes(self, token: str, status_filter: str, max_results: int) -> dict[str, Any]:
        with self.lock:
            rows = self.fm.query(status_filter=status_filter)
            matching = [n for n in rows if not token or n.name > token]
            size = min(self.page_size, max_results) if max_results > 0 else self.page_size
            page = matching[:size]
            return {
                "ContinuationToken": page[-1].name if len(matching) > size else "",
                "Items": [self._node_info(node) for node in page],
            }

    def _node_info(self, node: EmulatedNode) -> dict[str, Any]:
        if not node.instance_id:
            # A row only the cluster manifest lists: NodeQueryResult's CM-only constructor gives
            # "unknown" versions and FABRIC_INVALID_NODE_INSTANCE_ID (rendered "0" here: its value
            # is in FabricTypes, which the emulator does not read; a risk).
            return node.to_json(self.clock(), code_version="unknown", config_version="unknown")
        return node.to_json(self.clock(), code_version=self.cm.code_version, config_version=self.cm.config_version)

    def deactivate(self, name: str, intent: str) -> None:
        with self.lock:
            self.fm.deactivate(name, intent)

    def activate(self, name: str) -> None:
        with self.lock:
            self.fm.activate(name)

    def remove_node_state(self, name: str) -> None:
        with self.lock:
            self.fm.remove_node_state(name)

    def get_configuration(self) -> dict[str, Any]:
        with self.lock:
            return {"ClusterConfiguration": json.dumps(self.uos.configuration())}

    def start_upgrade(self, body: Any) -> None:
        """Validate and start, then wait for the orchestration like the real call does, for at
        most `start_wait_ticks` ticks; past that, the gateway's timeout answer."""
        with self.lock:
            # A configuration upgrade started over a code upgrade would interrupt it (FabricUOS
            # UpgradeOrchestrator.DoUpgradeAsync: "Interrupting on-going upgrade with new version");
            # not modelled, so a test that gets here fails rather than pass on invented behaviour.
            assert self.cm.upgrade is None, "the UOS would interrupt the code upgrade under way; the emulator does not model that"
            run = self.uos.start(body)
            for _ in range(self.start_wait_ticks):
                if self.uos.pending is not run:
                    return
                self.tick()
            if self.uos.pending is not run:
                return
        status, code = GATEWAY_TIMEOUT
        raise EmulatedFabricError(status, code, "Operation timed out.")

    def cluster_health(self) -> dict[str, Any]:
        """GET /$/GetClusterHealth with the cluster's default policy (ClusterHealth, REST reference
        sfclient-model-clusterhealth). The aggregation follows the Health Manager
        (Management/healthmanager/ClusterEntity.cpp, EvaluateHealth then EvaluateNodes;
        HealthEntity::UpdateHealthState): the cluster's own events first, then the nodes against
        MaxPercentUnhealthyNodes, which the default ClusterHealthPolicy sets to 0 with
        ConsiderWarningAsError false (ServiceModel/ClusterHealthPolicy.cpp): one node in Error makes
        the cluster Error, one in Warning makes it Warning. Nodes the FM removed or never knew are
        deleted from the Health Manager (HealthReportFactory.cpp, FM_DeleteNode) and not counted.
        Applications are not modelled. The descriptions' wording is the emulator's."""
        order = ("Ok", "Warning", "Error")
        with self.lock:
            worst, evaluations = "Ok", []
            for (source, prop), (state, description) in sorted(self.cluster_reports.items()):
                if state != "Ok":
                    evaluations.append({"HealthEvaluation": {"Kind": "Event", "AggregatedHealthState": state,
                                        "Description": f"{source} reported {state} for {prop}: {description}"}})  # fmt: skip
                    worst = max(worst, state, key=order.index)
            nodes = [n for n in self.fm.nodes.values() if n.status not in ("Removed", "Unknown")]
            states = {n.name: n.health_state for n in nodes}
            unhealthy = sorted(name for name, state in states.items() if state != "Ok")
            if unhealthy:
                nodes_state = max((states[name] for name in unhealthy), key=order.index)
                evaluations.append({"HealthEvaluation": {"Kind": "Nodes", "AggregatedHealthState": nodes_state,
                                    "Description": f"Unhealthy nodes: {', '.join(unhealthy)} "
                                                   f"({len(unhealthy)}/{len(nodes)}), MaxPercentUnhealthyNodes=0%."}})  # fmt: skip
                worst = max(worst, nodes_state, key=order.index)
            return {
                "AggregatedHealthState": worst,
                "UnhealthyEvaluations": evaluations,
                "NodeHealthStates": [{"Name": name, "AggregatedHealthState": state} for name, state in sorted(states.items())],
                "ApplicationHealthStates": [],
            }

    def upgrade_status(self) -> dict[str, Any]:
        """The configuration upgrade status, whose UpgradeState is the Cluster Manager's fabric
        upgrade's (UpgradeOrchestrationMessageProcessor.ProcessGetClusterConfigurationUpgradeProgressAsync): a code
        upgrade under way shows there too."""
        with self.lock:
            status = self.uos.status()
            if self.cm.upgrade is not None:
                status["UpgradeState"] = self.cm.state
            return status

    # -- fabric (runtime code) upgrade: the Cluster Manager (cluster_manager.py) --------------

    def provision_fabric(self, body: Any) -> None:
        with self.lock:
            self.cm.provision(body)

    # A configuration upgrade's manifest upgrade is the Cluster Manager's fabric upgrade: the UOS
    # reports its state from ClusterManager.GetFabricUpgradeProgressAsync (FabricUOS/exe/
    # UpgradeOrchestrationMessageProcessor.cs, ProcessGetClusterConfigurationUpgradeProgressAsync: UpgradeState, and
    # ProgressStatus from its TargetConfigVersion). So while one rolls, GetUpgradeProgress shows
    # it (the code version unchanged, the target manifest version), and a code upgrade started
    # meanwhile would interrupt it (cluster_manager.py, start_upgrade). The other way round, the
    # configuration status shows a code upgrade (upgrade_status).

    def _manifest_upgrade_rolling(self) -> bool:
        # Pending in any of its states: rolling forward, waiting for a manual domain, rolling back
        # (UpgradeOrchestrator.cs waits through each).
        return self.cm.upgrade is None and self.uos.pending is not None and self.uos.pending.phase == "upgrade" \
            and self.uos.fabric_upgrade_state not in ("RollingForwardCompleted", "RollingBackCompleted", "Failed")  # fmt: skip

    def start_fabric_upgrade(self, body: Any) -> None:
        with self.lock:
            self.cm.start_upgrade(body, sorted({node.upgrade_domain for node in self.fm.nodes.values()}),
                                  manifest_upgrade_rolling=self._manifest_upgrade_rolling())  # fmt: skip

    def fabric_upgrade_progress(self) -> dict[str, Any]:
        with self.lock:
            progress = self.cm.progress()
            if self._manifest_upgrade_rolling():
                progress.update(UpgradeState="RollingForwardInProgress", ConfigVersion=str(self.uos.manifest_version))
            return progress

    def provisioned_code_versions(self, code_version: str) -> list[dict[str, str]]:
        with self.lock:
            return self.cm.provisioned_code_versions(code_version)

    # -- the image store (image_store.py) ------------------------------------------------------

    def upload_chunk(self, path: str, query: dict[str, str], body: Any) -> None:
        with self.lock:
            self.image_store.upload_chunk(path, query, body)

    def get_upload_session(self, query: dict[str, str]) -> tuple[int, Any]:
        with self.lock:
            return self.image_store.get_upload_session(query)

    def delete_upload_session(self, query: dict[str, str]) -> None:
        with self.lock:
            self.image_store.delete_upload_session(query)

    def commit_upload_session(self, query: dict[str, str]) -> None:
        with self.lock:
            self.image_store.commit_upload_session(query)
