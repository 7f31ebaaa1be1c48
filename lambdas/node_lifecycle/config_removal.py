"""The last Fabric step of a drain: a configuration upgrade that takes the node out.

A standalone cluster keeps its membership in the cluster configuration; a node that
is only RemoveNodeState'd stays in `nodes`, and later upgrades trip over it. Only one
upgrade runs at a time, so a start that finds one running says so and the caller
waits (poll_configuration_upgrade) and starts again.
"""

from __future__ import annotations

from sf_rest import (
    FabricError,
    ServiceFabricClient,
    UpgradeHealthPolicy,
    UpgradeInProgressError,
    UpgradeState,
)
from sf_rest.cluster_config import remove_node
from sf_rest.errors import CONNECTION_LOST, OUTCOME_UNKNOWN, READ_TIMEOUT

from .errors import ConfigurationUpgradeFailed, NodeInWrongState
from .interfaces import AutoScalingLifecycle, LifecycleHook
from .lifecycle import record_heartbeat
from .node_stage import NodeStage, describe, node_stage, require_removable
from .results import ConfigurationRemoval, Outcome, WaitStatus

# Failures after which the gateway may have started the upgrade anyway.
_UNCLEAR = OUTCOME_UNKNOWN | {READ_TIMEOUT, CONNECTION_LOST}
_ROLLING_BACK = {UpgradeState.ROLLING_BACK_IN_PROGRESS, UpgradeState.ROLLING_BACK_COMPLETED}


def start_configuration_removal(
    client: ServiceFabricClient,
    node_name: str,
    *,
    policy: UpgradeHealthPolicy | None = None,
) -> ConfigurationRemoval:
    """Start the upgrade that drops the node from `nodes` and lists it in NodesToBeRemoved.

    ALREADY_DONE when the configuration has no more to change; WAIT_FOR_UPGRADE while
    any upgrade runs (possibly ours, from a run that crashed after starting it).
    """
    running = client.get_cluster_configuration_upgrade_status()
    if running.is_running:
        detail = f"{running.upgrade_state} to version {running.config_version}"
        return ConfigurationRemoval(node_name, Outcome.WAIT_FOR_UPGRADE, detail=detail)
    config = client.get_cluster_configuration()
    target = remove_node(config, node_name)
    if target == config:
        return ConfigurationRemoval(node_name, Outcome.ALREADY_DONE)
    node = client.get_node_info(node_name)
    require_removable(node)
    if node_stage(node) != NodeStage.REMOVED:
        raise NodeInWrongState(
            f"not removing {node_name} from the cluster configuration: it is "
            f"{describe(node)}; its node state must be removed first"
        )
    version = str(target.get("clusterConfigurationVersion", ""))
    try:
        client.start_cluster_configuration_upgrade(target, policy)
    except UpgradeInProgressError as err:  # another upgrade began since we looked
        return ConfigurationRemoval(node_name, Outcome.WAIT_FOR_UPGRADE, detail=str(err))
    except FabricError as err:
        if err.code not in _UNCLEAR:
            raise
        # The request may have been carried out; starting it twice would be refused or
        # worse, so ask the cluster instead.
        after = client.get_cluster_configuration_upgrade_status()
        if not (after.is_running or after.config_version == version):
            raise
        detail = f"started (confirmed by status after {err.code})"
        return ConfigurationRemoval(node_name, Outcome.REQUESTED, version, detail)
    return ConfigurationRemoval(node_name, Outcome.REQUESTED, version, "started")


def poll_configuration_upgrade(
    client: ServiceFabricClient,
    *,
    target_version: str = "",
    lifecycle: AutoScalingLifecycle | None = None,
    hook: LifecycleHook | None = None,
) -> WaitStatus:
    """One look at the upgrade: done once rolled forward; raises on Failed or rolling back.

    With `target_version` (from start_configuration_removal) done also needs that version:
    right after the start the gateway may still report the previous, completed upgrade.
    """
    status = client.get_cluster_configuration_upgrade_status()
    heartbeat = record_heartbeat(lifecycle, hook)
    state = status.upgrade_state
    if state == UpgradeState.FAILED or state in _ROLLING_BACK:
        raise ConfigurationUpgradeFailed(
            f"configuration upgrade to {status.config_version or '?'} is {state}"
            + (f": {status.details}" if status.details else "")
        )
    done = status.is_completed and (not target_version or status.config_version == target_version)
    detail = f"{state} to version {status.config_version}"
    if status.is_completed and not done:
        detail += f", waiting for {target_version}"
    return WaitStatus(done=done, status=state, detail=detail, heartbeat=heartbeat)
