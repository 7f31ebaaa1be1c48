"""Scale-in steps that act on the node itself.

The drain, as Microsoft documents it for standalone clusters: resolve_node ->
refuse_seed_node -> deactivate_node -> poll_deactivation*, then the removal upgrade
(membership_config) while the machine still runs. stop_fabric_host -> poll_node_down* ->
remove_node_state are clean-up only, for a node the upgrade left in the node list.

Each function is one state of the scale-in state machine (one Lambda call): it reads
where the node is, does its one thing only if still needed, and returns a small
typed result. Wait steps (`poll_*`) read once and return `done`; the state machine
does the waiting. Re-running any step after a crash or a duplicated event is safe.
"""

from __future__ import annotations

from sf_rest import (
    DeactivationIntent,
    InvalidArgumentError,
    NodeInfo,
    NodeIsUpError,
    NodeNotFoundError,
    NodeStatus,
    ServiceFabricClient,
)
from sf_rest.cluster_config import node_names

from .errors import AmbiguousNode, FabricHostStopFailed, NodeInWrongState
from .interfaces import AutoScalingLifecycle, FabricHost, InstanceDirectory, LifecycleHook
from .lifecycle import record_heartbeat
from .node_stage import (
    NodeStage,
    describe,
    node_stage,
    require_not_reactivated,
    require_removable,
)
from .results import (
    Deactivation,
    HostStop,
    NodeResolution,
    NodeStateRemoval,
    Outcome,
    SeedCheck,
    WaitStatus,
)


def resolve_node(
    client: ServiceFabricClient, instances: InstanceDirectory, instance_id: str
) -> NodeResolution:
    """Which node runs on the instance: its `sf:nodename` tag, else its private IP.

    `is_member` is False when there is nothing to drain (the instance never joined, or
    an earlier drain finished): the caller completes the lifecycle action at once.
    """
    instance = instances.describe_instance(instance_id)
    if instance is None:
        return NodeResolution(instance_id, "", "", is_member=False, reason="EC2 does not know it")
    name, found_by = instance.node_name, "tag"
    node: NodeInfo | None = None
    if not name and instance.private_ip:
        node = _node_at_address(client, instance.private_ip)
        name, found_by = (node.name, "ip") if node else ("", "")
    if not name:
        reason = f"untagged instance, no node at {instance.private_ip or 'its address'}"
        return NodeResolution(instance_id, "", "", is_member=False, reason=reason)
    if found_by == "tag":
        node = client.get_node_info(name)
    in_config = name in node_names(client.get_cluster_configuration())
    listed = node is not None and node.status != NodeStatus.REMOVED
    reason = "" if listed or in_config else f"{name} is neither in the node list nor the config"
    return NodeResolution(instance_id, name, found_by, is_member=listed or in_config, reason=reason)


def _node_at_address(client: ServiceFabricClient, address: str) -> NodeInfo | None:
    # "all": a node already Removed by an interrupted drain must still be found.
    nodes = client.get_node_info_list(status_filter="all")
    matches = [n for n in nodes if n.ip_address_or_fqdn == address]
    live = [n for n in matches if n.status != NodeStatus.REMOVED]
    if len(live) > 1:
        names = ", ".join(sorted(n.name for n in live))
        raise AmbiguousNode(f"nodes {names} all answer to {address}; drain one by name")
    found = live or matches
    return found[0] if found else None


def refuse_seed_node(client: ServiceFabricClient, node_name: str) -> SeedCheck:
    """Refused for a seed node; the state machine then alarms and holds the instance."""
    node = client.get_node_info(node_name)
    if node is not None and node.is_seed_node:
        return SeedCheck(node_name, refused=True, reason="seed node: never removed by automation")
    return SeedCheck(node_name, refused=False)


def deactivate_node(client: ServiceFabricClient, node_name: str) -> Deactivation:
    """Deactivate with intent RemoveNode (RemoveData where the gateway refuses RemoveNode)."""
    node = client.get_node_info(node_name)
    if node is None:
        return Deactivation(node_name, Outcome.NOT_A_MEMBER)
    require_removable(node)
    stage = node_stage(node)
    if stage == NodeStage.UNSETTLED:
        raise NodeInWrongState(f"{node_name} is {node.status}: not deactivating it")
    if stage in (NodeStage.DEACTIVATING, NodeStage.DEACTIVATED):
        return Deactivation(node_name, Outcome.ALREADY_DONE, node.deactivation_intent)
    if stage > NodeStage.DEACTIVATED:  # Down or Removed: no replicas left to move
        return Deactivation(node_name, Outcome.NOT_NEEDED, node.deactivation_intent)
    try:
        intent = _deactivate(client, node_name)
    except NodeNotFoundError:
        return Deactivation(node_name, Outcome.NOT_A_MEMBER)
    return Deactivation(node_name, Outcome.REQUESTED, intent)


