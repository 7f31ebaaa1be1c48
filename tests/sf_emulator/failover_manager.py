"""The Failover Manager's view of the nodes, as the HTTP gateway shows it.

Each behaviour names its source in the open-source runtime (microsoft/service-fabric, read at
its newest snapshot) or Microsoft's REST reference; where no source says, the comment says so
and the behaviour is a risk (listed in docs/testing.md, "What the Service Fabric emulator is
based on").

Time is counted in ticks (one per gateway request, see cluster.py), so tests are deterministic.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

# DeactivationIntent, weakest first (ServiceModel/reliability/failover/NodeDeactivationIntent.h).
# A higher intent replaces the one in force and restarts the safety checks; a lower or equal one
# is ignored with success (Reliability/Failover/fm/NodeDeactivationInfo.cpp, AddBatch).
INTENT_ORDER = ("Pause", "Restart", "RemoveData", "RemoveNode")
ALL_INTENTS = INTENT_ORDER
# The REST reference's DeactivationIntent model lists Pause, Restart and RemoveData, but the
# gateway parses RemoveNode too (Common/EnumJsonSerializer.h, NodesHandler::DeactivateNode);
# tests use this to play an older or stricter gateway.
DOCUMENTED_INTENTS = ("Pause", "Restart", "RemoveData")

# NodeStatusFilter "default": every node but Unknown and Removed
# (Reliability/Failover/fm/QueryHelper.cpp, FMQueryHelper::IsMatch).
HIDDEN_BY_DEFAULT = ("Unknown", "Removed")

# How long a seed must have been up before the seed quorum check counts it
# (Reliability/Failover/fm/DeactivateNodesContext.cpp, CheckSeedNodes: seedNodeWaitInterval =
# (LeaseDuration + ArbitrationTimeout) x SeedNodeWaitSafetyFactor, and a seed counts once
# DateTime::Now() > NodeUpTime + seedNodeWaitInterval): (30 s + 30 s) x 3 = 180 s with the
# defaults (Federation/FederationConfig.h LeaseDuration 30 s, ArbitrationTimeout 30 s;
# Reliability/Failover/common/FailoverConfig.h SeedNodeWaitSafetyFactor 3).
SEED_WAIT_SECONDS = 180.0

# DateTime ticks (100 ns since 0001-01-01) at the Unix epoch, and DateTime::Zero as the gateway
# writes it (Common/DateTime.cpp, ToIsoString: ticks 0 is "0001-01-01T00:00:00.000Z"; the gateway
# serializes with DateTimeInIsoFormat, httpgateway/Utility.h SERIALIZER_FLAGS).
EPOCH_TICKS = 621_355_968_000_000_000
DATETIME_ZERO = "0001-01-01T00:00:00.000Z"


def iso_time(seconds: float | None) -> str:
    """A DateTime as the gateway writes it (DateTime::ToIsoString, milliseconds, Z); None or 0 is
    DateTime::Zero. The emulator's clock is read as epoch seconds."""
    if not seconds:
        return DATETIME_ZERO
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(seconds * 1000) % 1000:03d}Z"


def node_id(name: str) -> str:
    """The node's Federation::NodeId as NodeQueryResult serializes it: a LargeInteger in hex, high
    part without leading zeros (Common/LargeInteger.cpp, WriteLargeInteger_To; JSON:
    Common/JsonReaderWriter.h, Visit(NodeId) writes {"Id": ...}). The runtime derives it from the
    node name (ServiceModel/federation/NodeIdGenerator.cpp, GenerateFromString); the emulator takes
    the MD5 of the name and leaves out the generator's suffix bit mixing (a risk only for a test
    comparing Ids with a real cluster's: none does)."""
    digest = hashlib.md5(name.encode()).digest()
    high, low = int.from_bytes(digest[:8], "big"), int.from_bytes(digest[8:], "big")
    return f"{high:x}{low:016x}" if high else f"{low:x}"


