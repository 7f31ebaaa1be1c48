"""`telemetry cluster refresh` (telemetry/commands/cluster/refresh.py): Auto Scaling answered by botocore's
Stubber, which checks every request against the real API model (StartInstanceRefresh's
Preferences included) and raises the errors the model documents (InstanceRefreshInProgress,
LimitExceeded)."""

from __future__ import annotations

import datetime
import json

import boto3
import pytest
from botocore.stub import Stubber

from telemetry import cli
from telemetry.commands.cluster import refresh as refresh_nodes

GROUP = "telemetry-dev-sf-scaling"
ALARMS = [f"telemetry-dev-sf-lifecycle-{kind}" for kind in ("JoinFailed", "DrainFailed", "SeedNodeDown")]
NOW = datetime.datetime(2026, 11, 26, tzinfo=datetime.timezone.utc)


LOCKS = "telemetry-dev-sf-membership-lock"


class StubbedSession:
    def __init__(self) -> None:
        self.clients = {service: boto3.client(service, region_name="eu-west-1", aws_access_key_id="x",
                                              aws_secret_access_key="x")
                        for service in ("autoscaling", "cloudwatch", "dynamodb")}
        self.stubber = Stubber(self.clients["autoscaling"])
        self.alarms = Stubber(self.clients["cloudwatch"])
        self.locks = Stubber(self.clients["dynamodb"])

    def client(self, service: str):
        return self.clients[service]


@pytest.fixture
def aws():
    session = StubbedSession()
    with session.stubber, session.alarms, session.locks:
        yield session
    session.stubber.assert_no_pending_responses()
    session.alarms.assert_no_pending_responses()
    session.locks.assert_no_pending_responses()


def locks_are(aws, lock: dict | None = None, patch: dict | None = None) -> None:
    """GetItem of the membership lock, then of the patch progress lease (each absent unless given)."""
    for name, item in (("cluster-membership", lock), ("patch-progress", patch)):
        aws.locks.add_response("get_item", {"Item": item} if item else {},
                               {"TableName": LOCKS, "Key": {"LockName": {"S": name}}, "ConsistentRead": True})
        if lock:
            return  # a held lock refuses before the lease is read


def alarms_are(aws, states: dict[str, str] | None = None, *, missing: str = "") -> None:
    """What a run reads before it starts a refresh: nobody holds the membership lock or the patch
    progress lease (locks_are), then DescribeAlarms of the stop alarms: each OK unless `states`
    says otherwise."""
    locks_are(aws)
    states = states or {}
    found = [{"AlarmName": name, "StateValue": states.get(name, "OK"),
              "StateReason": "Threshold Crossed: 1 datapoint [1.0] was greater than or equal to the threshold (1.0)."}
             for name in ALARMS if name != missing]  # fmt: skip
    aws.alarms.add_response("describe_alarms", {"MetricAlarms": found},
                            {"AlarmNames": ALARMS, "AlarmTypes": ["MetricAlarm"]})


def group_is(stubber: Stubber, node_type: str = "ScalingNodeType", versions: tuple[str, str] | None = None,
             group_version: str = "7", suspended: tuple[str, ...] = ()) -> None:
    """The group of two InService instances; with `versions`, the launch template version each
    instance runs and the group's own (`group_version`), as DescribeAutoScalingGroups gives them
    (LaunchTemplate {LaunchTemplateId, LaunchTemplateName, Version} on the group and each instance)."""
    instance = {"InstanceId": "i-0abc", "AvailabilityZone": "eu-west-1a", "LifecycleState": "InService",
                "HealthStatus": "Healthy", "ProtectedFromScaleIn": False}
    template = {"LaunchTemplateId": "lt-0scaling", "LaunchTemplateName": "telemetry-dev-sf-scaling"}
    instances = [instance, {**instance, "InstanceId": "i-0def"}]
    launch = {}
    if versions is not None:
        instances = [{**i, "LaunchTemplate": {**template, "Version": v}} for i, v in zip(instances, versions)]
        launch = {"LaunchTemplate": {**template, "Version": group_version}}
    stubber.add_response("describe_auto_scaling_groups", {"AutoScalingGroups": [{
        "AutoScalingGroupName": GROUP, "MinSize": 0, "MaxSize": 3, "DesiredCapacity": 2, "DefaultCooldown": 300,
        "AvailabilityZones": ["eu-west-1a"], "HealthCheckType": "EC2", "CreatedTime": NOW, **launch,
        "Instances": instances,
        "SuspendedProcesses": [{"ProcessName": p, "SuspensionReason": "User suspended at 2026-11-26T00:00:00Z"} for p in suspended],
        "Tags": [{"Key": "sf:nodetype", "Value": node_type, "ResourceId": GROUP, "ResourceType": "auto-scaling-group",
                  "PropagateAtLaunch": True}]}]}, {"AutoScalingGroupNames": [GROUP]})
    stubber.add_response("describe_scaling_activities", {"Activities": []},
                         {"AutoScalingGroupName": GROUP, "MaxRecords": 20})