def _deactivate(client: ServiceFabricClient, node_name: str) -> str:
    try:
        client.deactivate_node(node_name, DeactivationIntent.REMOVE_NODE)
        return DeactivationIntent.REMOVE_NODE
    except InvalidArgumentError:
        # RemoveNode is not in the REST reference's request enum; older runtimes refuse it.
        client.deactivate_node(node_name, DeactivationIntent.REMOVE_DATA)
        return DeactivationIntent.REMOVE_DATA


def poll_deactivation(
    client: ServiceFabricClient,
    node_name: str,
    *,
    lifecycle: AutoScalingLifecycle | None = None,
    hook: LifecycleHook | None = None,
) -> WaitStatus:
    """One look: done once the node is Disabled with its deactivation Completed (or gone)."""
    heartbeat = record_heartbeat(lifecycle, hook)
    node = client.get_node_info(node_name)
    stage = node_stage(node)
    require_not_reactivated(node, stage)
    return WaitStatus(
        done=stage >= NodeStage.DEACTIVATED,
        status=node.status if node else "Absent",
        detail=describe(node),
        heartbeat=heartbeat,
    )


def stop_fabric_host(
    client: ServiceFabricClient, host: FabricHost, node_name: str, instance_id: str
) -> HostStop:
    """Clean-up: stop FabricHostSvc on the instance over Run Command, for a Disabled node the
    removal upgrade left in the node list, so it goes Down and its state can be removed."""
    node = client.get_node_info(node_name)
    require_removable(node)
    stage = node_stage(node)
    if stage >= NodeStage.DOWN:
        outcome = Outcome.NOT_A_MEMBER if node is None else Outcome.ALREADY_DONE
        return HostStop(node_name, instance_id, outcome)
    if stage != NodeStage.DEACTIVATED:
        # Stopping the host before the deactivation completes would lose replicas.
        raise NodeInWrongState(
            f"not stopping Fabric on {instance_id}: {node_name} is {describe(node)}, "
            "not Disabled/Completed"
        )
    command_id = host.send_stop_command(instance_id)
    return HostStop(node_name, instance_id, Outcome.REQUESTED, command_id)


def poll_node_down(
    client: ServiceFabricClient,
    node_name: str,
    *,
    host: FabricHost | None = None,
    instance_id: str = "",
    command_id: str = "",
    lifecycle: AutoScalingLifecycle | None = None,
    hook: LifecycleHook | None = None,
) -> WaitStatus:
    """One look: done once the node is Down (or Removed, or gone).

    With the stop command's id, a command that failed ends the wait loudly instead of
    letting it run into the state machine's timeout.
    """
    heartbeat = record_heartbeat(lifecycle, hook)
    node = client.get_node_info(node_name)
    stage = node_stage(node)
    require_not_reactivated(node, stage)
    status = node.status if node else "Absent"
    if stage >= NodeStage.DOWN:
        return WaitStatus(True, status, describe(node), heartbeat)
    detail = describe(node)
    if host is not None and command_id:
        command = host.command_status(command_id, instance_id)
        if command.failed:
            raise FabricHostStopFailed(
                f"stopping FabricHostSvc on {instance_id} ended {command.status}: "
                f"{command.detail or 'no output'}"
            )
        detail += f"; stop command {command.status}"
    return WaitStatus(False, status, detail, heartbeat)


def remove_node_state(client: ServiceFabricClient, node_name: str) -> NodeStateRemoval:
    """Clean-up: RemoveNodeState, which Fabric allows only for a Down node. Removed/absent is
    fine. Never before the removal upgrade: a node the UOS still lists but the FM has removed
    makes every later upgrade built from GetClusterConfiguration fail validation."""
    node = client.get_node_info(node_name)
    if node is None:
        return NodeStateRemoval(node_name, Outcome.NOT_A_MEMBER)
    require_removable(node)
    stage = node_stage(node)
    if stage == NodeStage.REMOVED:
        return NodeStateRemoval(node_name, Outcome.ALREADY_DONE)
    if stage != NodeStage.DOWN:
        raise NodeInWrongState(f"not removing the state of {node_name}: it is {describe(node)}")
    try:
        client.remove_node_state(node_name)
    except NodeIsUpError as err:  # came back between our read and the call
        raise NodeInWrongState(f"{node_name} is up again: {err.message or err.code}") from err
    except NodeNotFoundError:
        return NodeStateRemoval(node_name, Outcome.NOT_A_MEMBER)
    return NodeStateRemoval(node_name, Outcome.REQUESTED)
