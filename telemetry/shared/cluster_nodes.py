"""The Service Fabric cluster's nodes as a seed sees them, asked over Run Command from anywhere.

The ServiceFabric stack's read-only document `<prefix>-sf-cluster-nodes` (stacks/documents/
cluster_nodes.yaml) runs on every seed whose SSM agent is Online, connects to any of the seeds'
client endpoints with the cluster certificate and prints a line per node, or why no cluster
answered and whether Service Fabric is installed on that seed; first, how far the seed's own
preparation (userdata/prepare_node.ps1) has come. Nothing here needs the
operator's machine inside the management CIDRs, unlike the HTTP gateway (telemetry cluster status):
`telemetry deploy`'s smoke step reads the seeds' status this way, and `telemetry cluster bootstrap`
asks it whether a cluster already answers (or a machine already has Service Fabric installed)
before it sends a create.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from telemetry.shared.cluster_inventory import RUN_COMMAND_UNFINISHED
from telemetry.shared.errors import ToolError

STEP = "clusterNodes"  # the document's one step
POLL_S, LIMIT_S = 5.0, 600.0


@dataclass(frozen=True)
class SeenNode:
    name: str
    status: str  # Get-ServiceFabricNode's NodeStatus: Up, Down, Disabling, Disabled, Enabling, ...
    seed: bool


@dataclass(frozen=True)
class Answer:
    """What one seed answered: the nodes, or why no cluster answered it."""

    seed: str  # the seed's node name
    instance_id: str
    nodes: list[SeenNode] | None = None
    unreachable: bool = False  # no cluster answered and Service Fabric is installed on that seed
    reason: str = ""
    prepared: str = ""  # prepare_node.ps1's state there: running, succeeded or failed ("" not reported)
    preparation: str = ""  # the step it is in, or the failed step and its error


@dataclass(frozen=True)
class SeenCluster:
    """What the seeds answered: the nodes, as the first seed that reached a cluster lists them."""

    answers: list[Answer]
    offline: dict[str, str] = field(default_factory=dict)  # seed -> its SSM agent's PingStatus, not Online

    @property
    def listing(self) -> Answer | None:
        return next((a for a in self.answers if a.nodes is not None), None)

    @property
    def nodes(self) -> list[SeenNode] | None:
        return self.listing.nodes if self.listing else None

    @property
    def exists(self) -> bool:
        return self.listing is not None

    @property
    def fresh(self) -> bool:
        """No seed reached a cluster, and none has Service Fabric installed: nothing was created."""
        return not self.exists and not any(a.unreachable for a in self.answers)

    def why_not(self) -> str:
        """The seeds' answers, those alike together: "seed-1 (Service Fabric installed): <reason>"."""
        alike: dict[tuple[bool, str], list[str]] = {}
        for answer in self.answers:
            alike.setdefault((answer.unreachable, answer.reason), []).append(answer.seed)
        return "; ".join(f"{', '.join(seeds)}{' (Service Fabric installed)' if installed else ''}: {why}"
                         for (installed, why), seeds in alike.items())


def parse(output: str) -> tuple[list[SeenNode] | None, bool, str]:
    """The document's lines: NODE=<name>|<status>|<True/False> per node, or UNREACHABLE=<reason>
    (Service Fabric installed there) or NOCLUSTER=<reason>. (nodes or None, unreachable, reason)."""
    nodes, unreachable, reason = [], False, ""
    for line in output.splitlines():
        kind, _, value = line.strip().partition("=")
        if kind == "NODE":
            name, status, seed = value.split("|")
            nodes.append(SeenNode(name, status, seed.strip().lower() == "true"))
        elif kind in ("UNREACHABLE", "NOCLUSTER"):
            unreachable, reason = kind == "UNREACHABLE", value.strip() or "no cluster answered"
    if nodes:
        return nodes, False, ""
    return None, unreachable, reason or "the seed listed no node"


def preparation(output: str) -> tuple[str, str]:
    """The document's PREPARED=<state>|<detail> line: (state, detail), ("", "") without one (a
    document version from before the line existed)."""
    for line in output.splitlines():
        kind, _, value = line.strip().partition("=")
        if kind == "PREPARED":
            state, _, detail = value.partition("|")
            return state.strip(), detail.strip()
    return "", ""