def refreshes_are(stubber: Stubber, *statuses: str, preferences: dict | None = None) -> None:
    """The group's refreshes, newest first, each with `preferences` (none given: the console's
    defaults, Preferences left out)."""
    stubber.add_response("describe_instance_refreshes", {"InstanceRefreshes": [
        {"InstanceRefreshId": f"r-{i}", "AutoScalingGroupName": GROUP, "Status": status, "StartTime": NOW,
         **({"Preferences": preferences} if preferences is not None else {})}
        for i, status in enumerate(statuses)]}, {"AutoScalingGroupName": GROUP, "MaxRecords": 10})


def progress_is(stubber: Stubber, status: str, percent: int, left: int, reason: str = "") -> None:
    answer = {"InstanceRefreshId": "r-new", "AutoScalingGroupName": GROUP, "Status": status,
              "PercentageComplete": percent, "InstancesToUpdate": left, **({"StatusReason": reason} if reason else {})}
    stubber.add_response("describe_instance_refreshes", {"InstanceRefreshes": [answer]},
                         {"AutoScalingGroupName": GROUP, "InstanceRefreshIds": ["r-new"]})


EXPECTED_REQUEST = {
    "AutoScalingGroupName": GROUP,
    "Strategy": "Rolling",
    "Preferences": {"MinHealthyPercentage": 100, "MaxHealthyPercentage": 110, "InstanceWarmup": 900,
                    "SkipMatching": True, "AutoRollback": False, "AlarmSpecification": {"Alarms": ALARMS}},
}


def run(argv, session) -> int:
    return cli.main(["cluster", "refresh", "--env", "dev", "--poll-interval", "0.001", *argv],
                    session_factory=lambda region: session)


def test_starts_a_launch_first_refresh_that_stops_on_the_lifecycle_alarms_and_follows_it(aws, capsys):
    group_is(aws.stubber)
    refreshes_are(aws.stubber, "Successful", "Cancelled")  # earlier refreshes that ended
    alarms_are(aws)
    aws.stubber.add_response("start_instance_refresh", {"InstanceRefreshId": "r-new"}, EXPECTED_REQUEST)
    progress_is(aws.stubber, "InProgress", 0, 2)
    progress_is(aws.stubber, "InProgress", 50, 1)
    progress_is(aws.stubber, "Successful", 100, 0)
    assert run(["--format", "json"], aws) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == {"group": GROUP, "refresh_id": "r-new", "status": "Successful"}
    assert "instance refresh r-new started (desired 2: InService 2)" in err
    assert f"{GROUP} InProgress, 50% done, 1 instance(s) to replace" in err


def test_the_minimum_healthy_percentage_below_100_drains_first(aws):
    group_is(aws.stubber)
    refreshes_are(aws.stubber)
    request = {**EXPECTED_REQUEST, "Preferences": {**EXPECTED_REQUEST["Preferences"], "MinHealthyPercentage": 50,
                                                   "MaxHealthyPercentage": 100}}
    alarms_are(aws)
    aws.stubber.add_response("start_instance_refresh", {"InstanceRefreshId": "r-new"}, request)
    progress_is(aws.stubber, "Successful", 100, 0)
    assert run(["--min-healthy-percent", "50"], aws) == 0