class EmulatedFabricError(Exception):
    """A failure as the gateway returns it: HTTP status and a FabricError body."""

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
    host_running: bool = True  # FabricHostSvc runs on the node's machine
    machine_reachable: bool = True  # the machine answers on TCP 445 (SMB), which the UOS checks
    stuck_in_safety_check: bool = False
    ticks_until_disabled: int = 0
    down_since: float | None = None
    # Replicas the node hosts. A Restart deactivation (or stronger) ends with them closed or moved
    # off the node, and activation lets the Cluster Resource Manager place them again: the REST
    # reference's DeactivationIntent ("Restart: ... the node will be restarted after a short period
    # of time ... Service Fabric does not restart the node") and the FM's safety checks
    # (Reliability/Failover/fm/DeactivateNodesContext.cpp: EnsureSafeCloseReplicas,
    # EnsureAvailability, EnsurePartitionQuorum). The count itself is the emulator's: 4 each.
    replicas: int = 4
    # When the node's host last came up, on the cluster's clock (NodeUpTime; the seed quorum check
    # waits SEED_WAIT_SECONDS after it); None: up since before the emulator's time began.
    up_since: float | None = None
    pending_safety_checks: tuple[str, ...] = ()
    # The FM's NodeInfo for the node's current instance (Reliability/Failover/fm/NodeCache.cpp):
    # NodeUp sets NodeUpTime to now (and NodeDownTime to now when the FM still had the previous
    # instance up), NodeDown sets NodeDownTime; both stay DateTime::Zero (0.0) until then.
    node_up_at: float = 0.0
    node_down_at: float = 0.0
    # NodeInstance.InstanceId: the node's host takes DateTime::Now().Ticks each time it starts, one
    # more than the last if the clock has not moved past it (Federation/SiteNode.cpp,
    # RetrieveInstanceID). Set by the FailoverManager when the node joins or its host starts.
    instance_id: int = 0
    # Stopped through the Fault Analysis Service's StopNode API (REST: StartNodeTransition with
    # NodeTransitionType Stop); nothing in the platform calls it, so it stays False.
    stopped_by_api: bool = False

    def to_json(self, now: float, *, code_version: str = "", config_version: str = "") -> dict[str, Any]:
        """NodeInfo (REST reference, sfclient-model-nodeinfo), the fields NodeQueryResult always
        serializes (ServiceModel/NodeQueryResult.h, BEGIN_JSON_SERIALIZABLE_PROPERTIES) but
        NodeUpTimeInSeconds; int64 and uint64 values are written as strings
        (Common/JsonReaderWriter.h, Visit(__int64) and Visit(unsigned __int64)). CodeVersion and
        ConfigVersion are the node's fabric version (QueryHelper.cpp, GetNodesList:
        VersionInstance.Version); the emulator gives every node the cluster's current one, also
        during a code upgrade (a risk: the runtime shows each node's own until its domain is done)."""
        down = int(now - self.down_since) if self.down_since is not None else 0
        return {
            "Name": self.name,
            "IpAddressOrFQDN": self.ip,
            "Type": self.node_type,
            "CodeVersion": code_version,
            "ConfigVersion": config_version,
            "NodeStatus": self.status,
            "IsSeedNode": self.is_seed,
            "UpgradeDomain": self.upgrade_domain,
            "FaultDomain": self.fault_domain,
            "HealthState": self.health_state,
            "NodeDeactivationInfo": {
                "NodeDeactivationIntent": self.deactivation_intent,
                "NodeDeactivationStatus": self.deactivation_status,
                "NodeDeactivationTask": [],
                # SafetyCheckWrapper list (REST reference, sfclient-model-safetycheckwrapper).
                "PendingSafetyChecks": [{"SafetyCheck": {"Kind": kind}} for kind in self.pending_safety_checks],
            },
            "Id": {"Id": node_id(self.name)},
            "InstanceId": str(self.instance_id),
            # True only for a Down node the Fault Analysis Service stopped through its StopNode API:
            # the FM's rows carry false (Reliability/Failover/fm/QueryHelper.cpp, GetNodesList) and
            # the gateway's merge sets it for a Down node the FAS lists as stopped
            # (query/GetNodeListQuerySpecification.cpp, OnParallelQueryExecutionComplete). A
            # machine rebooting, or FabricHostSvc stopped, is Down with IsStopped false.
            "IsStopped": self.status == "Down" and self.stopped_by_api,
            "NodeDownTimeInSeconds": str(down),
            "NodeUpAt": iso_time(self.node_up_at),
            "NodeDownAt": iso_time(self.node_down_at),
        }

    @property
    def health_state(self) -> str:
        """The node's health as the FM reports it to the Health Manager
        (Reliability/Failover/fm/HealthReportFactory.cpp, GenerateNodeInfoHealthReport and
        GenerateNodeDeactivationHealthReport; states in ServiceModel/HealthReport.cpp): a node that
        is not up is FM_NodeDown or FM_SeedNodeDown, both Error; an up node, deactivated or not,
        FM_NodeUp, Ok; a deactivation stuck in its safety checks FM_NodeDeactivateStuck, Warning.
        The FM raises "stuck" only after a configured time; the emulator raises it as soon as a
        test holds the checks (stuck_in_safety_check)."""
        if self.status in ("Down", "Unknown", "Invalid"):
            return "Error"
        if self.stuck_in_safety_check and self.deactivation_status == "SafetyCheckInProgress":
            return "Warning"
        return "Ok"

    def config_entry(self) -> dict[str, str]:
        """How GetClusterConfiguration lists the node: built from the FM's NodeInfo
        (UpgradeOrchestrationMessageProcessor.ProcessGetClusterConfigurationAsync)."""
        return {
            "nodeName": self.name,
            "iPAddress": self.ip,
            "nodeTypeRef": self.node_type,
            "faultDomain": self.fault_domain,
            "upgradeDomain": self.upgrade_domain,
        }


