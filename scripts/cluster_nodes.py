"""The Service Fabric cluster's nodes as a seed sees them, asked over Run Command from anywhere.

The ServiceFabric stack's read-only document `<prefix>-cluster-nodes` (stacks/documents/
cluster_nodes.yaml) runs on one seed whose SSM agent is Online, connects to that seed's own client
endpoint with the cluster certificate and prints a line per node. Nothing here needs the
operator's machine inside the management CIDRs, unlike the HTTP gateway (telemetry cluster status):
`telemetry deploy`'s smoke step reads the seeds' status this way, and `telemetry cluster bootstrap`
asks it whether a cluster already answers before it sends a create.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from scripts.cluster_inventory import RUN_COMMAND_UNFINISHED, ToolError

STEP = "clusterNodes"  # the document's one step
POLL_S, LIMIT_S = 5.0, 600.0


@dataclass(frozen=True)
class SeenNode:
    name: str
    status: str  # Get-ServiceFabricNode's NodeStatus: Up, Down, Disabling, Disabled, Enabling, ...
    seed: bool


@dataclass(frozen=True)
class SeenCluster:
    """What one seed answered: the nodes, or why no cluster answered it (`nodes` is then None)."""

    seed: str  # the seed's node name
    instance_id: str
    nodes: list[SeenNode] | None = None
    reason: str = ""
    unreachable: list[str] = field(default_factory=list)  # seeds passed over: "<name> <instance> <status>"

    @property
    def exists(self) -> bool:
        return self.nodes is not None


def parse(output: str) -> tuple[list[SeenNode] | None, str]:
    """The document's lines: NODE=<name>|<status>|<True/False> per node, or NOCLUSTER=<reason>."""
    nodes, reason = [], ""
    for line in output.splitlines():
        kind, _, value = line.strip().partition("=")
        if kind == "NODE":
            name, status, seed = value.split("|")
            nodes.append(SeenNode(name, status, seed.strip().lower() == "true"))
        elif kind == "NOCLUSTER":
            reason = value.strip() or "no cluster answered"
    if nodes:
        return nodes, ""
    return None, reason or "the seed listed no node"


def ask_a_seed(
    session: Any, config: Any, outputs: Any, *, say: Callable[[str], None] = print,
    sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
) -> SeenCluster:  # fmt: skip
    """Sends the cluster-nodes document to the first seed (in index order) whose agent is Online and
    returns what it saw. ToolError when no seed can be reached, or the command fails."""
    from scripts.cluster_inventory import node_instances
    from scripts.run_command_output import cloudwatch_output, reason, whole_output
    from scripts.ssm_hosts import reachable
    from stacks.naming import (
        CLIENT_CONNECTION_PORT,
        CLUSTER_TAG,
        SEED_NODE_TYPE,
        node_log_group_name,
        service_fabric_cluster_name,
    )

    cluster = service_fabric_cluster_name(config)
    document = outputs.get("ClusterNodesDocumentName")
    running = {i.node_name: i.instance_id for i in node_instances(session.client("ec2"), cluster)
               if i.node_type == SEED_NODE_TYPE and i.state == "running"}
    seeds = [s for s in sorted(outputs.seeds, key=lambda s: s.index) if s.name in running]
    ssm = session.client("ssm")
    online, others = reachable(ssm, [running[s.name] for s in seeds], CLUSTER_TAG, cluster)
    if not online:
        raise ToolError(f"no seed of {cluster} can take a Run Command"
                        + (f" ({', '.join(others)})" if others else " (none is running)"))
    seed = next(s for s in seeds if running[s.name] == online[0])
    instance = online[0]
    log_group = node_log_group_name(config)
    command_id = ssm.send_command(
        DocumentName=document, DocumentVersion="$LATEST", InstanceIds=[instance],
        Parameters={"clientConnectionEndpoint": [f"{seed.address}:{CLIENT_CONNECTION_PORT}"]},
        TimeoutSeconds=120, Comment=f"telemetry: the nodes of {cluster}"[:100],
        CloudWatchOutputConfig=cloudwatch_output(log_group),
    )["Command"]["CommandId"]  # fmt: skip
    say(f"asking {seed.name} ({instance}) for the cluster's nodes over Run Command {command_id}")
    started = clock()
    while True:
        try:
            result = ssm.get_command_invocation(CommandId=command_id, InstanceId=instance)
        except ssm.exceptions.InvocationDoesNotExist:
            result = {"Status": "Pending"}  # SSM takes a moment to register a new invocation
        if result["Status"] not in RUN_COMMAND_UNFINISHED:
            break
        if clock() - started > LIMIT_S:
            raise ToolError(f"Run Command {command_id} on {seed.name} ({instance}) has not ended after {LIMIT_S:.0f} s")
        sleep(POLL_S)
    logs = functools.partial(session.client, "logs")  # made only for an output cut short
    if result["Status"] != "Success":
        errors = whole_output(logs, log_group, command_id, instance, STEP, "stderr",
                              result.get("StandardErrorContent") or "", sleep=sleep, clock=clock)
        raise ToolError(f"reading the cluster's nodes on {seed.name} ({instance}) ended {result['Status']}: "
                        f"{reason(errors) or result.get('StatusDetails', '')}")
    output = whole_output(logs, log_group, command_id, instance, STEP, "stdout",
                          result.get("StandardOutputContent") or "", sleep=sleep, clock=clock)
    nodes, reason = parse(output)
    return SeenCluster(seed.name, instance, nodes, reason, others)


def seed_statuses(seen: SeenCluster) -> tuple[list[SeenNode], list[str]]:
    """(the seed nodes listed, "<name> <status>" of each not Up)."""
    seeds = sorted((n for n in (seen.nodes or []) if n.seed), key=lambda n: n.name)
    return seeds, [f"{n.name} {n.status}" for n in seeds if n.status != "Up"]


def describe(nodes: Sequence[SeenNode]) -> str:
    up = sum(1 for n in nodes if n.status == "Up")
    return f"{len(nodes)} node(s), {up} Up"