@pytest.mark.parametrize("status", ["InProgress", "Pending", "Cancelling", "RollbackInProgress", "Baking"])
def test_someone_elses_refresh_under_way_is_refused_in_one_line_naming_it(aws, capsys, status):
    """A refresh started in the console (its defaults: no skip matching, 90% healthy) is not this
    command's: refused, with what differs."""
    group_is(aws.stubber)
    refreshes_are(aws.stubber, status)
    assert run([], aws) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"telemetry: error: an instance refresh of {GROUP} is already under way (r-0, {status}, started "
                   "2026-11-26 00:00 UTC) that this command did not start: MinHealthyPercentage 90 (here 100), "
                   "MaxHealthyPercentage unset (here 110), InstanceWarmup unset (here 900), SkipMatching False (here "
                   "True), AlarmSpecification 0 alarm(s) (here 3 alarm(s)); wait for it (aws autoscaling "
                   f"describe-instance-refreshes --auto-scaling-group-name {GROUP}) or cancel it (aws autoscaling "
                   "cancel-instance-refresh), then run again"]


@pytest.mark.parametrize("status", ["InProgress", "Pending", "Baking"])
def test_run_again_it_follows_the_refresh_an_earlier_run_started(aws, capsys, status):
    """The operator's process died (or was stopped) while it followed its refresh: the same command
    again finds it under way with its own preferences and follows it to the end, starting none."""
    group_is(aws.stubber, versions=("6", "7"))
    refreshes_are(aws.stubber, status, "Successful", preferences=EXPECTED_REQUEST["Preferences"])
    aws.stubber.add_response("describe_instance_refreshes", {"InstanceRefreshes": [
        {"InstanceRefreshId": "r-0", "AutoScalingGroupName": GROUP, "Status": "Successful", "PercentageComplete": 100,
         "InstancesToUpdate": 0}]}, {"AutoScalingGroupName": GROUP, "InstanceRefreshIds": ["r-0"]})
    assert run([], aws) == 0  # no DescribeAlarms, no StartInstanceRefresh: the stubbers would have raised
    out = capsys.readouterr().out
    assert (f"{GROUP}: instance refresh r-0 is under way ({status}) with this command's preferences, started by an "
            "earlier run of it: following it") in out
    assert f"{GROUP} Successful, 100% done, 0 instance(s) to replace" in out


def test_run_again_with_another_minimum_healthy_percentage_is_someone_elses(aws, capsys):
    group_is(aws.stubber)
    refreshes_are(aws.stubber, "InProgress", preferences=EXPECTED_REQUEST["Preferences"])
    assert run(["--min-healthy-percent", "50"], aws) == 2
    assert "that this command did not start: MinHealthyPercentage 100 (here 50), MaxHealthyPercentage 110 (here 100);" \
        in capsys.readouterr().err


def test_a_group_whose_instances_all_run_its_launch_template_version_is_said_up_to_date_and_not_refreshed(aws, capsys):
    """Skip matching would replace nothing ("the instance refresh will succeed immediately without
    replacing any instances", User Guide): no refresh is started, and the command says why."""
    group_is(aws.stubber, versions=("7", "7"))
    refreshes_are(aws.stubber, "Successful")
    assert run(["--format", "json"], aws) == 0  # no DescribeAlarms, no StartInstanceRefresh
    out, err = capsys.readouterr()
    assert json.loads(out) == {"group": GROUP, "refresh_id": None, "status": "UpToDate"}
    assert (f"{GROUP}: every InService instance (2) already runs the group's launch template version: no instance is "
            "out of date, so no refresh was started") in err


def test_a_refresh_says_how_many_instances_it_replaces(aws, capsys):
    group_is(aws.stubber, versions=("6", "7"))
    refreshes_are(aws.stubber)
    alarms_are(aws)
    aws.stubber.add_response("start_instance_refresh", {"InstanceRefreshId": "r-new"}, EXPECTED_REQUEST)
    progress_is(aws.stubber, "Successful", 100, 0)
    assert run([], aws) == 0
    assert (f"{GROUP}: instance refresh r-new started (desired 2: InService 2), replacing the 1 on an older launch "
            "template version; each replacement joins") in capsys.readouterr().out


