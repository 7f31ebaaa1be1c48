"""Where a node stands in a drain, read from its NodeInfo alone.

Every step looks at the node's stage before it acts, which is what makes the steps
idempotent: a step whose work is done does nothing, a step run too early refuses.
"""

from __future__ import annotations

from enum import IntEnum

from sf_rest import DeactivationIntent, DeactivationStatus, NodeInfo, NodeStatus

from .errors import NodeReactivated, SeedNodeRefused

REMOVAL_INTENTS = frozenset({DeactivationIntent.REMOVE_NODE, DeactivationIntent.REMOVE_DATA})
ABSENT = "Absent"  # how results name a node the gateway answers 204 for


class NodeStage(IntEnum):
    UNSETTLED = 0  # Unknown/Invalid (Invalid: a manifest row for a node the FM has removed)
    DEACTIVATE = 1  # Up, or deactivated for another reason (Pause, Restart)
    DEACTIVATING = 2  # removal asked for; safety checks still running
    DEACTIVATED = 3  # Disabled and Completed: ready for the removal upgrade
    DOWN = 4  # Down: the UOS cannot remove it; RemoveNodeState can (clean-up only)
    REMOVED = 5  # Removed, or unknown to the node list (the gateway answers 204)


def node_stage(node: NodeInfo | None) -> NodeStage:
    if node is None or node.status == NodeStatus.REMOVED:
        return NodeStage.REMOVED
    if node.status == NodeStatus.DOWN:
        return NodeStage.DOWN
    if node.status in (NodeStatus.DISABLING, NodeStatus.DISABLED):
        if node.deactivation_intent not in REMOVAL_INTENTS:
            return NodeStage.DEACTIVATE  # escalate: Fabric accepts a stronger intent
        if node.is_deactivated:
            return NodeStage.DEACTIVATED
        return NodeStage.DEACTIVATING
    if node.status in (NodeStatus.UP, NodeStatus.ENABLING):
        return NodeStage.DEACTIVATE
    return NodeStage.UNSETTLED


def describe(node: NodeInfo | None) -> str:
    """'Disabling (SafetyCheckInProgress, intent RemoveNode)', 'Down', 'Absent'."""
    if node is None:
        return ABSENT
    if node.deactivation_status in ("", DeactivationStatus.NONE):
        return node.status
    return f"{node.status} ({node.deactivation_status}, intent {node.deactivation_intent})"


def require_removable(node: NodeInfo | None) -> None:
    """Raise SeedNodeRefused for a seed node: losing a majority of seeds loses the cluster."""
    if node is not None and node.is_seed_node:
        raise SeedNodeRefused(
            f"{node.name} is a seed node: automation never deactivates or removes seed nodes"
        )


def require_not_reactivated(node: NodeInfo | None, stage: NodeStage) -> None:
    """A wait step that finds the node Up again must not wait for ever: say so."""
    if node is not None and stage == NodeStage.DEACTIVATE:
        raise NodeReactivated(
            f"{node.name} is {describe(node)} without a removal intent: it was activated "
            "again during the drain; deactivate it again or leave it in the cluster"
        )
