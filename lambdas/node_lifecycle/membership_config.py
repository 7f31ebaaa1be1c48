"""Membership changes as cluster configuration upgrades, as the standalone Upgrade
Orchestration Service (UOS) carries them out (microsoft/service-fabric, FabricUOS/exe and
Microsoft.ServiceFabric.DeploymentManager/Common/StandaloneSettingsValidator.cs):

- a drain's removal upgrade drops the node from `nodes` and names it alone in NodesToBeRemoved,
  while the node is Disabled and its machine still runs: the UOS checks the machine answers on
  its ports, deactivates the node itself (skipped when it is Disabled already), upgrades, then
  removes the node state itself;
- a join's registration upgrade follows AddNode.ps1: until it runs, the Failover Manager knows a
  node the UOS does not, and the UOS refuses every upgrade whose `nodes` differ from the FM's
  list, removals included. A removal refused so (a join that failed before its registration,
  then drained) registers the FM's nodes first and is started again once that upgrade is done.

Only one upgrade runs at a time: a start that finds one running says WAIT_FOR_UPGRADE and the
caller starts again later. The start call waits for the whole orchestration, so it usually
outlives the gateway's timeout while the upgrade goes on; then the status decides (see
poll_configuration_upgrade), and the start is never resent blindly. Every refusal arrives as
FABRIC_E_CONFIG_UPGRADE_FAILED with the reason in the message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sf_rest import (
    ConfigurationUpgradeRefused,
    FabricError,
    NodeStatus,
    ServiceFabricClient,
    UpgradeHealthPolicy,
    UpgradeInProgressError,
)
from sf_rest.cluster_config import for_registration, for_removal, node_names, nodes_to_be_removed
from sf_rest.errors import CONNECTION_LOST, OUTCOME_UNKNOWN, READ_TIMEOUT, UNREGISTERED_NODES_TEXT

from .errors import ConfigurationUpgradeFailed, NodeInWrongState
from .interfaces import AutoScalingLifecycle, LifecycleHook
from .lifecycle import record_heartbeat
from .node_stage import NodeStage, describe, node_stage, require_removable
from .results import ConfigurationChange, NodeRemovalCheck, Outcome, WaitStatus

# Failures after which the UOS may be carrying the upgrade out anyway.
_UNCLEAR = OUTCOME_UNKNOWN | {READ_TIMEOUT, CONNECTION_LOST}
# After a start whose answer was lost, how long the status may show no trace of the upgrade
# before we call it not started. For a removal the UOS first deactivates the node (ours is
# Disabled already) and waits up to 10 minutes for Disabled (FabricPollDeactivatedNodes-
# TimeoutInMinutes) before the manifest upgrade the status reports.
DEFAULT_START_GRACE_SECONDS = 900.0
REMOVAL, REGISTRATION = "removal", "registration"


def start_configuration_removal(
    client: ServiceFabricClient,
    node_name: str,
    *,
    now: float,
    policy: UpgradeHealthPolicy | None = None,
) -> ConfigurationChange:
    """Start the upgrade that removes one Disabled node; ALREADY_DONE when the cluster no
    longer lists it (an earlier run's upgrade removed it)."""
    node = client.get_node_info(node_name)
    config = client.get_cluster_configuration()
    if node_stage(node) == NodeStage.REMOVED:
        if node_name in node_names(config):
            raise NodeInWrongState(f"{node_name} is {describe(node)} but still in the configuration")
        return ConfigurationChange(node_name, Outcome.ALREADY_DONE, kind=REMOVAL)
    require_removable(node)
    if node_name in nodes_to_be_removed(config):
        return _adopt_removal(client, node_name, node.status == NodeStatus.DOWN, now=now)
    if node.status == NodeStatus.DOWN:
        raise NodeInWrongState(
            f"not removing {node_name}: it is Down. The UOS deactivates each node it removes and "
            "waits for Disabled, which a Down node never reaches; start FabricHostSvc on its "
            "machine again, or see docs/day-2.md, 'Lost machines'"
        )
    if not node.is_deactivated:
        raise NodeInWrongState(
            f"not removing {node_name}: it is {describe(node)}; deactivate it (RemoveNode) and "
            "wait for Disabled first"
        )
    try:
        target = for_removal(config, node_name)
    except ValueError as err:
        raise NodeInWrongState(str(err)) from err
    try:
        return _start(client, node_name, REMOVAL, target, now=now, policy=policy)
    except ConfigurationUpgradeFailed as err:
        if UNREGISTERED_NODES_TEXT not in str(err):
            raise
    # The UOS does not know some node AddNode.ps1 joined (ours, if its join failed before the
    # registration): register the FM's nodes as they are, then remove when that is done.
    # Either way the removal waits: for the registration just started, or for the upgrade that
    # kept it from starting.
    registration = _start(client, node_name, REGISTRATION, for_registration(config), now=now, policy=policy)
    detail = registration.detail if registration.outcome == Outcome.WAIT_FOR_UPGRADE else (
        f"the UOS refused the removal until nodes joined by AddNode.ps1 are registered; started "
        f"that registration (version {registration.target_version}); the removal follows it"
    )
    return ConfigurationChange(node_name, Outcome.WAIT_FOR_UPGRADE, kind=REMOVAL, detail=detail)


def _adopt_removal(
    client: ServiceFabricClient, node_name: str, down: bool, *, now: float
) -> ConfigurationChange:
    """The current configuration names the node in NodesToBeRemoved: a removal of it was
    started before (this step re-run after a crash, or an operator's drain). The UOS makes a
    removal's target current at once, so a second start would be a second orchestration: watch
    the first instead. A node it left Down has had its manifest upgrade (FabricDeployer
    uninstalls Fabric on the machine then): only the node state is left to remove."""
    if down:
        detail = "an earlier removal upgrade left it Down; its node state is left to remove"
        return ConfigurationChange(node_name, Outcome.ALREADY_DONE, kind=REMOVAL, detail=detail)
    status = client.get_cluster_configuration_upgrade_status()
    return ConfigurationChange(
        node_name,
        Outcome.REQUESTED,
        status.config_version,
        "an earlier start of this removal is under way; watching it, not starting another",
        REMOVAL,
        False,
        now,
        status.progress_status - (1 if status.is_running else 0),
    )


def start_configuration_registration(
    client: ServiceFabricClient,
    node_name: str,
    *,
    now: float,
    policy: UpgradeHealthPolicy | None = None,
) -> ConfigurationChange:
    """Start the upgrade that registers a node AddNode.ps1 joined: the configuration as the
    cluster lists it (the FM's nodes), a new version, no stale NodesToBeRemoved. Always sent:
    GetClusterConfiguration lists the node already, so nothing there says the UOS knows it."""
    node = client.get_node_info(node_name)
    if node is None or node.status != NodeStatus.UP:
        raise NodeInWrongState(f"not registering {node_name}: it is {describe(node)}, not Up")
    config = client.get_cluster_configuration()
    if node_name not in node_names(config):
        raise NodeInWrongState(f"{node_name} is Up but the cluster configuration does not list it")
    return _start(client, node_name, REGISTRATION, for_registration(config), now=now, policy=policy)


def _start(
    client: ServiceFabricClient,
    node_name: str,
    kind: str,
    target: Mapping[str, Any],
    *,
    now: float,
    policy: UpgradeHealthPolicy | None,
) -> ConfigurationChange:
    running = client.get_cluster_configuration_upgrade_status()
    if running.is_running:
        detail = f"{running.upgrade_state} at version {running.config_version}"
        return ConfigurationChange(node_name, Outcome.WAIT_FOR_UPGRADE, kind=kind, detail=detail)
    version = str(target.get("clusterConfigurationVersion", ""))

    def started(confirmed: bool, detail: str) -> ConfigurationChange:
        return ConfigurationChange(
            node_name, Outcome.REQUESTED, version, detail, kind, confirmed, now,
            running.progress_status,
        )

    try:
        client.start_cluster_configuration_upgrade(target, policy)
    except UpgradeInProgressError as err:  # one began since we looked (or is still validating)
        return ConfigurationChange(node_name, Outcome.WAIT_FOR_UPGRADE, kind=kind, detail=err.message)
    except ConfigurationUpgradeRefused as err:
        raise ConfigurationUpgradeFailed(
            f"the cluster refused the {kind} upgrade to {version} for {node_name}: {err.message}"
        ) from err
    except FabricError as err:
        if err.code not in _UNCLEAR:
            raise
        return started(False, f"no answer in time ({err.code}); the upgrade may be under way")
    return started(True, "the orchestration ended")


def poll_configuration_upgrade(
    client: ServiceFabricClient,
    change: Mapping[str, Any],
    *,
    now: float,
    grace_seconds: float = DEFAULT_START_GRACE_SECONDS,
    lifecycle: AutoScalingLifecycle | None = None,
    hook: LifecycleHook | None = None,
) -> WaitStatus:
    """One look at our upgrade (`change`: a started ConfigurationChange as a dict).

    The status shows the Cluster Manager's manifest upgrade (UpgradeState, and ProgressStatus,
    its target manifest version, one more per upgrade) and the UOS's current configuration
    version. A registration is done when that version is its target. A removal makes its
    target current at once, before the node is even deactivated, so it is done only once a
    manifest upgrade newer than the one before our start has rolled forward.

    Raises when it can no longer get there: that manifest upgrade rolled back, or the start
    was answered (the orchestration has ended) or the grace period passed with no upgrade to
    show for it (refused, or aborted without a word)."""
    heartbeat = record_heartbeat(lifecycle, hook)
    status = client.get_cluster_configuration_upgrade_status()
    target, kind = str(change["target_version"]), str(change.get("kind") or "")
    state, version = status.upgrade_state, status.config_version
    manifest_moved = status.progress_status > int(change.get("manifest_before") or 0)
    at_target = version == target and (kind != REMOVAL or manifest_moved)
    if at_target and status.is_completed:
        return WaitStatus(True, state, f"version {target} is current, {state}", heartbeat)
    if status.is_running:
        detail = f"{state} (manifest {status.progress_status}); configuration {version}, target {target}"
        return WaitStatus(False, state, detail, heartbeat)
    if manifest_moved and status.has_failed:
        reason = f": {status.details}" if status.details else ""
        raise ConfigurationUpgradeFailed(
            f"the {kind} upgrade to {target} ended {state}{reason}; the cluster is at {version}"
        )
    started = change.get("started_at")
    waited = now - float(now if started is None else started)
    if change.get("confirmed") or waited >= grace_seconds:
        raise ConfigurationUpgradeFailed(
            f"the {kind} upgrade to {target} ended without upgrading the cluster (version "
            f"{version}, {state}, manifest {status.progress_status}). The UOS ends a removal "
            "without a word when it cannot find or deactivate a node to be removed, or when the "
            "node does not reach Disabled in 10 minutes"
        )
    detail = (
        f"{state} at version {version}; waiting {waited:.0f}/{grace_seconds:.0f} s for the "
        f"upgrade to {target} to show"
    )
    return WaitStatus(False, state, detail, heartbeat)


def poll_running_upgrade(
    client: ServiceFabricClient,
    *,
    lifecycle: AutoScalingLifecycle | None = None,
    hook: LifecycleHook | None = None,
) -> WaitStatus:
    """One look at someone else's upgrade: done once none runs."""
    heartbeat = record_heartbeat(lifecycle, hook)
    status = client.get_cluster_configuration_upgrade_status()
    detail = f"{status.upgrade_state} at version {status.config_version}"
    return WaitStatus(not status.is_running, status.upgrade_state, detail, heartbeat)


def check_node_removed(client: ServiceFabricClient, node_name: str) -> NodeRemovalCheck:
    """After the removal upgrade: the UOS removes the node state itself, best effort
    (UpgradeOrchestrator.RemoveNodeStateAsync only traces a failure). A node still listed
    needs the clean-up: stop its host, wait Down, RemoveNodeState."""
    node = client.get_node_info(node_name)
    if node_stage(node) == NodeStage.REMOVED:
        return NodeRemovalCheck(node_name, removed=True, status=describe(node))
    return NodeRemovalCheck(
        node_name, removed=False, status=describe(node), down=node.status == NodeStatus.DOWN
    )