def test_a_group_on_a_symbolic_launch_template_version_is_refreshed_and_auto_scaling_decides(aws):
    group_is(aws.stubber, versions=("7", "7"), group_version="$Latest")
    refreshes_are(aws.stubber)
    alarms_are(aws)
    aws.stubber.add_response("start_instance_refresh", {"InstanceRefreshId": "r-new"}, EXPECTED_REQUEST)
    progress_is(aws.stubber, "Successful", 100, 0)
    assert run([], aws) == 0


@pytest.mark.parametrize(("theirs", "exit_code", "fragment"), [
    (None, 2, "that this command did not start: MinHealthyPercentage 90 (here 100),"),
    (EXPECTED_REQUEST["Preferences"], 0, "with this command's preferences, started by an earlier run of it"),
])
def test_a_refresh_started_since_we_looked_is_followed_when_it_is_this_commands(aws, capsys, theirs, exit_code,
                                                                                fragment):
    """StartInstanceRefresh answers InstanceRefreshInProgress ("an active instance refresh already
    exists"): the refresh under way is read again and judged as one found before starting."""
    group_is(aws.stubber)
    refreshes_are(aws.stubber)
    alarms_are(aws)
    aws.stubber.add_client_error("start_instance_refresh", service_error_code="InstanceRefreshInProgress",
                                 service_message="exists", http_status_code=400, expected_params=EXPECTED_REQUEST)
    refreshes_are(aws.stubber, "InProgress", preferences=theirs)
    if exit_code == 0:
        aws.stubber.add_response("describe_instance_refreshes", {"InstanceRefreshes": [
            {"InstanceRefreshId": "r-0", "AutoScalingGroupName": GROUP, "Status": "Successful"}]},
            {"AutoScalingGroupName": GROUP, "InstanceRefreshIds": ["r-0"]})
    assert run([], aws) == exit_code
    captured = capsys.readouterr()
    assert fragment in (captured.err if exit_code else captured.out)


def test_too_many_refreshes_is_one_line(aws, capsys):
    group_is(aws.stubber)
    refreshes_are(aws.stubber)
    alarms_are(aws)
    aws.stubber.add_client_error("start_instance_refresh", service_error_code="LimitExceeded", service_message="too many",
                                 http_status_code=400, expected_params=EXPECTED_REQUEST)
    assert run([], aws) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["telemetry: error: Auto Scaling refused the refresh of telemetry-dev-sf-scaling: too many"]


@pytest.mark.parametrize("missing", ["", ALARMS[2]])
def test_a_stop_alarm_in_alarm_or_missing_is_refused_before_the_refresh_starts(aws, capsys, missing):
    group_is(aws.stubber)
    refreshes_are(aws.stubber)
    alarms_are(aws, {ALARMS[1]: "ALARM"} if not missing else {}, missing=missing)
    assert run([], aws) == 2  # and no StartInstanceRefresh: the stubber would have raised on it
    (line,) = capsys.readouterr().err.strip().splitlines()
    if missing:
        assert line == (f"telemetry: error: the refresh's stop alarm {missing} does not exist: deploy the "
                        "NodeLifecycle stack (make deploy), then run again")
    else:
        assert line.startswith(f"telemetry: error: {ALARMS[1]} is in ALARM (Threshold Crossed: "), line
        assert line.endswith("the refresh would stop on it; resolve what it reports (docs/day-2.md, \"Failure modes "
                             "and what an operator does\"), then run again"), line


def test_a_refresh_stopped_by_an_alarm_fails_with_its_reason(aws, capsys):
    group_is(aws.stubber)
    refreshes_are(aws.stubber)
    alarms_are(aws)
    aws.stubber.add_response("start_instance_refresh", {"InstanceRefreshId": "r-new"}, EXPECTED_REQUEST)
    reason = f"The instance refresh failed because alarm {ALARMS[0]} went into ALARM state"
    progress_is(aws.stubber, "Failed", 50, 1, reason)
    assert run([], aws) == 1
    assert f"instance refresh r-new of {GROUP} ended Failed: {reason}" in capsys.readouterr().err


