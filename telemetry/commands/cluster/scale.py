"""`telemetry cluster scale`: scale an environment's Service Fabric scaling node group and wait until it is steady.

The stack creates the group empty (no instance can join before the cluster exists); run this
after commands/cluster/bootstrap.py without --desired to bring the group to its configured baseline
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
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass


from stacks.config import load_environment, read_environments
from stacks.naming import NODE_TYPE_TAG, SCALING_NODE_TYPE, membership_lock_table_name, scaling_group_name
from telemetry.shared.errors import ToolError
from telemetry.shared.errors import OperationFailed

UNFINISHED_ACTIVITIES = {"PendingSpotBidPlacement", "WaitingForSpotInstanceRequestId", "WaitingForSpotInstanceId",
                         "WaitingForInstanceId", "PreInService", "InProgress", "WaitingForELBConnectionDraining",
                         "MidLifecycleAction", "WaitingForInstanceWarmup",
                         "WaitingForConnectionDraining"}


@dataclass(frozen=True)
class GroupState:
    name: str
    min_size: int
    max_size: int
    desired: int
    lifecycle_states: tuple[str, ...]  # one per instance
    activities_in_progress: int
    node_type: str  # its sf:nodetype tag
    # The InService instances not on the group's launch template version, which an instance refresh
    # with SkipMatching replaces; None when the group names no launch template or a symbolic
    # version ($Latest, $Default), which this does not resolve.
    out_of_date: tuple[str, ...] | None = None
    suspended: tuple[str, ...] = ()  # the group's suspended processes (Launch, Terminate, ...)

    @property
    def in_service(self) -> int:
        return self.lifecycle_states.count("InService")

    @property
    def retained(self) -> int:
        """Instances Auto Scaling keeps after their terminate action was ABANDONed (a failed drain):
        outside desired capacity until an operator terminates them ("Manage retained instances")."""
        return sum(1 for state in self.lifecycle_states if state.endswith(":Retained"))

    def steady_at(self, desired: int) -> bool:
        return (
            self.desired == desired
            and self.in_service == desired
            and len(self.lifecycle_states) - self.retained == desired
            and self.activities_in_progress == 0
        )

    def progress(self) -> str:
        counts = Counter(self.lifecycle_states)
        states = ", ".join(f"{state} {counts[state]}" for state in sorted(counts)) or "no instances"
        busy = f"; {self.activities_in_progress} activity in progress" if self.activities_in_progress else ""
        return f"desired {self.desired}: {states}{busy}"


class ScalingGroups:
    """The Auto Scaling calls scaling makes."""

    def __init__(self, session) -> None:
        self._client = session.client("autoscaling")

    def state(self, name: str) -> GroupState:
        groups = self._client.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"]
        if not groups:
            raise ToolError(f"Auto Scaling group {name} does not exist; is the ServiceFabric stack deployed?")
        group = groups[0]
        tags = {t["Key"]: t["Value"] for t in group.get("Tags", [])}
        activities = self._client.describe_scaling_activities(AutoScalingGroupName=name, MaxRecords=20)["Activities"]
        return GroupState(
            name=name,
            min_size=group["MinSize"],
            max_size=group["MaxSize"],
            desired=group["DesiredCapacity"],
            lifecycle_states=tuple(i["LifecycleState"] for i in group.get("Instances", [])),
            activities_in_progress=sum(a["StatusCode"] in UNFINISHED_ACTIVITIES for a in activities),
            node_type=tags.get(NODE_TYPE_TAG, ""),
            out_of_date=out_of_date(group),
            suspended=tuple(p["ProcessName"] for p in group.get("SuspendedProcesses", [])),
        )

    def set_desired(self, name: str, desired: int) -> None:
        # Cooldowns pace the automatic policies; an operator's explicit request goes ahead.
        self._client.set_desired_capacity(AutoScalingGroupName=name, DesiredCapacity=desired, HonorCooldown=False)

    def set_size(self, name: str, minimum: int, desired: int) -> None:
        """The configured minimum and the desired size together (the stack creates the group
        with minimum 0, so that nothing launches before the cluster can take it)."""
        self._client.update_auto_scaling_group(AutoScalingGroupName=name, MinSize=minimum, DesiredCapacity=desired)


def out_of_date(group: dict) -> tuple[str, ...] | None:
    """GroupState.out_of_date, from a DescribeAutoScalingGroups group: each instance's
    LaunchTemplate (id and version) against the group's."""
    template = group.get("LaunchTemplate") or {}
    version = str(template.get("Version", ""))
    if not template.get("LaunchTemplateId") or not version.isdigit():
        return None
    return tuple(i["InstanceId"] for i in group.get("Instances", []) if i["LifecycleState"] == "InService" and (
        (i.get("LaunchTemplate") or {}).get("LaunchTemplateId"), str((i.get("LaunchTemplate") or {}).get("Version")))
        != (template["LaunchTemplateId"], version))


def resume_launch_command(group: str, region: str) -> str:
    return f"aws autoscaling resume-processes --auto-scaling-group-name {group} --scaling-processes Launch --region {region}"


def refuse_while_launch_suspended(state: GroupState, region: str, what: str) -> None:
    """With Launch suspended, an instance refresh replaces no instance and a scale-out launches none
    (EC2 Auto Scaling User Guide, "How suspended processes affect other processes"): the command
    would wait out its timeout. telemetry cluster upgrade leaves it so until the deploy."""
    if "Launch" in state.suspended:
        raise OperationFailed(f"the Launch process of {state.name} is suspended, so {what} would launch no instance; if a "
                        "runtime upgrade suspended it, resume it once cdk.json names the new version and the deploy "
                        f"has run: {resume_launch_command(state.name, region)}")


def check_request(state: GroupState, desired: int, minimum: int) -> None:
    if state.node_type != SCALING_NODE_TYPE:
        raise ToolError(
            f"{state.name} is not a Service Fabric scaling node group (sf:nodetype is "
            f"'{state.node_type}', not {SCALING_NODE_TYPE}); only that group scales"
        )
    if not minimum <= desired <= state.max_size:
        raise ToolError(f"{desired} is outside {state.name}'s limits {minimum}-{state.max_size}")


def wait_until_steady(
    groups: ScalingGroups,
    name: str,
    desired: int,
    *,
    timeout_s: float,
    poll_interval_s: float,
    say: Callable[[str], None] = print,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    started = clock()
    while True:
        state = groups.state(name)
        elapsed = clock() - started
        say(f"[{elapsed:5.0f} s] {name} {state.progress()}")
        if state.steady_at(desired):
            return True
        if elapsed >= timeout_s:
            return False
        sleep(poll_interval_s)


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
