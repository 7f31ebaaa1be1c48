"""`telemetry cluster patch`: Windows updates on every Service Fabric node in place, seeds included.

Starts the environment's patch state machine (`telemetry-<env>-sf-patch`, the NodeLifecycle
stack), which the maintenance window in cdk.json (`patching`) also starts. For each node in turn,
seeds first and strictly one at a time: AWS-RunPatchBaseline Scan; nothing missing, next node;
else cluster health must be Ok, the node is deactivated with intent Restart and Disabled,
AWS-RunPatchBaseline Install (RebootIfNeeded) runs, the node comes back Up, is activated, and
cluster health must be Ok again before the next. A health drop, a refused deactivation, a failed
install or a node that does not come back stops the run with an alarm on the alarm topic saying
what to do; running this command again resumes at that node.

--dry-run prints the plan offline (no credentials): the order of the seeds the environment
configures, the steps at each node, the schedule and the time limits. Only a live run reads the
cluster's node list (which scaling nodes there are), what each node is missing, cluster health,
and where a stopped run left off.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Callable
from typing import Any

from stacks.config import EnvironmentConfig, load_environment, read_environments
from stacks.naming import node_lifecycle_state_machine_name, seed_node_name, state_machine_arn
from telemetry.shared import output
from telemetry.shared.errors import UsageError

# Seeds are seed-<index> (stacks/naming.py); scaling nodes scale-<instance id> (scale_out.plan_node).
NODE_NAME = re.compile(r"^(seed-\d{1,2}|scale-i-[0-9a-f]{8}([0-9a-f]{9})?)$")
STEPS = (
    "scan with AWS-RunPatchBaseline (Operation=Scan); nothing missing: record it and go to the next node",
    "take the membership lock (no join, drain or configuration upgrade meanwhile)",
    "check cluster health is Ok (for a seed: every other seed Up and active too)",
    "deactivate the node with intent Restart and wait until it is Disabled",
    "install with AWS-RunPatchBaseline (Operation=Install, RebootOption=RebootIfNeeded)",
    "wait until the node is back after its reboot",
    "activate the node and wait until cluster health is Ok",
    "release the lock and record the node done",
)
LIVE_ONLY = (
    "the cluster's node list (which scaling nodes there are)",
    "what each node is missing (the scan)",
    "cluster health",
    "where a stopped run left off (the round's progress)",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--node", metavar="NAME", help="patch this node alone (seed-N or scale-i-...); default: every node")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the plan offline and change nothing; only a live run reads the cluster's nodes, "
                             "what each is missing, cluster health and where a stopped run left off")  # fmt: skip


def check_arguments(args: argparse.Namespace) -> argparse.Namespace:
    if args.node is None:
        return args
    if not NODE_NAME.match(args.node):
        raise UsageError(f"--node {args.node!r} is not a node name: seed-N for a seed, scale-i-<instance id> for a scaling node")
    config = load_environment(read_environments(), args.env)
    seeds = config.service_fabric.seed_node_count
    if args.node.startswith("seed-") and int(args.node.split("-")[1]) >= seeds:
        raise UsageError(f"--node {args.node}: environment {args.env} has {seeds} seeds, seed-0 to seed-{seeds - 1}")
    return args


def plan(config: EnvironmentConfig, node: str | None) -> dict[str, Any]:
    seeds = [seed_node_name(i) for i in range(config.service_fabric.seed_node_count)]
    name = node_lifecycle_state_machine_name(config, "patch")
    patching = config.patching
    return {
        "environment": config.name,
        "state_machine": state_machine_arn(config, name),
        "schedule": {"expression": patching.schedule, "enabled": patching.enabled},
        "nodes": [node] if node else seeds,
        "then": "" if node else (
            f"the scaling nodes the cluster lists when the run starts (up to {config.service_fabric.scaling_max_nodes}), "
            "by name, each alone"
        ),
        "steps_per_node": list(STEPS),
        "node_time_limit_minutes": patching.node_timeout_minutes,
        "poll_interval_seconds": patching.poll_interval_seconds,
        "on_failure": "the node is left activated where it is up (deactivated where it is Down), the alarm topic says "
                      "what to do, and the next run resumes at that node",
        "read_only_by_a_live_run": list(LIVE_ONLY),
    }  # fmt: skip


def _plan_lines(found: dict[str, Any]) -> list[str]:
    schedule = found["schedule"]
    lines = [
        f"Patch plan for {found['environment']} ({found['state_machine']})",
        f"  maintenance window: {schedule['expression']} UTC, {'enabled' if schedule['enabled'] else 'disabled'}",
        f"  nodes, one at a time: {', '.join(found['nodes'])}" + (f", then {found['then']}" if found["then"] else ""),
        f"  at each node (at most {found['node_time_limit_minutes']} min, a look every {found['poll_interval_seconds']} s):",
    ]
    lines += [f"    {number}. {step}" for number, step in enumerate(found["steps_per_node"], 1)]
    lines.append(f"  on failure: {found['on_failure']}")
    return lines


def run(args: argparse.Namespace, session_factory: Callable[[str], Any]) -> int:
    config = load_environment(read_environments(), args.env)
    found = plan(config, args.node)
    if args.dry_run:
        fields = {key: value for key, value in found.items() if key not in ("environment", "read_only_by_a_live_run")}
        return output.dry_run_plan(
            args, config, summary=_plan_lines(found), would_read=found["read_only_by_a_live_run"],
            would_change=[f"start an execution of {found['state_machine']}, which patches "
                          + (args.node if args.node else "every node") + " as above"],
            **fields,
        )  # fmt: skip
    client = session_factory(config.region).client("stepfunctions")
    execution_input = {"node": args.node} if args.node else {"trigger": "telemetry cluster patch"}
    name = f"cli-{args.node or 'all'}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    started = client.start_execution(stateMachineArn=found["state_machine"], name=name, input=json.dumps(execution_input))
    arn = started["executionArn"]
    if args.format == "json":
        output.document({"execution_arn": arn, "nodes": found["nodes"], "input": execution_input})
    else:
        print(f"started {arn}")
        print(f"  follow it: aws stepfunctions describe-execution --execution-arn {arn} (or the Step Functions console);")
        print("  if it stops, the alarm topic says at which node and what to do; run this command again to resume there")
    return 0


if __name__ == "__main__":  # run by path, as before the one front door
    from telemetry.shared.errors import moved

    raise SystemExit(moved("cluster patch"))