class SeedsOffline(ToolError):
    """No seed's SSM agent is Online (ssm_hosts: PingStatus), so none can be asked."""

    def __init__(self, message: str, offline: dict[str, str]) -> None:
        super().__init__(message)
        self.offline = offline  # seed -> its agent's PingStatus


def ask_the_seeds(
    session: Any, config: Any, outputs: Any, *, say: Callable[[str], None] = print,
    sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
) -> SeenCluster:  # fmt: skip
    """Sends the cluster-nodes document to every seed whose agent is Online, each trying every
    seed's endpoint, and returns what they answered. SeedsOffline when no seed's agent is Online,
    ToolError when a command fails."""
    from telemetry.shared.cluster_inventory import node_instances
    from telemetry.shared.run_command_output import cloudwatch_output, invocation, reason, whole_output
    from telemetry.shared.ssm_hosts import agent_statuses
    from stacks.naming import (
        CLIENT_CONNECTION_PORT,
        CLUSTER_TAG,
        SEED_NODE_TYPE,
        node_log_group_name,
        service_fabric_cluster_name,
    )

    cluster = service_fabric_cluster_name(config)
    running = {i.node_name: i.instance_id for i in node_instances(session.client("ec2"), cluster)
               if i.node_type == SEED_NODE_TYPE and i.state == "running"}
    seeds = sorted(outputs.seeds, key=lambda s: s.index)
    names = {running[s.name]: s.name for s in seeds if s.name in running}  # instance -> seed, in seed order
    ssm = session.client("ssm")
    statuses = agent_statuses(ssm, list(names), CLUSTER_TAG, cluster)
    online = [i for i, status in statuses.items() if status == "Online"]
    offline = {names[i]: status for i, status in statuses.items() if status != "Online"}
    if not online:
        raise SeedsOffline(f"no seed of {cluster} can take a Run Command"
                           + (f" ({', '.join(f'{i} {s}' for i, s in statuses.items())})" if names else " (none is running)"),
                           offline)
    log_group = node_log_group_name(config)
    command_id = ssm.send_command(
        DocumentName=outputs.get("ClusterNodesDocumentName"), DocumentVersion="$LATEST", InstanceIds=online,
        Parameters={"clientConnectionEndpoints": [",".join(f"{s.address}:{CLIENT_CONNECTION_PORT}" for s in seeds)]},
        TimeoutSeconds=120, Comment=f"telemetry: the nodes of {cluster}"[:100],
        CloudWatchOutputConfig=cloudwatch_output(log_group),
    )["Command"]["CommandId"]  # fmt: skip
    say(f"asking {len(online)} seed(s) for the cluster's nodes over Run Command {command_id}")
    logs = functools.partial(session.client, "logs")  # made only for an output cut short
    started, answers = clock(), []
    for instance in online:
        while True:
            result = invocation(ssm, command_id, instance)
            if result["Status"] not in RUN_COMMAND_UNFINISHED:
                break
            if clock() - started > LIMIT_S:
                raise ToolError(f"Run Command {command_id} on {names[instance]} ({instance}) has not ended after "
                                f"{LIMIT_S:.0f} s")
            sleep(POLL_S)
        if result["Status"] != "Success":
            errors = whole_output(logs, log_group, command_id, instance, STEP, "stderr",
                                  result.get("StandardErrorContent") or "", sleep=sleep, clock=clock)
            raise ToolError(f"reading the cluster's nodes on {names[instance]} ({instance}) ended {result['Status']}: "
                            f"{reason(errors) or result.get('StatusDetails', '')}")
        output = whole_output(logs, log_group, command_id, instance, STEP, "stdout",
                              result.get("StandardOutputContent") or "", sleep=sleep, clock=clock)
        nodes, unreachable, why = parse(output)
        answers.append(Answer(names[instance], instance, nodes, unreachable, why, *preparation(output)))
    return SeenCluster(answers, offline)


def seed_statuses(seen: SeenCluster) -> tuple[list[SeenNode], list[str]]:
    """(the seed nodes listed, "<name> <status>" of each not Up)."""
    seeds = sorted((n for n in (seen.nodes or []) if n.seed), key=lambda n: n.name)
    return seeds, [f"{n.name} {n.status}" for n in seeds if n.status != "Up"]


def describe(nodes: Sequence[SeenNode]) -> str:
    up = sum(1 for n in nodes if n.status == "Up")
    return f"{len(nodes)} node(s), {up} Up"
