"""The zombie reaper's decision: which Down nodes have lost their machine for good.

Pure functions: the scheduled Lambda reads the node list and the instances, asks
`decide_reaping`, and publishes the counts the zombie and seed alarms watch. It changes
nothing in the cluster (see workflow.reap_zombies for why).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from sf_rest import NodeInfo, NodeStatus

from .interfaces import InstanceInfo

# EC2 states from which an instance never comes back.
GONE_STATES = frozenset({"shutting-down", "terminated"})


@dataclass(frozen=True)
class ReaperDecision:
    zombies: tuple[str, ...]  # Down long enough, instance gone, not seeds
    seed_nodes_down: tuple[str, ...]  # alarm on these; never touch them
    waiting: tuple[str, ...]  # Down, but not long enough or the instance still exists

    @property
    def zombie_count(self) -> int:
        return len(self.zombies)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "zombie_count": self.zombie_count}


def decide_reaping(
    nodes: Iterable[NodeInfo],
    instance_states: Mapping[str, str | None],
    *,
    now: datetime,
    down_for: timedelta,
    node_types: Collection[str] | None = None,
    restart_for: timedelta = timedelta(0),
) -> ReaperDecision:
    """Sort the Down nodes into zombies, seeds to alarm on, and ones that may yet come back.

    `instance_states` maps node name -> EC2 state of its instance (None or missing: EC2
    does not know it any more). `node_types`, when given, limits removal to nodes of those
    types (the scaling group's), so a fixed machine missing from the map is never taken
    for gone. `now` must be timezone-aware: it is compared with the gateway's NodeDownAt.
    A seed deactivated with intent Restart is being patched (patching.py reboots it) and is
    not counted Down for `restart_for`, the patch run's time for a node: past that, the run has
    alarmed, and the seed alarm goes on as for any Down seed.
    """
    zombies: list[str] = []
    seeds: list[str] = []
    waiting: list[str] = []
    for node in sorted(nodes, key=lambda n: n.name):
        if node.status != NodeStatus.DOWN:
            continue
        if node.is_seed_node:
            restarting = node.deactivation_intent == "Restart" and down_duration(node, now) < restart_for
            if not restarting:
                seeds.append(node.name)
            continue
        if node_types is not None and node.node_type not in node_types:
            continue
        gone = instance_states.get(node.name) in (None, *GONE_STATES)
        if gone and down_duration(node, now) >= down_for:
            zombies.append(node.name)
        else:
            waiting.append(node.name)
    return ReaperDecision(tuple(zombies), tuple(seeds), tuple(waiting))


def down_duration(node: NodeInfo, now: datetime) -> timedelta:
    """How long the node has been Down: from NodeDownAt when the gateway gives a real one,
    else NodeDownTimeInSeconds (relative to when the node list was read)."""
    down_at = _parse_time(str(node.raw.get("NodeDownAt") or ""))
    if down_at is not None and down_at.year > 1:  # Fabric reports 0001-01-01 for "never"
        return max(now - down_at, timedelta(0))
    return timedelta(seconds=max(node.node_down_time_in_seconds, 0))


def _parse_time(text: str) -> datetime | None:
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def instance_states_by_node(
    nodes: Iterable[NodeInfo], instances: Iterable[InstanceInfo]
) -> dict[str, str]:
    """Node name -> state of its instance, by `sf:nodename` tag, else by private IP.

    Tags win: EC2 drops a terminated instance's private IP, and a new instance may reuse
    it. An address match can only make a node look alive, so it errs on the safe side.
    """
    instances = list(instances)
    states = {i.node_name: i.state for i in instances if i.node_name}
    by_ip = {
        i.private_ip: i.state for i in instances if i.private_ip and i.state not in GONE_STATES
    }
    for node in nodes:
        if node.name not in states and node.ip_address_or_fqdn in by_ip:
            states[node.name] = by_ip[node.ip_address_or_fqdn]
    return states
