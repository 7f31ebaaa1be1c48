"""Scale-out steps: a launching instance joins the cluster, one state machine state each.

    plan_node -> join_node (-> wait_for_instance / wait_for_upgrade loops) -> poll_node_up*
    -> tag_node_instance -> start_configuration_registration -> poll_configuration_upgrade*
    -> complete (CONTINUE)

On any failure: clean_up_failed_join (deactivate what was half-added), then ABANDON. The
instance then terminates through the terminate hook, whose drain removes a registered node
by configuration upgrade while the machine still runs.

Like the scale-in steps, each reads where the node is before it acts, so a duplicated
event or a step re-run after a crash picks up where the node is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from sf_rest import (
    DeactivationIntent,
    FabricError,
    NodeInfo,
    NodeStatus,
    ServiceFabricClient,
)

from .errors import InstanceNotJoinable, NodeJoinFailed, NodeInWrongState
from .interfaces import AutoScalingLifecycle, FabricHost, InstanceDirectory, LifecycleHook
from .lifecycle import record_heartbeat
from .node_stage import describe
from .results import JoinCleanup, NodeJoin, NodePlan, Outcome, WaitStatus

DEFAULT_CLIENT_CONNECTION_PORT = "19000"
JOINABLE_STATES = frozenset({"pending", "running"})


def node_name_for(instance_id: str) -> str:
    """A scaling node is named after its instance: unique, and found again from either side."""
    return f"scale-{instance_id}"


def plan_node(
    client: ServiceFabricClient,
    instances: InstanceDirectory,
    instance_id: str,
    *,
    node_type: str,
    region: str,
) -> NodePlan:
    """Decide the node's name, domains and the seed it joins through.

    A node the configuration already lists (a re-run) keeps its entry; a new one takes the
    upgrade domain with the fewest nodes, so upgrades never take down much at once.
    """
    instance = instances.describe_instance(instance_id)
    if instance is None or instance.state not in JOINABLE_STATES:
        state = instance.state if instance else "unknown to EC2"
        raise InstanceNotJoinable(f"instance {instance_id} is {state}: it cannot join")
    if not instance.private_ip or not instance.availability_zone:
        raise InstanceNotJoinable(f"instance {instance_id} has no private address or zone yet")
    name = instance.node_name or node_name_for(instance_id)
    config = client.get_cluster_configuration()
    entry = next((n for n in config.get("nodes") or [] if n.get("nodeName") == name), None)
    return NodePlan(
        instance_id=instance_id,
        node_name=name,
        node_type=node_type,
        ip_address=instance.private_ip,
        fault_domain=(entry or {}).get("faultDomain")
        or f"fd:/{region}/{instance.availability_zone}",
        upgrade_domain=(entry or {}).get("upgradeDomain") or least_used_upgrade_domain(config),
        client_connection_endpoint=_seed_endpoint(client, config),
    )


def least_used_upgrade_domain(config: Mapping[str, Any]) -> str:
    """The upgrade domain with the fewest nodes in the configuration (ties: the first by name)."""
    counts = Counter(str(n.get("upgradeDomain")) for n in config.get("nodes") or [])
    counts.pop("None", None)
    if not counts:
        return "UD0"
    return min(sorted(counts), key=lambda domain: counts[domain])


def _seed_endpoint(client: ServiceFabricClient, config: Mapping[str, Any]) -> str:
    seeds = sorted(
        (n for n in client.get_node_info_list() if n.is_seed_node and n.status == NodeStatus.UP),
        key=lambda n: n.name,
    )
    if not seeds:
        raise InstanceNotJoinable("no seed node is Up: a new node has nothing to join through")
    return f"{seeds[0].ip_address_or_fqdn}:{_client_port(config, seeds[0].node_type)}"


def _client_port(config: Mapping[str, Any], node_type: str) -> str:
    for entry in (config.get("properties") or {}).get("nodeTypes") or []:
        if entry.get("name") == node_type and entry.get("clientConnectionEndpointPort"):
            return str(entry["clientConnectionEndpointPort"])
    return DEFAULT_CLIENT_CONNECTION_PORT


def join_node(client: ServiceFabricClient, host: FabricHost, plan: NodePlan) -> NodeJoin:
    """Run AddNode.ps1 on the instance, unless the node is there already.

    AddNode refuses to run during a configuration upgrade, and the instance can only take
    the command once its SSM agent has registered: both answer "wait and call again".
    """
    node = client.get_node_info(plan.node_name)
    if node is not None and node.status == NodeStatus.UP:
        return NodeJoin(plan.node_name, plan.instance_id, Outcome.ALREADY_DONE)
    if node is not None and node.status != NodeStatus.REMOVED:
        # Down/Disabled under this name: a previous attempt half-worked. Never add twice.
        raise NodeInWrongState(
            f"{plan.node_name} is already in the node list as {describe(node)}; not adding it again"
        )
    upgrade = client.get_cluster_configuration_upgrade_status()
    if upgrade.is_running:
        detail = f"{upgrade.upgrade_state} to version {upgrade.config_version}"
        return NodeJoin(plan.node_name, plan.instance_id, Outcome.WAIT_FOR_UPGRADE, detail=detail)
    command_id = host.send_add_node_command(plan.instance_id, plan.add_node_parameters())
    if command_id is None:
        return NodeJoin(
            plan.node_name,
            plan.instance_id,
            Outcome.WAIT_FOR_INSTANCE,
            detail="the instance is not registered with Systems Manager yet",
        )
    return NodeJoin(plan.node_name, plan.instance_id, Outcome.REQUESTED, command_id)


def poll_node_up(
    client: ServiceFabricClient,
    plan: NodePlan,
    *,
    host: FabricHost | None = None,
    command_id: str = "",
    lifecycle: AutoScalingLifecycle | None = None,
    hook: LifecycleHook | None = None,
) -> WaitStatus:
    """One look: done once the node is Up; a failed AddNode command ends the wait loudly."""
    heartbeat = record_heartbeat(lifecycle, hook)
    node = client.get_node_info(plan.node_name)
    if node is not None and node.status == NodeStatus.UP:
        return WaitStatus(True, node.status, describe(node), heartbeat)
    detail = describe(node)
    if host is not None and command_id:
        command = host.command_status(command_id, plan.instance_id)
        if command.failed:
            raise NodeJoinFailed(
                f"AddNode.ps1 on {plan.instance_id} ended {command.status}: "
                f"{command.detail or 'no output'}"
            )
        if command.succeeded and node is None:
            raise NodeJoinFailed(
                f"AddNode.ps1 on {plan.instance_id} succeeded but the cluster has no node "
                f"{plan.node_name}"
            )
        detail += f"; AddNode {command.status}"
    return WaitStatus(False, node.status if node else "Absent", detail, heartbeat)


def tag_node_instance(instances: InstanceDirectory, plan: NodePlan) -> dict[str, str]:
    """Tag the instance with its node name: how scale-in and the reaper find the node."""
    instances.tag_node_name(plan.instance_id, plan.node_name)
    return {"instance_id": plan.instance_id, "node_name": plan.node_name}


def clean_up_failed_join(
    connect: Callable[[], ServiceFabricClient],
    instances: InstanceDirectory,
    instance_id: str,
    node_name: str = "",
) -> JoinCleanup:
    """Undo what a failed join left, as far as is safe, before the launch is abandoned.

    A node that made it into the node list is tagged (so the drain and the reaper find it)
    and deactivated with a removal intent, so Fabric moves replicas away before the
    instance terminates. Best effort: whatever stops it (no gateway, no certificate, EC2
    refusing the tag) is reported, never raised, because abandoning the launch must not
    wait on the cluster. `connect` is called here, inside the guard.
    """
    name = node_name or node_name_for(instance_id)
    deactivated, detail = False, ""
    try:
        client = connect()
        node = client.get_node_info(name)
        if node is not None and node.status not in (NodeStatus.REMOVED, NodeStatus.DOWN):
            instances.tag_node_name(instance_id, name)
            deactivated = _deactivate_for_removal(client, node)
    except Exception as err:  # noqa: BLE001 - best effort by design, see above
        detail = f"could not clean up in the cluster: {type(err).__name__}: {err}"
    return JoinCleanup(instance_id=instance_id, node_name=name, deactivated=deactivated, detail=detail)


def _deactivate_for_removal(client: ServiceFabricClient, node: NodeInfo) -> bool:
    if node.is_seed_node:
        return False
    for intent in (DeactivationIntent.REMOVE_NODE, DeactivationIntent.REMOVE_DATA):
        try:
            client.deactivate_node(node.name, intent)
            return True
        except FabricError:
            continue
    return False
