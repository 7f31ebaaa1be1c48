"""`telemetry cluster scale`: scale an environment's Service Fabric scaling node group and wait until it is steady.

The stack creates the group empty (no instance can join before the cluster exists); run this
after `telemetry cluster bootstrap` without --desired to bring the group to its configured baseline
(`scaling_desired_nodes`, with the configured minimum `scaling_min_nodes`). With --desired N it
sets that size instead (within the configured minimum and the group's maximum). It waits, printing
progress, until
the group has exactly that many instances in service, none still joining or draining in a
lifecycle hook (Pending:Wait, Terminating:Wait, ...), and no scaling activity in progress. Any
group but a Service Fabric scaling node group (tag sf:nodetype ScalingNodeType) is refused.

Before it changes the group's size it reads the cluster's membership lock and the patch run's
progress lease (telemetry/shared/cluster_lock.py; the membership lock table in DynamoDB) and changes nothing
while either is held, naming the holder, its intent, its node and since when (exit 1): each node it
adds or removes is joined or drained by the automation under that lock. It takes neither. A group
already at the size is only waited for.

--dry-run plans offline from cdk.json (the group's name, the configured limits, which the stack
gives the group) and names what a run reads from Auto Scaling first: the group's current size,
instances, activities and tag, none of which the checkout knows.

Exit codes: 0 steady at the desired size (or dry run); 1 not steady before the timeout;
2 refused (outside min/max, not a scaling node group, unknown group); 1 also when the membership lock
or the patch progress lease is held; a failed AWS call is 1, missing credentials 2 (as every `telemetry` command).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from stacks.config import load_environment, read_environments
from stacks.naming import NODE_TYPE_TAG, SCALING_NODE_TYPE, membership_lock_table_name, scaling_group_name
from telemetry.shared.errors import OperationFailed, ToolError
from telemetry.shared.scaling_group import (
    ScalingGroups,
    check_request,
    refuse_while_launch_suspended,
    wait_until_steady,
)


def plan(args: argparse.Namespace, config) -> int:
    """--dry-run: the change from cdk.json alone; the group's state is what a run reads first."""
    from telemetry.shared.output import dry_run_plan

    name = args.group or scaling_group_name(config)
    desired = config.service_fabric.scaling_desired_nodes if args.desired is None else args.desired
    if args.group:  # another group keeps its own limits, which only Auto Scaling knows
        minimum = maximum = None
        limits = "its own limits"
        resize = f"set its desired capacity to {desired} (SetDesiredCapacity) unless it is already"
    else:  # the stack gives the environment's group cdk.json's maximum; a run sets the minimum
        minimum, maximum = config.service_fabric.scaling_min_nodes, config.service_fabric.scaling_max_nodes
        if not minimum <= desired <= maximum:
            raise ToolError(f"{desired} is outside {name}'s limits {minimum}-{maximum}")
        limits = f"limits {minimum}-{maximum}, from cdk.json"
        resize = (f"set its minimum to {minimum} and desired capacity to {desired} (UpdateAutoScalingGroup) where the "
                  f"minimum differs (the stack creates it at 0), else its desired capacity (SetDesiredCapacity) "
                  "unless it is already")
    return dry_run_plan(
        args, config,
        summary=[f"{name}: -> desired {desired} ({limits})"],
        would_read=[
            f"{name}'s current desired capacity, limits, instances and their lifecycle states, and its scaling "
            "activities (Auto Scaling DescribeAutoScalingGroups, DescribeScalingActivities)",
            f"its {NODE_TYPE_TAG} tag: a group that is not a {SCALING_NODE_TYPE} group is refused",
            f"who holds the membership lock and the patch progress lease ({membership_lock_table_name(config)}): "
            "either held refuses a change of size (a group already at it is only waited for)",
        ],
        would_change=[
            resize,
            f"wait up to {args.timeout:.0f} s, a line every {args.poll_interval:g} s, until exactly {desired} "
            "instance(s) are InService, none joining or draining in a lifecycle hook and no scaling activity in "
            "progress (the node lifecycle automation joins or drains each node)",
        ],
        group=name, desired=desired, minimum=minimum, maximum=maximum,
    )


def scale(args: argparse.Namespace, session_factory: Callable[[str], object]) -> int:
    config = load_environment(read_environments(), args.env)
    if args.dry_run:
        return plan(args, config)
    name = args.group or scaling_group_name(config)
    session = session_factory(config.region)
    groups = ScalingGroups(session)
    state = groups.state(name)
    # The environment's own group takes the configured minimum; another group keeps its own.
    minimum = state.min_size if args.group else config.service_fabric.scaling_min_nodes
    desired = config.service_fabric.scaling_desired_nodes if args.desired is None else args.desired
    check_request(state, desired, minimum)
    if desired > state.desired:
        refuse_while_launch_suspended(state, config.region, f"scaling out to {desired}")
    if state.min_size != minimum or state.desired != desired:
        from telemetry.shared.cluster_lock import refuse_while_held

        refuse_while_held(config, session, "telemetry cluster scale")
    print(f"{name}: {state.progress()} -> desired {desired} (limits {minimum}-{state.max_size})")
    if state.min_size != minimum:
        groups.set_size(name, minimum, desired)
    elif state.desired != desired:
        groups.set_desired(name, desired)
    if wait_until_steady(groups, name, desired, timeout_s=args.timeout, poll_interval_s=args.poll_interval):
        print(f"{name} is steady with {desired} node(s) in service")
        if args.format == "json":
            from telemetry.shared.output import document

            document({"group": name, "desired": desired, "steady": True})
        return 0
    raise OperationFailed(f"{name} not steady after {args.timeout:.0f} s; the node lifecycle automation may be stuck "
                          "(check its alarms and the group's activity history)")


def _count(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return number


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (f"{parser.description or ''} Before changing the size it reads the cluster's membership "
                          "lock and the patch progress lease (DynamoDB) and changes nothing while either is held; it "
                          "takes neither.").strip()
    parser.add_argument(
        "--desired",
        type=_count,
        help="number of scaling nodes wanted (default: the environment's scaling_desired_nodes)",
    )
    parser.add_argument("--group", help="Auto Scaling group name (default: the environment's scaling group)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for a steady group (default 3600)")
    parser.add_argument("--poll-interval", type=float, default=15.0, help="seconds between progress lines (default 15)")
    parser.add_argument("--dry-run", action="store_true",
                        help="offline: check the size against cdk.json's limits and print the change and what a run "
                        "would read from Auto Scaling first; call and change nothing")


def run(args: argparse.Namespace, session_factory: Callable[[str], object]) -> int:
    return scale(args, session_factory)


if __name__ == "__main__":  # run by path, as before the one front door
    from telemetry.shared.errors import moved

    raise SystemExit(moved("cluster scale"))