# HTTP statuses: Management/HttpTransport/HttpUtil.cpp, ErrorCodeToHttpStatus.
def node_not_found(name: str) -> EmulatedFabricError:
    return EmulatedFabricError(404, "FABRIC_E_NODE_NOT_FOUND", f"Node {name} not found")


class FailoverManager:
    """The node list and what Deactivate, Activate and RemoveNodeState do to it."""

    def __init__(
        self, clock: Callable[[], float], manifest_nodes: Callable[[], dict[str, dict[str, Any]]]
    ) -> None:
        self.clock = clock
        self.manifest_nodes = manifest_nodes
        self.nodes: dict[str, EmulatedNode] = {}
        self.deactivation_ticks = 2
        self.accepted_intents: tuple[str, ...] = ALL_INTENTS
        # Seconds (on the clock) a seed must have been up before the seed quorum check counts it.
        self.seed_wait_seconds = SEED_WAIT_SECONDS
        self.ticks = 0
        # Node name -> ticks until the FM hears from the new instance of a host that restarted
        # before the FM saw it go (host_restarted, scheduled by EmulatedCluster.restart_host).
        self.restarts_unseen: dict[str, int] = {}

    # -- queries ----------------------------------------------------------------------------

    def query(self, name: str | None = None, status_filter: str = "default") -> list[EmulatedNode]:
        """GetNodeList as the gateway runs it (query/GetNodeListQuerySpecification.cpp,
        OnParallelQueryExecutionComplete): the FM's rows that pass the status filter, then, for
        the default or `all` filter, a row for every node the cluster manifest lists that the
        FM did not return, with NodeStatus Invalid (ClusterManagerReplica::GetNodes,
        NodeQueryResult's CM-only constructor). The manifest's nodes are the UOS's topology."""
        wanted = status_filter.lower() or "default"
        rows = []
        for node in self.nodes.values():
            if wanted == "default":
                passes = node.status not in HIDDEN_BY_DEFAULT
            else:
                passes = wanted == "all" or node.status.lower() == wanted
            if passes:
                rows.append(node)
        if wanted in ("default", "all"):
            returned = {node.name for node in rows}
            for entry in self.manifest_nodes().values():
                if entry["nodeName"] not in returned:
                    rows.append(_manifest_row(entry))
        rows.sort(key=lambda node: node.name)
        return [node for node in rows if name is None or node.name == name]

    def visible(self, name: str) -> EmulatedNode | None:
        """GET /Nodes/{name}: the query with the name and the default filter; an empty answer
        is HTTP 204 with no body (httpgateway/NodesHandler.cpp, OnGetNodeByNameComplete)."""
        rows = self.query(name)
        return rows[0] if rows else None

    # -- time -------------------------------------------------------------------------------

    def tick(self) -> None:
        """Safety checks finish after `deactivation_ticks` ticks unless a test holds them
        (a stuck check is the field failure of service-fabric-issues #836)."""
        self.ticks += 1
        for name, ticks in list(self.restarts_unseen.items()):
            if ticks <= 1:
                del self.restarts_unseen[name]
                self.host_restarted(name)
            else:
                self.restarts_unseen[name] = ticks - 1
        for node in self.nodes.values():
            checking = node.deactivation_status == "SafetyCheckInProgress"
            if not checking or node.stuck_in_safety_check:
                continue
            # The FM re-runs a deactivation's checks on every pass of its background context, so
            # a seed blocked for quorum goes on once enough seeds count as up again.
            node.pending_safety_checks = self._seed_quorum_checks(node)
            if node.pending_safety_checks:
                continue
            node.ticks_until_disabled -= 1
            if node.ticks_until_disabled <= 0:
                node.deactivation_status = "Completed"
                if node.status == "Disabling":
                    node.status = "Disabled"
                    if node.deactivation_intent in INTENT_ORDER[1:]:
                        node.replicas = 0  # closed for the restart, or moved off for good

    def _seed_quorum_checks(self, node: EmulatedNode) -> tuple[str, ...]:
        """DeactivateNodesContext::CheckSeedNodes: deactivating a seed (any intent but
        RemoveNode, which the UOS handles) waits with the safety check EnsureSeedNodeQuorum while
        `upCount - (voters / 2 + 1) <= 0`, where upCount counts the seeds that are up, not pending
        close and up for longer than the seed wait interval. The candidate itself counts as up
        while it is; a seed being deactivated (Disabling, Disabled) is taken as pending close."""
        if not node.is_seed or node.deactivation_intent == "RemoveNode" or node.status not in ("Up", "Disabling"):
            return ()
        seeds = [n for n in self.nodes.values() if n.is_seed]
        up = sum(
            1 for n in seeds
            if (n.status == "Up" or n is node) and (n is node or n.deactivation_status == "None")
            and (n.up_since is None or self.clock() - n.up_since > self.seed_wait_seconds)
        )  # fmt: skip
        return ("EnsureSeedNodeQuorum",) if up - (len(seeds) // 2 + 1) <= 0 else ()

    # -- operations -------------------------------------------------------------------------

    def deactivate(self, name: str, intent: str) -> None:
        """EntreeService DeactivateNode -> FM NodeCache::DeactivateNodes."""
        if intent not in self.accepted_intents:
            # NodeDeactivationIntent::FromPublic refuses Invalid and unknown values.
            raise EmulatedFabricError(400, "E_INVALIDARG", f"DeactivationIntent {intent}")
        node = self.nodes.get(name)
        if node is None:
            # GetLockedNode(createNewEntry=true): an unknown name gets a placeholder entry,
            # which the node list shows as Unknown (so the default filter hides it).
            node = EmulatedNode(name, "", "", False, "", "", status="Unknown")
            self.nodes[name] = node
        if node.deactivation_intent in INTENT_ORDER and INTENT_ORDER.index(
            intent
        ) <= INTENT_ORDER.index(node.deactivation_intent):
            return
        node.deactivation_intent = intent
        node.deactivation_status = "SafetyCheckInProgress"
        node.ticks_until_disabled = self.deactivation_ticks
        if node.status in ("Down", "Unknown", "Removed"):
            # A node that is not up stays Down; Pause/Restart complete at once, RemoveData and
            # RemoveNode after their safety checks (DeactivateNodes, UpdateNodeDeactivationStatus).
            if intent in ("Pause", "Restart"):
                node.deactivation_status = "Completed"
            return
        node.status = "Disabling"
        node.pending_safety_checks = self._seed_quorum_checks(node)
        if self.deactivation_ticks <= 0 and not node.stuck_in_safety_check and not node.pending_safety_checks:
            node.status, node.deactivation_status = "Disabled", "Completed"

    def activate(self, name: str) -> None:
        node = self.nodes.get(name)
        if node is None:
            return  # RemoveNodeDeactivation: no batch to remove is a success
        node.deactivation_intent, node.deactivation_status = "Invalid", "None"
        node.pending_safety_checks = ()
        if node.status in ("Disabling", "Disabled"):
            node.status = "Up"
            node.replicas = 4  # placed again by the Cluster Resource Manager (count: the emulator's)

    def remove_node_state(self, name: str) -> None:
        """Allowed only for a node that is not up (FailoverManager.cpp,
        NodeStateRemovedAsyncMessageHandler): FABRIC_E_NODE_IS_UP (HTTP 400) for Up, Disabling
        or Disabled; FABRIC_E_NODE_NOT_FOUND (404) for an unknown name; a second call succeeds."""
        node = self.nodes.get(name)
        if node is None:
            raise node_not_found(name)
        if node.status == "Removed":
            return
        if node.status not in ("Down", "Unknown"):
            raise EmulatedFabricError(400, "FABRIC_E_NODE_IS_UP", f"Node {name} is up")
        node.status = "Removed"

    # -- what happens on the machines -------------------------------------------------------

    def host_stopped(self, name: str) -> None:
        node = self.nodes[name]
        node.host_running = False
        if node.status not in HIDDEN_BY_DEFAULT:
            node.status = "Down"
            node.down_since = node.node_down_at = self.clock()  # NodeCache::NodeDown

    def host_started(self, name: str) -> None:
        node = self.nodes[name]
        node.host_running = True
        node.down_since = None
        self.started(node)
        if node.status == "Down":
            # A node deactivated before it went down comes back Disabled, its deactivation still
            # in force (NodeDeactivationInfo is kept by the FM's NodeInfo across restarts); only
            # Activate (RemoveNodeDeactivation) makes it Up. A restarted node opens no replicas
            # while it stays deactivated.
            node.status = "Up" if node.deactivation_intent == "Invalid" else "Disabled"
            node.up_since = self.clock()


    def started(self, node: EmulatedNode) -> None:
        """A new instance of the node's host came up (Federation/SiteNode.cpp, RetrieveInstanceID;
        NodeCache::NodeUp: NodeUpTime now, and NodeDownTime now when the FM still had the last
        instance up)."""
        now = self.clock()
        if node.instance_id and node.status not in ("Down", "Unknown", "Removed", "Invalid"):
            node.node_down_at = now
        node.instance_id = max(node.instance_id + 1, EPOCH_TICKS + int(now * 10_000_000))
        node.node_up_at = now

    def host_restarted(self, name: str) -> None:
        """The machine rebooted and the host is back before the FM saw the last instance go down
        (its lease had not expired): NodeCache::NodeUp takes the new, higher instance over the one
        it had up, with no Down in between; the deactivation is kept as on any NodeUp."""
        node = self.nodes[name]
        node.host_running, node.down_since = True, None
        self.started(node)


def _manifest_row(entry: dict[str, Any]) -> EmulatedNode:
    return EmulatedNode(
        str(entry["nodeName"]),
        str(entry.get("iPAddress", "")),
        str(entry.get("nodeTypeRef", "")),
        bool(entry.get("isSeedNode", False)),
        str(entry.get("faultDomain", "")),
        str(entry.get("upgradeDomain", "")),
        status="Invalid",
    )
