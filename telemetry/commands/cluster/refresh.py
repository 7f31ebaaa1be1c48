"""`telemetry cluster refresh`: replace every scaling node that does not run the group's current
launch template (a new Windows image), one at a time, through the join and drain automation.

How a new image gets there: the launch template's image is the public SSM parameter of the latest
Windows Server 2022 base image (stacks/constructs/node_instance.py), which CloudFormation resolves
at every deployment. A `cdk deploy` after Microsoft's monthly image gives the template a new
version and points the group at it; instances already running keep their image. This command
then starts an Auto Scaling instance refresh (StartInstanceRefresh) of the scaling group:

- SkipMatching: only instances whose launch template version differs from the group's are
  replaced; a refresh with nothing new to roll out "will succeed immediately without replacing any
  instances" (User Guide, "Use an instance refresh with skip matching"). So when every InService
  instance already runs the group's launch template version, none is started: the command says
  so and ends (exit 0), rather than a Successful refresh that replaced nothing.
- MinHealthyPercentage 100 (by default) with MaxHealthyPercentage 110: Auto Scaling launches the
  replacement first, and it joins the cluster in the launch lifecycle hook before the old instance
  is terminated and drained in the terminate hook ("Instance refresh ... honours lifecycle hooks",
  EC2 Auto Scaling User Guide, "Use an instance refresh to update instances"). The cluster never
  has fewer nodes than before, and with a group under ten nodes one node is replaced at a time,
  which is also the pace the membership lock sets for joins and drains.
- InstanceWarmup: the group's own (stacks/constructs/scaling_node_group.py INSTANCE_WARMUP).
- AlarmSpecification: the node lifecycle's JoinFailed, DrainFailed and SeedNodeDown alarms; one
  in ALARM fails the refresh, leaving the nodes replaced so far in place. One already in ALARM, or
  missing, is refused before the refresh starts (DescribeAlarms).
- No AutoRollback: the deployment already moved the group to the new launch template, so there is
  no previous configuration for Auto Scaling to return to (and the API refuses AutoRollback without
  a DesiredConfiguration). To go back, deploy the previous image and refresh again.

A refresh of the group under way with the preferences this command would send (an earlier run's,
whose process died or was stopped: DescribeInstanceRefreshes gives each refresh's Preferences) is
followed, not refused; a run again with other options, or someone's refresh with other preferences
(from the console, say), is someone else's.

Before it starts a refresh it reads the cluster's membership lock and the patch run's progress lease
(telemetry/shared/cluster_lock.py; the membership lock table in DynamoDB) and starts nothing while either is
held, naming the holder, its intent, its node and since when (exit 1). It takes neither: the refresh
runs for hours through the join and drain automation, which takes the lock node by node. Following a
refresh already under way starts nothing, so that is not refused.

Refused (exit 2): someone else's refresh of the group under way (named, with the preference that
differs), a group that is not the scaling node group, a stop alarm in ALARM or missing. It waits, a
line every --poll-interval seconds, until the refresh ends: Successful, exit 0; Failed, Cancelled or
rolled back, exit 1 with the reason Auto Scaling gives. Interrupting the wait leaves the refresh
running (the same command again follows it; aws autoscaling cancel-instance-refresh stops it).

--dry-run plans offline from cdk.json and names what a run reads from Auto Scaling first.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from simulator.topic_admin import positive_seconds  # as telemetry topics reads its --timeout
from stacks.config import EnvironmentConfig, load_environment, read_environments
from stacks.naming import (
    NODE_TYPE_TAG,
    REFRESH_STOP_ALARMS,
    SCALING_NODE_TYPE,
    membership_lock_table_name,
    node_lifecycle_alarm_name,
    scaling_group_name,
    service_fabric_cluster_name,
)
from telemetry.shared import output
from telemetry.shared.cluster_lock import refuse_while_held
from telemetry.shared.errors import ToolError
from telemetry.shared.errors import OperationFailed
from telemetry.shared.scaling_group import ScalingGroups, refuse_while_launch_suspended

# stacks/constructs/scaling_node_group.py INSTANCE_WARMUP (a test holds them equal; importing
# the construct would load the CDK into every command).
INSTANCE_WARMUP_SECONDS = 900
DEFAULT_MIN_HEALTHY_PERCENT = 100
# Launch before terminate needs room above the desired capacity; Auto Scaling replaces at least
# one instance whatever the rounding, and the difference may not exceed 100 (StartInstanceRefresh,
# RefreshPreferences.MaxHealthyPercentage: 100-200).
LAUNCH_BEFORE_TERMINATE_MAX_PERCENT = 110
# DescribeInstanceRefreshes statuses (AWS Auto Scaling API Reference, InstanceRefresh.Status).
UNDER_WAY = frozenset({"Pending", "InProgress", "Cancelling", "RollbackInProgress", "Baking"})
SUCCEEDED = "Successful"
ENDED_BADLY = frozenset({"Failed", "Cancelled", "RollbackFailed", "RollbackSuccessful"})
# What a refresh's Preferences mean where DescribeInstanceRefreshes leaves one out: the API's
# defaults (API Reference, RefreshPreferences). An assumption: the API echoes every preference a
# refresh was started with; the others here have no default to compare with.
PREFERENCE_DEFAULTS = {"MinHealthyPercentage": 90, "SkipMatching": False, "AutoRollback": False}


def preferences(min_healthy: int) -> dict[str, Any]:
    launch_first = min_healthy == 100
    return {
        "MinHealthyPercentage": min_healthy,
        # Below 100, Auto Scaling terminates first and replaces within the capacity it has.
        "MaxHealthyPercentage": LAUNCH_BEFORE_TERMINATE_MAX_PERCENT if launch_first else 100,
        "InstanceWarmup": INSTANCE_WARMUP_SECONDS,
        "SkipMatching": True,
        "AutoRollback": False,
    }


def stop_alarms(config: EnvironmentConfig) -> list[str]:
    cluster = service_fabric_cluster_name(config)
    return [node_lifecycle_alarm_name(cluster, kind) for kind in REFRESH_STOP_ALARMS]


def refresh_request(config: EnvironmentConfig, min_healthy: int) -> dict[str, Any]:
    return {
        "AutoScalingGroupName": scaling_group_name(config),
        "Strategy": "Rolling",
        "Preferences": {**preferences(min_healthy), "AlarmSpecification": {"Alarms": stop_alarms(config)}},
    }


def plan(args: argparse.Namespace, config: EnvironmentConfig) -> int:
    request = refresh_request(config, args.min_healthy_percent)
    name = request["AutoScalingGroupName"]
    prefs = request["Preferences"]
    order = ("launch each replacement first (it joins the cluster in the launch hook), then terminate and drain "
             "the old instance" if args.min_healthy_percent == 100 else
             f"terminate and drain old instances first, keeping at least {args.min_healthy_percent}% in service")
    return output.dry_run_plan(
        args, config,
        summary=[f"{name}: instance refresh, minimum healthy {prefs['MinHealthyPercentage']}%, maximum "
                 f"{prefs['MaxHealthyPercentage']}%, warm-up {INSTANCE_WARMUP_SECONDS} s, skip matching",
                 f"  {order}",
                 f"  stops on: {', '.join(prefs['AlarmSpecification']['Alarms'])}"],
        would_read=[
            f"{name}'s instances and its {NODE_TYPE_TAG} tag (DescribeAutoScalingGroups): a group that is not a "
            f"{SCALING_NODE_TYPE} group is refused",
            f"{name}'s instance refreshes (DescribeInstanceRefreshes): one under way with these preferences (an "
            "earlier run's) is followed; one with others is refused",
            "which InService instances run an older launch template version (only those are replaced): none, and "
            "nothing is started",
            f"who holds the membership lock and the patch progress lease ({membership_lock_table_name(config)}): "
            "either held, and nothing is started",
            "the stop alarms' states (DescribeAlarms): one in ALARM, or missing, is refused",
        ],
        would_change=[
            f"start an instance refresh of {name} (StartInstanceRefresh) with these preferences",
            f"wait up to {args.timeout:.0f} s, a line every {args.poll_interval:g} s, until it ends",
        ],
        group=name, preferences=prefs,
    )  # fmt: skip


class InstanceRefreshes:
    """The Auto Scaling calls a refresh makes."""

    def __init__(self, session: Any) -> None:
        self._client = session.client("autoscaling")

    def latest(self, name: str) -> dict[str, Any] | None:
        found = self._client.describe_instance_refreshes(AutoScalingGroupName=name, MaxRecords=10)["InstanceRefreshes"]
        return found[0] if found else None  # newest first

    def get(self, name: str, refresh_id: str) -> dict[str, Any]:
        return self._client.describe_instance_refreshes(AutoScalingGroupName=name,
                                                        InstanceRefreshIds=[refresh_id])["InstanceRefreshes"][0]

    def start(self, request: dict[str, Any]) -> str | None:
        """The new refresh's id; None when one was started since we looked (InstanceRefreshInProgress,
        "an active instance refresh already exists")."""
        from botocore.exceptions import ClientError

        try:
            return self._client.start_instance_refresh(**request)["InstanceRefreshId"]
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            if code == "InstanceRefreshInProgress":
                return None
            if code == "LimitExceeded":
                raise OperationFailed(f"Auto Scaling refused the refresh of {request['AutoScalingGroupName']}: "
                                      f"{error.response['Error'].get('Message', code)}") from None
            raise


def refuse_alarming(session: Any, names: list[str]) -> None:
    """Exit 2 when a stop alarm is missing or already in ALARM. "If any of the alarms goes into ALARM
    state, the instance refresh fails" (RefreshPreferences.AlarmSpecification): one in ALARM now
    means a node already failed to join or drain, or a seed is down, and replacing nodes on top of
    that is what the alarm is there to stop. A missing one would not stop it at all."""
    found = {alarm["AlarmName"]: alarm for alarm in
             session.client("cloudwatch").describe_alarms(AlarmNames=names, AlarmTypes=["MetricAlarm"])["MetricAlarms"]}
    missing = [name for name in names if name not in found]
    if missing:
        raise ToolError(f"the refresh's stop alarm {missing[0]} does not exist: deploy the NodeLifecycle stack "
                        "(make deploy), then run again")
    alarming = [name for name in names if found[name]["StateValue"] == "ALARM"]
    if alarming:
        reason = found[alarming[0]].get("StateReason", "")
        raise ToolError(f"{alarming[0]} is in ALARM{f' ({reason})' if reason else ''}: the refresh would stop on it; "
                        "resolve what it reports (docs/day-2.md, \"Failure modes and what an operator does\"), then run again")


def other_preferences(refresh: dict[str, Any], request: dict[str, Any]) -> list[str]:
    """How a refresh under way differs from the one `request` would start ("" each: it is this
    command's, an earlier run's): its strategy, a desired configuration (this command sends none),
    and each preference the command sets."""
    def shown(value: Any) -> str:
        return "unset" if value is None else f"{len(value)} alarm(s)" if isinstance(value, list) else str(value)

    differences = []
    if refresh.get("Strategy", request["Strategy"]) != request["Strategy"]:
        differences.append(f"Strategy {refresh['Strategy']} (here {request['Strategy']})")
    if refresh.get("DesiredConfiguration"):
        differences.append("a DesiredConfiguration (here none)")
    found = refresh.get("Preferences") or {}
    for key, wanted in request["Preferences"].items():
        value = found.get(key, PREFERENCE_DEFAULTS.get(key))
        if key == "AlarmSpecification":
            value, wanted = sorted((value or {}).get("Alarms", [])), sorted(wanted["Alarms"])
        if value != wanted:
            differences.append(f"{key} {shown(value)} (here {shown(wanted)})")
    return differences


def someone_elses(name: str, refresh: dict[str, Any], differences: list[str]) -> str:
    started = f", started {refresh['StartTime']:%Y-%m-%d %H:%M} UTC" if refresh.get("StartTime") else ""
    return (f"an instance refresh of {name} is already under way ({refresh['InstanceRefreshId']}, {refresh['Status']}"
            f"{started}) that this command did not start: {', '.join(differences)}; wait for it "
            f"(aws autoscaling describe-instance-refreshes --auto-scaling-group-name {name}) or cancel it "
            "(aws autoscaling cancel-instance-refresh), then run again")


def ours_under_way(refreshes: InstanceRefreshes, request: dict[str, Any]) -> dict[str, Any] | None:
    """The group's refresh under way when it is this command's (an earlier run's), None when none
    is; someone else's is refused (ToolError) naming it."""
    name = request["AutoScalingGroupName"]
    latest = refreshes.latest(name)
    if not latest or latest["Status"] not in UNDER_WAY:
        return None
    differences = other_preferences(latest, request)
    if differences:
        raise ToolError(someone_elses(name, latest, differences))
    return latest


def progress(refresh: dict[str, Any]) -> str:
    done = refresh.get("PercentageComplete", 0)
    left = refresh.get("InstancesToUpdate")
    reason = f": {refresh['StatusReason']}" if refresh.get("StatusReason") else ""
    return f"{refresh['Status']}, {done}% done" + (f", {left} instance(s) to replace" if left is not None else "") + reason


def refresh(args: argparse.Namespace, session_factory: Callable[[str], Any], *,
            clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> int:
    config = load_environment(read_environments(), args.env)
    if args.dry_run:
        return plan(args, config)
    request = refresh_request(config, args.min_healthy_percent)
    name = request["AutoScalingGroupName"]
    session = session_factory(config.region)
    state = ScalingGroups(session).state(name)
    if state.node_type != SCALING_NODE_TYPE:
        raise ToolError(f"{name} is not a Service Fabric scaling node group ({NODE_TYPE_TAG} is "
                        f"'{state.node_type}', not {SCALING_NODE_TYPE}); only that group is refreshed")
    refreshes = InstanceRefreshes(session)
    under_way = ours_under_way(refreshes, request)
    if under_way is None and state.out_of_date == ():
        which = (f"every InService instance ({state.in_service}) already runs the group's launch template version"
                 if state.in_service else "it has no InService instance")
        print(f"{name}: {which}: no instance is out of date, so no refresh was started (a new Windows image reaches "
              "the launch template with telemetry deploy)")
        if args.format == "json":
            output.document({"group": name, "refresh_id": None, "status": "UpToDate"})
        return 0
    if under_way is None:
        refuse_while_launch_suspended(state, config.region, "an instance refresh")
        refuse_while_held(config, session, "telemetry cluster refresh")
        refuse_alarming(session, request["Preferences"]["AlarmSpecification"]["Alarms"])
        refresh_id = refreshes.start(request)
        if refresh_id is None:  # one started since we looked: this command's (a run beside this one) or not
            under_way = ours_under_way(refreshes, request)
            if under_way is None:
                raise OperationFailed(f"Auto Scaling answered that a refresh of {name} is under way, and none is now; "
                                      "run again")
        else:
            older = f", replacing the {len(state.out_of_date)} on an older launch template version" \
                if state.out_of_date else ""
            print(f"{name}: instance refresh {refresh_id} started ({state.progress()}){older}; each replacement joins "
                  "the cluster before an old node is drained")
    if under_way is not None:
        refresh_id = under_way["InstanceRefreshId"]
        print(f"{name}: instance refresh {refresh_id} is under way ({under_way['Status']}) with this command's "
              "preferences, started by an earlier run of it: following it")
    started = clock()
    while True:
        current = refreshes.get(name, refresh_id)
        elapsed = clock() - started
        print(f"[{elapsed:5.0f} s] {name} {progress(current)}", flush=True)
        status = current["Status"]
        if status == SUCCEEDED:
            if args.format == "json":
                output.document({"group": name, "refresh_id": refresh_id, "status": status})
            return 0
        if status in ENDED_BADLY:
            raise OperationFailed(f"instance refresh {refresh_id} of {name} ended {status}: "
                                  f"{current.get('StatusReason', 'no reason given')}; the node lifecycle alarms and "
                                  "the group's activity history say which node")
        if elapsed >= args.timeout:
            raise OperationFailed(f"instance refresh {refresh_id} of {name} still {status} after {args.timeout:.0f} s; "
                                  "it goes on: follow it with aws autoscaling describe-instance-refreshes")
        sleep(args.poll_interval)


def _percent(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if not 0 <= number <= 100:
        raise argparse.ArgumentTypeError(f"must be 0-100, got {number}")
    return number


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (f"{parser.description or ''} Before starting a refresh it reads the cluster's membership "
                          "lock and the patch progress lease (DynamoDB) and starts nothing while either is held; it "
                          "takes neither.").strip()
    parser.add_argument("--min-healthy-percent", type=_percent, default=DEFAULT_MIN_HEALTHY_PERCENT, metavar="N",
                        help="percent of the group kept in service (default 100: each replacement joins before an "
                             "old node drains; below 100, old nodes are drained first)")
    parser.add_argument("--timeout", type=positive_seconds, default=4 * 3600.0,
                        help="seconds to follow the refresh (default 14400); it goes on after")
    parser.add_argument("--poll-interval", type=positive_seconds, default=30.0, help="seconds between progress lines (default 30)")
    parser.add_argument("--dry-run", action="store_true",
                        help="offline: print the refresh's preferences and what a run would read from Auto Scaling "
                             "first; call and change nothing")  # fmt: skip


def run(args: argparse.Namespace, session_factory: Callable[[str], Any]) -> int:
    return refresh(args, session_factory)


if __name__ == "__main__":  # run by path, as before the one front door
    from telemetry.shared.errors import moved

    raise SystemExit(moved("cluster refresh"))