@pytest.mark.parametrize("holder", ["lock", "patch"])
@pytest.mark.overlap
def test_a_held_membership_lock_or_patch_lease_starts_nothing_and_says_who_holds_it(aws, capsys, holder):
    import time

    since = int(time.time()) - 90
    group_is(aws.stubber, versions=("6", "7"))
    refreshes_are(aws.stubber)
    if holder == "lock":
        locks_are(aws, lock={"LockName": {"S": "cluster-membership"}, "Owner": {"S": "patch:run-4"},
                             "ExpiresAt": {"N": str(since + 7200)}, "Intent": {"S": "patch"}, "Node": {"S": "seed-1"},
                             "Since": {"N": str(since)}})
    else:
        locks_are(aws, patch={"LockName": {"S": "patch-progress"}, "Owner": {"S": "patch:run-4"},
                              "LeaseUntil": {"N": str(since + 7200)}, "Current": {"S": "seed-1"}})

    assert run([], aws) == 1  # no DescribeAlarms, no StartInstanceRefresh: the stubbers would have raised

    (line,) = capsys.readouterr().err.strip().splitlines()
    if holder == "lock":
        assert line.startswith(f"telemetry: error: the membership lock ({LOCKS}) is held by patch:run-4 (intent patch, "
                               f"node seed-1) since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(since))}; "
                               "telemetry cluster refresh starts nothing while another operation holds the cluster")
    else:
        assert line.startswith("telemetry: error: a patch run (patch:run-4, at seed-1) holds the patch progress lease")


def test_help_says_what_refresh_reads_before_a_start(capsys):
    assert cli.main(["cluster", "refresh", "--help"]) == 0
    assert ("Before starting a refresh it reads the cluster's membership lock and the patch progress lease "
            "(DynamoDB) and starts nothing while either is held; it takes neither.") in " ".join(
        capsys.readouterr().out.split())


def test_only_the_scaling_node_group_is_refreshed(aws, capsys):
    group_is(aws.stubber, node_type="PrimaryNodeType")
    assert run([], aws) == 2
    assert "is not a Service Fabric scaling node group" in capsys.readouterr().err


def test_the_warm_up_and_the_stop_alarms_are_the_stacks(synthesized):
    """The refresh names what the stacks create: the group's warm-up and the lifecycle alarms."""
    from stacks.constructs.scaling_node_group import INSTANCE_WARMUP

    assert refresh_nodes.INSTANCE_WARMUP_SECONDS == INSTANCE_WARMUP.to_seconds()
    resources = synthesized("dev").stacks["node_lifecycle"]["Resources"].values()
    names = {r["Properties"].get("AlarmName") for r in resources if r["Type"] == "AWS::CloudWatch::Alarm"}
    assert set(ALARMS) <= names


def test_bad_minimum_is_one_line(capsys):
    assert cli.main(["cluster", "refresh", "--env", "dev", "--min-healthy-percent", "120"]) == 2
    assert "must be 0-100, got 120" in capsys.readouterr().err


def test_the_readme_command_plans_offline(capsys):
    """docs/day-2.md's `telemetry cluster refresh --env prod`, as its dry run: the preferences, no AWS."""
    assert cli.main(["cluster", "refresh", "--env", "prod", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "telemetry-prod-sf-scaling: instance refresh, minimum healthy 100%, maximum 110%, warm-up 900 s" in out
    assert "stops on: telemetry-prod-sf-lifecycle-JoinFailed, telemetry-prod-sf-lifecycle-DrainFailed" in out


@pytest.mark.overlap
def test_a_refresh_while_launch_is_suspended_is_refused_with_the_resume_command(aws, capsys):
    """An instance refresh replaces no instance while Launch is suspended (EC2 Auto Scaling User
    Guide, "How suspended processes affect other processes"): refused before it starts (no
    StartInstanceRefresh: the Stubber would fail on an unexpected call)."""
    group_is(aws.stubber, versions=("6", "7"), suspended=("Launch",))
    refreshes_are(aws.stubber)

    assert run([], aws) == 1

    err = capsys.readouterr().err
    assert f"the Launch process of {GROUP} is suspended, so an instance refresh would launch no instance" in err
    assert f"aws autoscaling resume-processes --auto-scaling-group-name {GROUP} --scaling-processes Launch" in err
