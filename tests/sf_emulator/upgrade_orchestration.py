"""The standalone Upgrade Orchestration Service (UOS): cluster configuration and membership.

A model of what the open-source runtime does (microsoft/service-fabric, newest snapshot):
- src/prod/src/managed/FabricUOS/exe/UpgradeOrchestrationMessageProcessor.cs (UOS below: MP)
- src/prod/src/managed/FabricUOS/exe/UpgradeOrchestrator.cs (UO)
- src/prod/src/managed/Api/Dlls/Microsoft.ServiceFabric.DeploymentManager/Common/
  StandaloneSettingsValidator.cs (SV) and StandaloneUtility.cs (SU)
Each rule below names the function it follows. What no source says is marked as such.

The UOS keeps its own topology (the nodes it knows) beside the Failover Manager's node list;
AddNode.ps1 adds a node to the FM only, and a configuration upgrade registers it with the UOS.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from .failover_manager import EmulatedFabricError, FailoverManager

SETUP = "Setup"
NODES_TO_BE_REMOVED = "NodesToBeRemoved"
SMB_PORT = 445  # SU.CheckRequiredPorts: requiredPorts = { DMConstants.SmbFileSharePort }


class UosRefusal(EmulatedFabricError):
    """MP.ConvertToComException: every failure of the UOS reaches the caller as
    FABRIC_E_CONFIG_UPGRADE_FAILED with "<ExceptionType>: <message>"; the gateway answers it
    with HTTP 500 (no specific mapping for that code, so the default for a failure)."""

    def __init__(self, exception_type: str, message: str) -> None:
        super().__init__(500, "FABRIC_E_CONFIG_UPGRADE_FAILED", f"{exception_type}: {message}")


def _validation(message: str) -> UosRefusal:
    return UosRefusal("ValidationException", message)


# The messages are the runtime's StringResources (System.Fabric.Strings/StringResources.resx).
NOT_ALL_REMOVED_NODES_LISTED = (
    "Nodes have been removed from the JSON config but NodesToBeRemoved parameter does not "
    "contain NodeName for all removed nodes."
)
UNKNOWN_NODES_TO_REMOVE = (
    "NodesToBeRemoved parameter contains inconsistent information. To remove a node, remove it "
    "from the nodes list in the JSON config and specify the correct node name in "
    "NodesToBeRemoved parameter."
)
ADD_AND_REMOVE_TOGETHER = "Nodes cannot be added and removed in the same upgrade."
# StringResources.resx: Error_SFAddNodeNotKnowntoFM and Error_SFNodesFromFMDontMatch, whole.
ADDED_NODE_NOT_KNOWN_TO_FM = (
    "The new JSON config contains some newly added nodes which are not part of the cluster. "
    "Please ensure all newly added nodes are first added using AddNode API and then initiate an "
    "upgrade. Make sure all relevant details in the new JSON configuration exactly match the "
    "parameters used in AddNode API."
)
FM_NODES_DO_NOT_MATCH = (
    "Nodes present in the cluster must exactly match the nodes in JSON config when new nodes "
    "have been added using AddNode.ps1 script. Run Get-ServiceFabricClusterConfiguration to get "
    "the most recent node list."
)
PORTS_UNREACHABLE = (
    "Required ports on the node to be removed are not reacheable. Check connectivity/open ports."
)
IDENTICAL_VERSION = "UpgradeWithIdenticalConfigVersionNotAllowed"
NODE_CHANGED = "NodeIPNodeTypeRefCantBeChanged"
ABORTED = "Remove node operations were not performed succesfully. Aborting upgrade."


def nodes_to_be_removed(config: dict[str, Any]) -> list[str] | None:
    """SV.GetRemovedNodes: the Setup section's NodesToBeRemoved, split on ',' and trimmed
    (an empty value is one empty name). None when the parameter is absent."""
    for section in (config.get("properties") or {}).get("fabricSettings") or []:
        if str(section.get("name", "")).lower() != SETUP.lower():
            continue
        for parameter in section.get("parameters") or []:
            if str(parameter.get("name", "")).lower() == NODES_TO_BE_REMOVED.lower():
                return [p.strip() for p in str(parameter.get("value", "")).split(",")]
    return None


def _topology(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(n.get("nodeName")): dict(n) for n in config.get("nodes") or []}


@dataclass
class Orchestration:
    """One running configuration upgrade (UO.OrchestrateUpgradeAsync)."""

    target: dict[str, Any]
    removing: tuple[str, ...] = ()
    adding: tuple[str, ...] = ()
    # deactivate -> wait_disabled -> upgrade (removal); upgrade (registration, settings)
    phase: str = "deactivate"
    ticks: int = 0  # in the current phase
    # Interruptible by another start? Simple upgrades without a code change are (and the
    # emulator does not model interrupting them); AutoScale, baseline and code upgrades are not
    # (CanInterruptUpgrade overrides, StandAloneSimpleClusterUpgradeState.CanInterruptUpgrade).
    interruptible: bool = True
    log: list[str] = field(default_factory=list)

    @property
    def version(self) -> str:
        return str(self.target.get("clusterConfigurationVersion", ""))


class UpgradeOrchestrationService:
    def __init__(self, fm: FailoverManager) -> None:
        self.fm = fm
        # The stored cluster resource: Current.CSMConfig (everything but `nodes`, which
        # GetClusterConfiguration takes from the FM) and Topology (the UOS's own nodes, from
        # which the cluster manifest's node list is built).
        self.current: dict[str, Any] = {
            "name": "emulated-cluster",
            "clusterConfigurationVersion": "1.0.0",
            "apiVersion": "10-2017",
            "properties": {"fabricSettings": []},
        }
        self.topology: dict[str, dict[str, Any]] = {}
        self.pending: Orchestration | None = None
        # The Cluster Manager's fabric upgrade: its state and target manifest version, which the
        # status reports as UpgradeState and ProgressStatus (MP.ProcessGetClusterConfiguration-
        # UpgradeProgressAsync). Manifest versions are integers, one more per manifest upgrade
        # (StandaloneUtility.GetNextClusterManifestVersionHelper).
        self.fabric_upgrade_state = "RollingForwardCompleted"
        self.manifest_version = 1
        self.error_details = ""
        self.upgrade_ticks = 2  # how long one manifest upgrade runs
        self.upgrade_ticks_other = 2
        self.upgrade_outcome = "RollingForwardCompleted"
        # Whether the UOS's own RemoveNodeState after a removal works (UO.RemoveNodeStateAsync is
        # best effort: a failure is only traced); tests turn it off to drive our clean-up.
        self.removes_node_state = True
        # Whether FabricDeployer's RemoveNodeConfig on a removed node's machine uninstalls Fabric
        # (which stops its host: Down). Where it fails on the machine nothing tells the UOS, and
        # the node stays listed; no source says how often. Tests turn it off to drive our
        # clean-up's stop-the-host branch.
        self.uninstalls_removed_nodes = True
        # UO.PollDeactivatedNodesAsync gives up after FabricPollDeactivatedNodesTimeoutInMinutes
        # (10 minutes; FabricUOS/exe/Constants.cs); here in ticks.
        self.deactivation_timeout_ticks = 50
        # How long the UOS takes before it looks the nodes up and deactivates them (its
        # FabricClient calls retry for up to 5 minutes); the status shows nothing meanwhile.
        self.lookup_ticks = 1
        self.requests: list[dict[str, Any]] = []  # every start request body, accepted or not
        self.history: list[Orchestration] = []

    # -- reads ------------------------------------------------------------------------------

    def configuration(self) -> dict[str, Any]:
        """MP.ProcessGetClusterConfigurationAsync: the stored configuration with `nodes`
        rebuilt from the node list (rows with NodeStatus Invalid left out): a node AddNode.ps1
        joined is listed before the UOS knows it, a Removed node is not, and NodesToBeRemoved
        of the last upgrade is echoed."""
        document = copy.deepcopy(self.current)
        document["nodes"] = [
            node.config_entry() for node in self.fm.query() if node.status != "Invalid"
        ]
        return document

    def status(self) -> dict[str, Any]:
        """MP.ProcessGetClusterConfigurationUpgradeProgressAsync: UpgradeState and
        ProgressStatus are the Cluster Manager's (so they show the previous upgrade until a
        manifest upgrade starts), ConfigVersion is Current's, Details the stored error."""
        return {
            "UpgradeState": self.fabric_upgrade_state,
            "ProgressStatus": self.manifest_version,
            "ConfigVersion": str(self.current.get("clusterConfigurationVersion", "")),
            "Details": self.error_details,
        }

    # -- start ------------------------------------------------------------------------------

    def start(self, body: Any) -> Orchestration:
        """MP.ProcessStartClusterConfigurationUpgradeAsync, up to the orchestrator's start."""
        if not isinstance(body, dict) or not isinstance(body.get("ClusterConfig"), str):
            # ClusterManagementHandler::StartClusterConfigurationUpgrade: a body that does not
            # deserialize is E_INVALIDARG.
            raise EmulatedFabricError(400, "E_INVALIDARG", "ClusterConfig string required")
        self.requests.append(copy.deepcopy(body))
        try:
            target = json.loads(body["ClusterConfig"])
        except ValueError:
            raise UosRefusal(
                "ArgumentException",
                "The input cluster configuration is not in a valid json format or supported "
                "apiVersion.",
            ) from None
        if self.pending is not None:
            if not self.pending.interruptible:
                # MP: `cluster.Pending != null && !IsInterruptibleAsync(cluster.Pending)`.
                raise UosRefusal(
                    "FabricException",
                    "Cluster configuration upgrade of type StandAloneSimpleClusterUpgradeState "
                    "is already in progress and cannot be interrupted.",
                )
            # The guard lets this through and the state machine may interrupt the running
            # upgrade (ClusterResourceStateMachine.TryInterruptPendingUpgrade); what follows
            # for membership upgrades is not clear from the source, so it is not modelled.
            raise EmulatedFabricError(
                500, "EMULATOR_NOT_MODELLED", "a start while an interruptible upgrade runs"
            )
        self._validate_update(target)
        targeted = _topology(target)
        removed = self._removed_nodes(targeted, target)  # MP calls it again after validation
        added = [name for name in targeted if name not in self.topology]  # SV.GetAddedNodes
        run = Orchestration(target=copy.deepcopy(target), removing=tuple(removed), adding=tuple(added))
        self.pending = run
        self.error_details = ""
        if removed:
            # A non-seed removal is a node-status change (AutoScale upgrade) that needs no
            # manifest change: the first RunStateMachine makes the target Current at once, so
            # the status shows the new version before any node is touched
            # (ClusterResourceStateMachine.TryProcessUpgrade; Topology keeps the node for now).
            self._make_current(run.target)
        else:
            # MP: after an addition (or no membership change) Topology is the target's at once.
            self.topology = targeted
            self._start_manifest_upgrade(run)
        return run

    def _validate_update(self, target: dict[str, Any]) -> None:
        """SV.ValidateUpdateFrom (the parts that concern membership) and SV.ValidateTopologyAsync."""
        if target.get("name") != self.current.get("name"):
            raise _validation("ClusterNameCantBeChanged")
        # "Case-insensitive string comparison. So, '1.0.1' is considered different from '1.00.1'"
        if str(target.get("clusterConfigurationVersion")).lower() == str(
            self.current.get("clusterConfigurationVersion")
        ).lower():
            raise _validation(IDENTICAL_VERSION)
        targeted = _topology(target)
        fm_nodes = self.fm.query()  # SU.GetNodesFromFMAsync: the merged list, Invalid rows too
        # SV.VerifyNodePropertiesUnchanged(nodesFromFM): a node keeps its address and type.
        for node in fm_nodes:
            entry = targeted.get(node.name)
            if entry and (
                entry.get("iPAddress") != node.ip or entry.get("nodeTypeRef") != node.node_type
            ):
                raise _validation(f"{NODE_CHANGED}: {node.name}")
        # SV.CheckUOSandFMStateConsistentAsync: every listed node is one the UOS knows.
        consistent = all(node.name in self.topology for node in fm_nodes)
        if not consistent:
            # SV.VerifyFMNodesMatchTargetNodes: after AddNode.ps1, the target lists exactly
            # the listed nodes (same count, every target node among them).
            names = {node.name for node in fm_nodes}
            if len(targeted) != len(fm_nodes):
                raise _validation(FM_NODES_DO_NOT_MATCH)
            if any(name not in names for name in targeted):
                raise _validation(ADDED_NODE_NOT_KNOWN_TO_FM)
            return
        added = [name for name in targeted if name not in self.topology]
        removed = self._removed_nodes(targeted, target)
        if removed and added:
            raise _validation(ADD_AND_REMOVE_TOGETHER)
        if removed:
            # SU.CheckRequiredPorts: TCP 445 on every machine being removed must answer.
            for name in removed:
                node = self.fm.nodes.get(name)  # no FM entry: nothing says where the machine is
                if node is None or not node.machine_reachable:
                    raise _validation(PORTS_UNREACHABLE)
        if added:
            # Outside gMSA clusters a consistent UOS/FM never accepts new nodes in the config:
            # they must be joined with AddNode.ps1 first.
            raise _validation(ADDED_NODE_NOT_KNOWN_TO_FM)

    def _removed_nodes(self, targeted: dict[str, Any], target: dict[str, Any]) -> list[str]:
        """SV.GetRemovedNodes: each node the UOS knows that the target drops must be named in
        NodesToBeRemoved, and every name there must be such a node (no stale names)."""
        listed = nodes_to_be_removed(target) or []
        removed = []
        for name in self.topology:
            if name not in targeted:
                if name not in listed:
                    raise _validation(NOT_ALL_REMOVED_NODES_LISTED)
                removed.append(name)
        if nodes_to_be_removed(target) is not None and any(name not in removed for name in listed):
            raise _validation(UNKNOWN_NODES_TO_REMOVE)
        return removed

    # -- what other parties do --------------------------------------------------------------

    def run_other_upgrade(self, ticks: int) -> None:
        """Someone else's upgrade that cannot be interrupted (a code upgrade, say) runs now."""
        run = Orchestration(target=copy.deepcopy(self.current), interruptible=False)
        run.target["clusterConfigurationVersion"] = "other"
        self.pending = run
        self._start_manifest_upgrade(run)
        self.upgrade_ticks_other = ticks

    # -- the orchestration, one tick at a time ------------------------------------------------

    def tick(self) -> None:
        run = self.pending
        if run is None:
            return
        run.ticks += 1
        if run.phase == "deactivate" and run.ticks >= self.lookup_ticks:
            self._deactivate_nodes_to_be_removed(run)
        elif run.phase == "wait_disabled":
            self._poll_deactivated_nodes(run)
        elif run.phase == "upgrade":
            needed = self.upgrade_ticks if run.interruptible else self.upgrade_ticks_other
            if run.ticks >= needed:
                self._finish(run)

    def _deactivate_nodes_to_be_removed(self, run: Orchestration) -> None:
        """UO.DeactivateNodesToBeRemovedAsync: each node is looked up with GetNodeListAsync(name)
        and deactivated with intent RemoveNode unless IsDisablingNodeValid finds it Disabled,
        Disabling or Invalid. When the lookup finds nothing, `node.NodeStatus` throws;
        PerformDisablingNodeOperationsAsync turns that into false and OrchestrateUpgradeAsync
        aborts: Pending = null, Reset(), nothing in Details ("... Aborting upgrade" is traced)."""
        for name in run.removing:
            node = self.fm.visible(name)
            if node is None:
                self._stop(run, ABORTED)
                return
            if node.status not in ("Disabled", "Disabling", "Invalid"):
                self.fm.deactivate(name, "RemoveNode")
        self._enter(run, "wait_disabled")

    def _poll_deactivated_nodes(self, run: Orchestration) -> None:
        """UO.PollDeactivatedNodesAsync: done when no node to be removed that the node list
        returns is other than Disabled or Invalid; a Down node blocks it. On the timeout
        SetTargetNodeConfigForRemovedNodesAsync returns false and the orchestration ends without
        a word (a NullReferenceException on Pending, only traced)."""
        listed = [node for node in self.fm.query() if node.name in run.removing]
        if all(node.status in ("Disabled", "Invalid") for node in listed):
            # SetTargetNodeConfigForRemovedNodesAsync: the nodes leave Topology (persisted), then
            # a Simple upgrade builds the manifest without them.
            for name in run.removing:
                self.topology.pop(name, None)
            self._start_manifest_upgrade(run)
        elif run.ticks >= self.deactivation_timeout_ticks:
            self._stop(run, "timed out waiting for nodes to be deactivated")

    def _start_manifest_upgrade(self, run: Orchestration) -> None:
        self._enter(run, "upgrade")
        self.manifest_version += 1
        self.fabric_upgrade_state = "RollingForwardInProgress"

    def _finish(self, run: Orchestration) -> None:
        self.fabric_upgrade_state = self.upgrade_outcome
        if self.upgrade_outcome != "RollingForwardCompleted" or not run.interruptible:
            # Simple and AutoScale upgrades that roll back return Current (no retry) and the
            # orchestrator clears Details (UO: ClusterUpgradeRolledBackOrFailed, then
            # PersistConfigUpgradeErrorDetailsAsync(null)).
            self._stop(run, self.fabric_upgrade_state)
            return
        self._make_current(run.target)  # ClusterUpgradeCompleted: Current = Pending
        for name in run.removing:
            node = self.fm.nodes.get(name)
            if node is None:
                continue
            # The manifest no longer lists the node and NodesToBeRemoved names it, so
            # FabricDeployer's update turns into RemoveNodeConfig on its machine and uninstalls
            # Fabric (fabricdeployer DeploymentOperation / RemoveNodeConfigOperation): Down.
            uninstalled = self.uninstalls_removed_nodes and node.machine_reachable
            if uninstalled and node.status not in ("Removed", "Unknown"):
                self.fm.host_stopped(name)
            if self.removes_node_state:
                try:  # UO.RemoveNodeStateAsync: best effort, failures only traced
                    self.fm.remove_node_state(name)
                except EmulatedFabricError:
                    pass
        self._stop(run, "completed")

    def _make_current(self, target: dict[str, Any]) -> None:
        stored = copy.deepcopy(target)
        stored.pop("nodes", None)
        self.current = stored

    def _enter(self, run: Orchestration, phase: str) -> None:
        run.phase, run.ticks = phase, 0
        run.log.append(phase)

    def _stop(self, run: Orchestration, outcome: str) -> None:
        self.pending = None
        self.history.append(run)
        run.log.append(outcome)
