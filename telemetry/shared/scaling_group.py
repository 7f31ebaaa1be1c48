"""A Service Fabric scaling node group as Auto Scaling describes it, and what the commands that
change it share (telemetry cluster scale, refresh and upgrade, and the deploy journey's scale
step): its state, the checks before a change, the wait until it is steady, and the refusal while
its Launch process is suspended."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from stacks.naming import NODE_TYPE_TAG, SCALING_NODE_TYPE
from telemetry.shared.errors import OperationFailed, ToolError

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
