"""`telemetry cluster status`: one table of an environment's Service Fabric cluster: its nodes joined with their EC2 instances.

Service Fabric nodes (name, status, seed, type) come from the HTTP gateway through the shared
REST client; instances (id, state, zone, address) from EC2 by the cluster tag. A node is matched
to its instance by the instance's `sf:nodename` tag, else by address. Flagged:
  ZOMBIE      a node that is Down and has no running instance (the reaper's work, or stuck);
  NOT JOINED  a running instance the cluster does not know (a join that never happened).

The HTTP gateway endpoint and the certificate secrets' names come from the stack outputs of
--env. By default the admin client certificate comes from its secret and the gateway is verified
by the cluster certificate's thumbprint (from the cluster certificate secret).

Exit codes: 0 every node and instance accounted for; 1 something flagged; 2 bad input; a failed AWS call is 1, missing credentials 2 (as every `telemetry` command).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass


from stacks.config import load_environment, read_environments
from stacks.naming import service_fabric_cluster_name
from telemetry.shared.cluster_inventory import (
    NodeInstance,
    add_gateway_arguments,
    check_gateway_arguments,
    deployed_outputs,
    format_table,
    gateway_client,
    node_instances,
    service_fabric_stack_name,
)

ZOMBIE = "ZOMBIE"
NOT_JOINED = "NOT JOINED"
LIVE_STATES = {"pending", "running"}


@dataclass(frozen=True)
class StatusRow:
    node: str = ""
    node_status: str = ""
    seed: str = ""
    node_type: str = ""
    instance_id: str = ""
    instance_state: str = ""
    availability_zone: str = ""
    address: str = ""
    flag: str = ""


def join_nodes_and_instances(nodes, instances: Sequence[NodeInstance]) -> list[StatusRow]:
    by_name = {i.node_name: i for i in instances if i.node_name}
    by_address: dict[str, NodeInstance] = {}
    for instance in instances:
        # A live instance wins an address over a terminated one that once had it.
        if instance.state in LIVE_STATES or instance.node_address not in by_address:
            by_address[instance.node_address] = instance
    rows, matched = [], set()
    for node in sorted(nodes, key=lambda n: (not n.is_seed_node, n.name)):
        instance = by_name.get(node.name) or by_address.get(node.ip_address_or_fqdn)
        running = instance is not None and instance.state in LIVE_STATES
        if instance is not None:
            matched.add(instance.instance_id)
        rows.append(
            StatusRow(
                node=node.name,
                node_status=node.status,
                seed="yes" if node.is_seed_node else "no",
                node_type=node.node_type,
                instance_id=instance.instance_id if instance else "-",
                instance_state=instance.state if instance else "gone",
                availability_zone=instance.availability_zone if instance else "-",
                address=node.ip_address_or_fqdn,
                flag=ZOMBIE if node.status == "Down" and not running else "",
            )
        )
    for instance in instances:
        if instance.instance_id in matched or instance.state not in LIVE_STATES:
            continue
        rows.append(
            StatusRow(
                node="-",
                node_status="-",
                seed="-",
                node_type=instance.node_type,
                instance_id=instance.instance_id,
                instance_state=instance.state,
                availability_zone=instance.availability_zone,
                address=instance.node_address,
                flag=NOT_JOINED,
            )
        )
    return rows


HEADERS = ("NODE", "SF STATUS", "SEED", "NODE TYPE", "INSTANCE", "EC2 STATE", "ZONE", "ADDRESS", "FLAG")


def render(rows: Sequence[StatusRow]) -> str:
    table = format_table(HEADERS, [tuple(asdict(r).values()) for r in rows])
    zombies = sum(r.flag == ZOMBIE for r in rows)
    unjoined = sum(r.flag == NOT_JOINED for r in rows)
    return f"{table}\n{len(rows)} row(s): {zombies} zombie node(s), {unjoined} instance(s) not joined"


def status(args: argparse.Namespace, session_factory: Callable[[str], object]) -> int:
    config = load_environment(read_environments(), args.env)
    session = session_factory(config.region)
    outputs = deployed_outputs(session.client("cloudformation"), service_fabric_stack_name(config))
    client, cleanup = gateway_client(args, outputs, lambda: session.client("secretsmanager"))
    try:
        with client:
            nodes = client.get_node_info_list(status_filter="all")
    finally:
        cleanup()
    instances = node_instances(session.client("ec2"), service_fabric_cluster_name(config))
    rows = join_nodes_and_instances(nodes, instances)
    if args.json:
        from telemetry.shared.output import document

        document([asdict(r) for r in rows])
    else:
        print(render(rows))
    return 1 if any(r.flag for r in rows) else 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_gateway_arguments(parser)


def check_arguments(args: argparse.Namespace) -> None:
    check_gateway_arguments(args)


def run(args: argparse.Namespace, session_factory: Callable[[str], object]) -> int:
    args.json = getattr(args, "json", False) or getattr(args, "format", "text") == "json"
    return status(args, session_factory)


if __name__ == "__main__":  # run by path, as before the one front door
    from telemetry.shared.errors import moved

    raise SystemExit(moved("cluster status"))
