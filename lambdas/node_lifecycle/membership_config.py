"""Membership changes as cluster configuration upgrades: a drain's last Fabric step takes
the node out, a join's last step puts it in.

A standalone cluster keeps its membership in the cluster configuration; a node that
is only RemoveNodeState'd stays in `nodes`, and a node AddNode.ps1 joined is missing
from it; either way later upgrades trip over it. Only one upgrade runs at a time, so a
start that finds one running says so and the caller waits (poll_configuration_upgrade)
and starts again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sf_rest import (
    FabricError,
    NodeStatus,
    ServiceFabricClient,
    UpgradeHealthPolicy,
    UpgradeInProgressError,
    UpgradeState,
)
from sf_rest.cluster_config import ConfigNode, add_node, remove_node
from sf_rest.errors import CONNECTION_LOST, OUTCOME_UNKNOWN, READ_TIMEOUT

from .errors import ConfigurationUpgradeFailed, NodeInWrongState
from .interfaces import AutoScalingLifecycle, LifecycleHook
from .lifecycle import record_heartbeat
from .node_stage import NodeStage, describe, node_stage, require_removable
from .results import ConfigurationChange, Outcome, WaitStatus

# Failures after which the gateway may have started the upgrade anyway.
_UNCLEAR = OUTCOME_UNKNOWN | {READ_TIMEOUT, CONNECTION_LOST}
_ROLLING_BACK = {UpgradeState.ROLLING_BACK_IN_PROGRESS, UpgradeState.ROLLING_BACK_COMPLETED}


def start_configuration_removal(
    client: ServiceFabricClient,
    node_name: str,
    *,
    policy: UpgradeHealthPolicy | None = None,
) -> ConfigurationChange:
    """Start the upgrade that drops the node from `nodes` and lists it in NodesToBeRemoved.

    ALREADY_DONE when the configuration has no more to change; WAIT_FOR_UPGRADE while
    any upgrade runs (possibly ours, from a run that crashed after starting it).
    """
    return start_configuration_removals(client, [node_name], policy=policy)


def start_configuration_removals(
    client: ServiceFabricClient,
    node_names: Sequence[str],
    *,
    policy: UpgradeHealthPolicy | None = None,
) -> ConfigurationChange:
    """One upgrade that removes several nodes (the reaper's zombies); each must be Removed."""

    def without_nodes(config: dict[str, Any]) -> dict[str, Any]:
        target = config
        for name in node_names:
            edited = remove_node(target, name)
            if edited != target:
                node = client.get_node_info(name)
                require_removable(node)
                if node_stage(node) != NodeStage.REMOVED:
                    raise NodeInWrongState(
                        f"not removing {name} from the cluster configuration: it is "
                        f"{describe(node)}; its node state must be removed first"
                    )
                target = edited
        return target

    return _start_membership_upgrade(client, ", ".join(node_names), without_nodes, policy)


def start_configuration_addition(
    client: ServiceFabricClient,
    node: ConfigNode,
    *,
    policy: UpgradeHealthPolicy | None = None,
) -> ConfigurationChange:
    """Start the upgrade that puts a node AddNode.ps1 joined into `nodes`.

    Without it the node runs but the configuration does not know it, and the next
    configuration upgrade is rejected. Only an Up node is added.
    """

    def with_node(config: dict[str, Any]) -> dict[str, Any]:
        target = add_node(config, node)
        if target != config:
            found = client.get_node_info(node.node_name)
            if found is None or found.status != NodeStatus.UP:
                raise NodeInWrongState(
                    f"not adding {node.node_name} to the cluster configuration: it is "
                    f"{describe(found)}, not Up"
                )
        return target

    return _start_membership_upgrade(client, node.node_name, with_node, policy)


def _start_membership_upgrade(
    client: ServiceFabricClient,
    node_name: str,
    edit: Callable[[dict[str, Any]], dict[str, Any]],
    policy: UpgradeHealthPolicy | None,
) -> ConfigurationChange:
    running = client.get_cluster_configuration_upgrade_status()
    if running.is_running:
        detail = f"{running.upgrade_state} to version {running.config_version}"
        return ConfigurationChange(node_name, Outcome.WAIT_FOR_UPGRADE, detail=detail)
    config = client.get_cluster_configuration()
    target = edit(config)
    if target == config:
        return ConfigurationChange(node_name, Outcome.ALREADY_DONE)
    version = str(target.get("clusterConfigurationVersion", ""))
    try:
        client.start_cluster_configuration_upgrade(target, policy)
    except UpgradeInProgressError as err:  # another upgrade began since we looked
        return ConfigurationChange(node_name, Outcome.WAIT_FOR_UPGRADE, detail=str(err))
    except FabricError as err:
        if err.code not in _UNCLEAR:
            raise
        # The request may have been carried out; starting it twice would be refused or
        # worse, so ask the cluster instead.
        after = client.get_cluster_configuration_upgrade_status()
        if not (after.is_running or after.config_version == version):
            raise
        detail = f"started (confirmed by status after {err.code})"
        return ConfigurationChange(node_name, Outcome.REQUESTED, version, detail)
    return ConfigurationChange(node_name, Outcome.REQUESTED, version, "started")


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
