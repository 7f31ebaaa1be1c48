"""`telemetry cluster scale` (telemetry/commands/cluster/scale.py) against moto's Auto Scaling (and scripted group states for lifecycle waits)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from telemetry import cli
from telemetry.commands.cluster import scale
from telemetry.shared.scaling_group import GroupState
from tests.conftest import MOTO_IMAGE

REGION = "eu-west-1"
SCALING = "telemetry-dev-sf-scaling"
OTHER = "telemetry-dev-other"  # a group of another node type
LOCKS = "telemetry-dev-sf-membership-lock"


@pytest.fixture
def aws(moto_session):
    session = moto_session
    ec2 = session.client("ec2")
    image = MOTO_IMAGE
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    ec2.create_launch_template(LaunchTemplateName="nodes", LaunchTemplateData={"ImageId": image, "InstanceType": "m6i.xlarge"})
    autoscaling = session.client("autoscaling")
    for name, node_type, size in ((SCALING, "ScalingNodeType", (0, 3, 1)), (OTHER, "PrimaryNodeType", (1, 1, 1))):
        autoscaling.create_auto_scaling_group(
            AutoScalingGroupName=name, LaunchTemplate={"LaunchTemplateName": "nodes"}, VPCZoneIdentifier=subnet,
            MinSize=size[0], MaxSize=size[1], DesiredCapacity=size[2],
            Tags=[{"Key": "sf:nodetype", "Value": node_type, "PropagateAtLaunch": True}],
        )
    session.client("dynamodb").create_table(  # the membership lock table, as the NodeLifecycle stack makes it
        TableName=LOCKS, KeySchema=[{"AttributeName": "LockName", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "LockName", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST")
    for hook, transition in (("sf-join-cluster", "LAUNCHING"), ("sf-leave-cluster", "TERMINATING")):
        autoscaling.put_lifecycle_hook(AutoScalingGroupName=SCALING, LifecycleHookName=hook,
                                       LifecycleTransition=f"autoscaling:EC2_INSTANCE_{transition}",
                                       HeartbeatTimeout=600, DefaultResult="CONTINUE")
    yield session


def run(argv, session) -> int:
    return cli.main(["cluster", "scale", *argv], session_factory=lambda region: session)


def group(session, name=SCALING) -> dict:
    return session.client("autoscaling").describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]


def test_scales_out_within_the_limits_and_waits_until_steady(aws, capsys):
    assert run(["--env", "dev", "--desired", "3", "--poll-interval", "0"], aws) == 0
    state = group(aws)
    assert state["DesiredCapacity"] == 3
    assert [i["LifecycleState"] for i in state["Instances"]] == ["InService"] * 3
    out = capsys.readouterr().out
    assert f"{SCALING}: desired 1: InService 1 -> desired 3 (limits 0-3)" in out
    assert f"{SCALING} desired 3: InService 3" in out
    assert "steady with 3 node(s) in service" in out


def test_without_desired_the_empty_group_gets_the_configured_baseline(aws, capsys):
    """The stack creates the group empty; after bootstrap, scale.py brings it to the configured
    minimum and desired size (dev: 0 and 1), through the hooks."""
    autoscaling = aws.client("autoscaling")
    autoscaling.update_auto_scaling_group(AutoScalingGroupName=SCALING, MinSize=0, DesiredCapacity=0)
    autoscaling.update_auto_scaling_group(AutoScalingGroupName=SCALING, MaxSize=3)
    assert run(["--env", "dev", "--poll-interval", "0"], aws) == 0
    state = group(aws)
    assert (state["MinSize"], state["DesiredCapacity"]) == (0, 1)
    assert "-> desired 1 (limits 0-3)" in capsys.readouterr().out


def test_the_configured_minimum_is_applied_to_the_environments_group(aws, monkeypatch, capsys):
    from stacks import config as config_module

    real = config_module.load_environment

    def with_minimum(environments, name):
        loaded = real(environments, name)
        fabric = loaded.service_fabric.model_copy(update={"scaling_min_nodes": 1})
        return loaded.model_copy(update={"service_fabric": fabric})

    monkeypatch.setattr(scale, "load_environment", with_minimum)
    assert run(["--env", "dev", "--desired", "2", "--poll-interval", "0"], aws) == 0
    assert (group(aws)["MinSize"], group(aws)["DesiredCapacity"]) == (1, 2)
    assert refused(aws, capsys, ["--env", "dev", "--desired", "0"]) == f"telemetry: error: 0 is outside {SCALING}'s limits 1-3"


def test_scales_in(aws):
    assert run(["--env", "dev", "--desired", "0", "--poll-interval", "0"], aws) == 0
    assert group(aws)["Instances"] == []


def test_dry_run_plans_offline_and_changes_nothing(aws, capsys):
    def no_session(region):
        raise AssertionError("a dry run asked for an AWS session")

    assert cli.main(["cluster", "scale", "--env", "dev", "--desired", "2", "--dry-run"], session_factory=no_session) == 0
    assert group(aws)["DesiredCapacity"] == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{SCALING}: -> desired 2 (limits 0-3, from cdk.json)"
    assert out[2].startswith(f"  - {SCALING}'s current desired capacity, limits, instances")
    assert out[-1] == "dry run: nothing was read from AWS, nothing was changed"


def test_a_run_answers_in_json_once_steady_with_its_progress_on_stderr(aws, capsys):
    assert run(["--env", "dev", "--desired", "2", "--poll-interval", "0", "--format", "json"], aws) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == {"group": SCALING, "desired": 2, "steady": True}
    assert f"{SCALING} is steady with 2 node(s) in service" in err


@pytest.mark.overlap
def test_a_held_membership_lock_or_patch_lease_changes_nothing_and_says_who_holds_it(aws, capsys):
    import time

    dynamodb = aws.client("dynamodb")
    since = int(time.time()) - 300
    dynamodb.put_item(TableName=LOCKS, Item={
        "LockName": {"S": "cluster-membership"}, "Owner": {"S": "scale-in:i-0aaa:exec-3"},
        "ExpiresAt": {"N": str(since + 3600)}, "Intent": {"S": "drain"}, "Node": {"S": "scale-2"},
        "Since": {"N": str(since)}})  # fmt: skip

    assert run(["--env", "dev", "--desired", "3", "--poll-interval", "0"], aws) == 1

    (line,) = capsys.readouterr().err.strip().splitlines()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since))
    assert line.startswith(f"telemetry: error: the membership lock ({LOCKS}) is held by scale-in:i-0aaa:exec-3 (intent "
                           f"drain, node scale-2) since {stamp}; telemetry cluster scale starts nothing while")
    assert group(aws)["DesiredCapacity"] == 1
    # A patch run's lease refuses as well; a group already at the size is only waited for.
    dynamodb.delete_item(TableName=LOCKS, Key={"LockName": {"S": "cluster-membership"}})
    dynamodb.put_item(TableName=LOCKS, Item={"LockName": {"S": "patch-progress"}, "Owner": {"S": "patch:run-2"},
                                             "LeaseUntil": {"N": str(time.time() + 600)}, "Current": {"S": "seed-2"}})
    assert run(["--env", "dev", "--desired", "3", "--poll-interval", "0"], aws) == 1
    assert "a patch run (patch:run-2, at seed-2) holds the patch progress lease" in capsys.readouterr().err
    assert run(["--env", "dev", "--desired", "1", "--poll-interval", "0"], aws) == 0
    assert group(aws)["DesiredCapacity"] == 1


def test_help_says_what_scale_reads_before_a_change(capsys):
    assert cli.main(["cluster", "scale", "--help"]) == 0
    assert ("Before changing the size it reads the cluster's membership lock and the patch progress lease (DynamoDB) "
            "and changes nothing while either is held; it takes neither.") in " ".join(capsys.readouterr().out.split())


def refused(session, capsys, argv) -> str:
    assert run(argv, session) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    (line,) = captured.err.strip().splitlines()
    return line


def test_refuses_a_size_outside_the_limits(aws, capsys):
    assert refused(aws, capsys, ["--env", "dev", "--desired", "4"]) == f"telemetry: error: 4 is outside {SCALING}'s limits 0-3"
    assert group(aws)["DesiredCapacity"] == 1


def test_refuses_any_group_but_the_scaling_node_group(aws, capsys):
    line = refused(aws, capsys, ["--env", "dev", "--desired", "0", "--group", OTHER])
    assert line.startswith(f"telemetry: error: {OTHER} is not a Service Fabric scaling node group (sf:nodetype is 'PrimaryNodeType'")
    assert group(aws, OTHER)["DesiredCapacity"] == 1


def test_unknown_group_is_one_line(aws, capsys):
    line = refused(aws, capsys, ["--env", "dev", "--desired", "1", "--group", "nope"])
    assert line == "telemetry: error: Auto Scaling group nope does not exist; is the ServiceFabric stack deployed?"


class ScriptedGroups:
    def __init__(self, states):
        self.states = list(states)

    def state(self, name):
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]


def state(desired, *lifecycle, activities=0):
    return GroupState(SCALING, 0, 3, desired, tuple(lifecycle), activities, "ScalingNodeType")


def test_waits_for_every_lifecycle_action_and_activity_to_finish():
    lines, now = [], [0.0]
    states = [
        state(3, "InService", "Pending:Wait", "Pending", activities=2),
        state(3, "InService", "InService", "Pending:Wait", activities=1),
        state(3, "InService", "InService", "InService", activities=1),  # activity still closing
        state(3, "InService", "InService", "InService"),
    ]
    steady = scale.wait_until_steady(ScriptedGroups(states), SCALING, 3, timeout_s=600, poll_interval_s=20,
                                     say=lines.append, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert steady
    assert lines[0] == f"[    0 s] {SCALING} desired 3: InService 1, Pending 1, Pending:Wait 1; 2 activity in progress"
    assert len(lines) == 4


def test_a_stuck_drain_times_out_with_exit_1(aws, monkeypatch, capsys):
    stuck = state(0, "Terminating:Wait")
    monkeypatch.setattr(scale.ScalingGroups, "state", lambda self, name: stuck)
    monkeypatch.setattr(scale.ScalingGroups, "set_desired", lambda self, name, desired: None)
    monkeypatch.setattr(scale.ScalingGroups, "set_size", lambda self, name, minimum, desired: None)
    assert run(["--env", "dev", "--desired", "0", "--timeout", "0", "--poll-interval", "0"], aws) == 1
    err = capsys.readouterr().err
    assert f"telemetry: error: {SCALING} not steady after 0 s" in err and "Traceback" not in err


def test_help_describes_every_option():
    result = subprocess.run([str(Path(sys.executable).parent / "telemetry"), "cluster", "scale", "--help"],
                            capture_output=True, text=True, check=True)
    for option in ("--env", "--desired", "--group", "--timeout", "--poll-interval", "--dry-run"):
        assert option in result.stdout


def test_an_instance_retained_after_a_failed_drain_does_not_keep_the_group_from_steady():
    """A retained instance (Terminating:Retained, a LifecycleState in botocore's autoscaling model)
    is outside desired capacity ("Manage retained instances"); until an operator terminates it the
    group is steady at its desired size without it."""
    assert "Terminating:Retained" in _lifecycle_states()
    state = GroupState("g", 0, 6, 2, ("InService", "InService", "Terminating:Retained"), 0, "ScalingNodeType")

    assert state.retained == 1 and state.steady_at(2)
    assert not GroupState("g", 0, 6, 2, ("InService", "Terminating:Wait", "InService"), 0, "ScalingNodeType").steady_at(2)


def _lifecycle_states() -> list[str]:
    import botocore.session

    return botocore.session.get_session().get_service_model("autoscaling").shape_for("LifecycleState").enum


@pytest.mark.overlap
def test_scaling_out_while_launch_is_suspended_is_refused_with_the_resume_command(aws, capsys):
    """With Launch suspended (telemetry cluster upgrade leaves it so until the deploy), a scale-out
    launches no instance ("How suspended processes affect other processes") and would only wait out
    its timeout: refused at once, naming the command that resumes it."""
    aws.client("autoscaling").suspend_processes(AutoScalingGroupName=SCALING, ScalingProcesses=["Launch"])

    assert run(["--env", "dev", "--desired", "2", "--poll-interval", "0"], aws) == 1

    err = capsys.readouterr().err
    assert f"the Launch process of {SCALING} is suspended, so scaling out to 2 would launch no instance" in err
    assert f"aws autoscaling resume-processes --auto-scaling-group-name {SCALING} --scaling-processes Launch" in err
    assert group(aws)["DesiredCapacity"] == 1  # nothing changed
