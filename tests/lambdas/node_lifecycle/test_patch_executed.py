"""The patch state machine of the synthesized dev environment, executed.

The synthesized definition runs under moto's ASL interpreter with the real Lambda code
(asl_harness.py), against the Service Fabric emulator (seeds seed-0..2 and scaling nodes
scale-0..1) and AWS-RunPatchBaseline as Run Command runs it on the machines
(patch_baseline_stand_in.py). Every scenario also checks the two rules patching must never break,
sampled at every gateway request and every change a command makes to a machine: no more than one
seed is ever away (not Up, or deactivated) at once, and no node is deactivated while cluster
health is not Ok.

The scenarios share one platform (emulator, moto, state machines, instances: `platform`); each
gets a fresh cluster, lock table and inbox (`patching`), so they pass in any order.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
import uuid
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.sf_emulator import EmulatedCluster, Pki, SfEmulator, standard_cluster

from tests.lambdas.node_lifecycle.executions import LOCK_ITEM, World, open_world
from tests.lambdas.node_lifecycle.patch_baseline_stand_in import Machine, PatchBaselineStandIn

pytestmark = pytest.mark.integration  # the HTTPS emulator and the ASL interpreter's threads

ENVIRONMENT = "dev"
PROGRESS_ITEM = {"LockName": {"S": "patch-progress"}}
SEEDS, SCALING = ["seed-0", "seed-1", "seed-2"], ["scale-0", "scale-1"]


@dataclass
class Rules:
    """What the cluster went through, sampled at every gateway request and machine change."""

    cluster: EmulatedCluster
    most_seeds_away: int = 0
    deactivated_while_unhealthy: list[str] = field(default_factory=list)
    deactivated: list[str] = field(default_factory=list)
    activated: list[tuple[str, int]] = field(default_factory=list)  # (node, its host's instance then)

    def sample(self) -> None:
        away = [n for n in self.cluster.nodes.values()
                if n.is_seed and (n.status != "Up" or n.deactivation_intent != "Invalid")]  # fmt: skip
        self.most_seeds_away = max(self.most_seeds_away, len(away))

    def watch(self) -> None:
        cluster, tick, deactivate, activate = self.cluster, self.cluster.tick, self.cluster.deactivate, self.cluster.activate

        def ticked(count: int = 1) -> None:
            tick(count)
            self.sample()

        def deactivating(name: str, intent: str) -> None:
            if cluster.cluster_health()["AggregatedHealthState"] != "Ok":
                self.deactivated_while_unhealthy.append(name)
            self.deactivated.append(name)
            deactivate(name, intent)
            self.sample()

        def activating(name: str) -> None:
            self.activated.append((name, cluster.nodes[name].instance_id))
            activate(name)
            self.sample()

        cluster.tick, cluster.deactivate, cluster.activate = ticked, deactivating, activating  # the gateway's routes call these

    def held(self) -> None:
        assert self.most_seeds_away <= 1, f"{self.most_seeds_away} seeds were away at once"
        assert self.deactivated_while_unhealthy == [], f"deactivated while health was not Ok: {self.deactivated_while_unhealthy}"


@dataclass
class Patching:
    world: World
    stand_in: PatchBaselineStandIn
    rules: Rules
    machine: dict[str, Any]
    instance_of: dict[str, str]

    def run(self, execution_input: dict[str, Any] | None = None):
        execution = self.world.machines.start(self.machine, execution_input or self.machine["scheduled_input"])
        self.rules.held()
        return execution

    def node(self, name: str) -> Machine:
        return self.stand_in.machines[self.instance_of[name]]

    def progress(self) -> dict[str, Any] | None:
        return self.world.dynamodb.get_item(TableName=self.world.lock_table, Key=PROGRESS_ITEM, ConsistentRead=True).get("Item")

    def stopped_by_hand_at(self, name: str, stage: str) -> None:
        """The progress record a run leaves when it is stopped by hand (no failure path) at
        `stage` of `name`: its owner still named, its lease passed (patch_progress.py)."""
        self.world.dynamodb.put_item(TableName=self.world.lock_table, Item={
            **PROGRESS_ITEM, "Owner": {"S": "patch:stopped-by-hand"}, "LeaseUntil": {"N": "0"},
            "RoundStarted": {"N": "0"}, "Done": {"L": []}, "Current": {"S": name}, "Stage": {"S": stage},
        })  # fmt: skip

    def activations(self, name: str) -> int:
        return sum(1 for r in self.world.emulator.requests if r.path.endswith(f"/Nodes/{name}/$/Activate"))

    def active_and_up(self, *names: str) -> bool:
        return all(self.world.cluster.node(n).status == "Up" and self.world.cluster.node(n).deactivation_intent == "Invalid"
                   for n in names)  # fmt: skip


@dataclass
class Platform:
    """What the module's scenarios share: one emulator, one moto world with the synthesized state
    machines, and an instance per node (building these takes longer than most scenarios)."""

    world: World
    machine: dict[str, Any]
    instance_of: dict[str, str]


@pytest.fixture(scope="module")
def platform(synthesized, sf_pki: Pki) -> Iterator[Platform]:
    cluster = standard_cluster()
    with pytest.MonkeyPatch.context() as monkeypatch, SfEmulator(cluster, pki=sf_pki) as emulator, \
            open_world(ENVIRONMENT, synthesized, cluster, emulator, sf_pki, monkeypatch) as world:  # fmt: skip
        cluster_name = world.setting("CLUSTER_NAME")
        instance_of = {}
        for name in SEEDS + SCALING:
            tags = {"sf:nodename": name, "sf:cluster": cluster_name,
                    "sf:nodetype": "PrimaryNodeType" if name in SEEDS else "ScalingNodeType"}  # fmt: skip
            found = world.ec2.run_instances(ImageId="ami-12c6146b", InstanceType="m5.large", MinCount=1, MaxCount=1,
                                            TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}])  # fmt: skip
            instance_of[name] = found["Instances"][0]["InstanceId"]
        (machine,) = [m for m in world.machines.state_machines.values() if m["name"].endswith("-sf-patch")]
        yield Platform(world, machine, instance_of)


@pytest.fixture
def patching(platform: Platform) -> Patching:
    """A fresh cluster (seeds and scaling nodes Up, 3 updates missing on each), an empty lock
    table and inbox, on the module's platform."""
    world = platform.world
    cluster = standard_cluster(clock=world.clock)  # the seed wait (180 s) passes in virtual time
    world.emulator.cluster = world.cluster = world.wire.machines.cluster = cluster
    world.emulator.clear_log()
    for key in (PROGRESS_ITEM, LOCK_ITEM):
        world.dynamodb.delete_item(TableName=world.lock_table, Key=key)
    world.machines.alarms()  # read, and so emptied
    world.machines.metrics.recorded.clear()
    world.machines.after_step.clear()
    rules = Rules(cluster)
    rules.watch()
    stand_in = PatchBaselineStandIn(cluster, world.clock, on_change=rules.sample)
    stand_in.machines.update({instance_id: Machine(name, missing=3) for name, instance_id in platform.instance_of.items()})
    world.wire.machines.patching = stand_in
    return Patching(world, stand_in, rules, platform.machine, platform.instance_of)


def test_every_node_is_patched_seeds_first_one_at_a_time(patching: Patching):
    execution = patching.run()

    assert execution.status == "SUCCEEDED", [i for i in execution.invocations if i.error]
    assert patching.stand_in.sent == [(n, op, reboot) for n in SEEDS + SCALING
                                      for op, reboot in (("Scan", "NoReboot"), ("Install", "RebootIfNeeded"))]  # fmt: skip
    assert all(patching.node(n).reboots == 1 and patching.node(n).missing == 0 for n in SEEDS + SCALING)
    assert patching.rules.deactivated == SEEDS + SCALING
    assert [r.body for r in patching.world.emulator.requests if r.path.endswith("/$/Deactivate")] == [{"DeactivationIntent": "Restart"}] * 5
    assert patching.active_and_up(*SEEDS, *SCALING)
    assert patching.rules.most_seeds_away == 1  # each seed in turn, never two
    assert patching.world.lock_holder() is None and patching.progress() is None  # the round is over
    assert patching.world.machines.alarms() == []
    assert patching.world.machines.metrics.names().count("NodesPatched") == 5


def test_a_node_is_activated_only_once_it_is_back_from_its_reboot(patching: Patching):
    # scale-1's machine reboots faster than its lease expires: the FM never shows it Down, and
    # SSM Agent reports the Install's end while the FM still shows the last instance Disabled.
    patching.node("scale-1").reboot_unseen_for = 6
    instance_before = patching.world.cluster.node("scale-1").instance_id

    execution = patching.run()

    assert execution.status == "SUCCEEDED", [i for i in execution.invocations if i.error]
    (activation,) = [a for a in patching.rules.activated if a[0] == "scale-1"]
    instance_after = patching.world.cluster.node("scale-1").instance_id
    assert instance_after != instance_before and activation == ("scale-1", instance_after)
    assert patching.active_and_up(*SEEDS, *SCALING) and patching.world.machines.alarms() == []


def test_a_node_with_nothing_to_install_is_scanned_and_left_in_service(patching: Patching):
    for name in SEEDS + SCALING:
        patching.node(name).missing = 1 if name == "seed-2" else 0
    # A run of this round stopped by hand (no failure path) after scale-1's install left it
    # deactivated, and its progress record naming it at that stage, its lease passed.
    patching.world.cluster.fm.deactivate("scale-1", "Restart")
    patching.stopped_by_hand_at("scale-1", "install")

    execution = patching.run()

    assert execution.status == "SUCCEEDED"
    assert [(n, op) for n, op, _ in patching.stand_in.sent if op == "Install"] == [("seed-2", "Install")]
    assert patching.rules.deactivated == ["seed-2"]
    assert patching.active_and_up(*SEEDS, *SCALING) and patching.world.machines.alarms() == []  # scale-1 activated


@pytest.mark.overlap
def test_a_node_another_operation_deactivated_is_passed_over_and_left_deactivated(patching: Patching):
    # A scale-in drain that failed is held for the operator: scale-0 deactivated RemoveNode, the
    # lock free. An operator deactivated scale-1 with intent Restart, which no patch run recorded.
    fm = patching.world.cluster.fm
    fm.deactivate("scale-0", "RemoveNode")
    fm.deactivate("scale-1", "Restart")

    execution = patching.run()

    intents = {n: patching.world.cluster.node(n).deactivation_intent for n in SCALING}
    assert intents == {"scale-0": "RemoveNode", "scale-1": "Restart"}  # as the others left them
    assert [patching.activations(n) for n in SCALING] == [0, 0]
    assert execution.status == "SUCCEEDED", [i for i in execution.invocations if i.error]
    assert execution.output["finished"]["skipped"] == [
        {"node_name": "scale-0", "reason": "deactivated by another operation: intent RemoveNode"},
        {"node_name": "scale-1", "reason": "deactivated by another operation: intent Restart"},
    ]
    assert patching.world.machines.metrics.names().count("NodesSkipped") == 2
    assert patching.rules.deactivated == SEEDS and {n for n, _, _ in patching.stand_in.sent} == set(SEEDS)
    assert patching.active_and_up(*SEEDS) and patching.world.machines.alarms() == []
    assert patching.progress() is None  # the round is over: the next one tries them again


@pytest.mark.overlap
def test_a_node_a_drain_deactivates_after_its_scan_is_passed_over_and_the_lock_freed(patching: Patching):
    fm, machines = patching.world.cluster.fm, patching.world.machines

    def drain_after_scale_1s_scan() -> None:
        if patching.stand_in.sent[-1][0] == "scale-1":
            fm.deactivate("scale-1", "RemoveNode")  # a scale-in's drain, which then failed and let the lock go
        else:
            machines.after_step["scan"] = drain_after_scale_1s_scan

    machines.after_step["scan"] = drain_after_scale_1s_scan

    execution = patching.run()

    assert patching.world.cluster.node("scale-1").deactivation_intent == "RemoveNode" and patching.activations("scale-1") == 0
    assert execution.status == "SUCCEEDED", [i for i in execution.invocations if i.error]
    reason = "deactivated by another operation: intent RemoveNode"
    assert execution.output["finished"]["skipped"] == [{"node_name": "scale-1", "reason": reason}]
    assert patching.rules.deactivated == SEEDS + ["scale-0"]
    assert patching.world.lock_holder() is None and patching.world.machines.alarms() == []


@pytest.mark.overlap
def test_a_drain_that_raises_the_intent_while_the_node_is_patched_stops_the_run_and_is_not_undone(patching: Patching):
    # Outside the membership lock (an operator's drain by hand): scale-0's intent raised to
    # RemoveNode while its install runs. Neither activate nor the failure path may end it.
    for name in SEEDS:
        patching.node(name).missing = 0
    patching.world.machines.after_step["install"] = lambda: patching.world.cluster.fm.deactivate("scale-0", "RemoveNode")

    execution = patching.run()

    assert (execution.status, execution.error) == ("FAILED", "PatchStopped")
    assert patching.world.cluster.node("scale-0").deactivation_intent == "RemoveNode" and patching.activations("scale-0") == 0
    (alarm,) = patching.world.machines.alarms()
    assert "deactivated by another operation: intent RemoveNode" in alarm.message
    assert "left deactivated (intent RemoveNode) as another operation set it" in alarm.message


def test_a_health_drop_between_nodes_stops_before_the_next_node_leaves_service(patching: Patching):
    patching.world.machines.after_step["node_done"] = lambda: patching.world.cluster.report_cluster_health(
        "Warning", "an application's replicas are not ready")  # fmt: skip

    execution = patching.run()

    assert (execution.status, execution.error) == ("FAILED", "PatchStopped")
    assert patching.rules.deactivated == ["seed-0"]  # seed-1 was scanned, never taken out of service
    assert patching.active_and_up(*SEEDS)
    (alarm,) = patching.world.machines.alarms()
    assert alarm.subject == "Service Fabric patching stopped at seed-1"
    assert "ClusterNotHealthy" in alarm.message and "Watchdog reported Warning" in alarm.message
    assert "not deactivated by this run" in alarm.message and "resumes at this node (done this round: seed-0)" in alarm.message
    assert patching.world.lock_holder() is None
    progress = patching.progress()
    assert "Owner" not in progress and [d["S"] for d in progress["Done"]["L"]] == ["seed-0"]


def test_a_node_that_does_not_come_back_stops_the_run_and_stays_deactivated(patching: Patching):
    patching.node("scale-0").fabric_returns = False

    execution = patching.run()

    assert (execution.status, execution.error) == ("FAILED", "PatchStopped")
    node = patching.world.cluster.node("scale-0")
    assert (node.status, node.deactivation_intent) == ("Down", "Restart")  # takes no replicas when it comes back
    assert patching.rules.deactivated == SEEDS + ["scale-0"]  # scale-1 untouched
    (alarm,) = patching.world.machines.alarms()
    assert "NodeDidNotReturn" in alarm.message and "left deactivated" in alarm.message
    assert "look at the instance" in alarm.message
    (node_time,) = {f.environment["WORKFLOW_TIMEOUT_SECONDS"] for f in patching.world.machines.functions.values()
                    if f.handler.endswith(".patch")}  # fmt: skip
    assert execution.virtual_seconds >= int(node_time)  # waited the node's whole time for it


def test_a_seed_the_failover_manager_refuses_to_deactivate_stops_the_run_and_is_activated_again(patching: Patching):
    # A seed that came back within the seed wait interval does not count for seed quorum
    # (DeactivateNodesContext::CheckSeedNodes): after seed-0's reboot, seed-1 must wait, here
    # for longer than the run waits (twice the FM's 180 s).
    patching.world.cluster.seed_wait_seconds = 1_000_000

    execution = patching.run()

    assert (execution.status, execution.error) == ("FAILED", "PatchStopped")
    assert patching.rules.deactivated == ["seed-0", "seed-1"]
    assert patching.active_and_up(*SEEDS)  # seed-1's deactivation was cancelled
    assert patching.node("seed-1").reboots == 0
    (alarm,) = patching.world.machines.alarms()
    assert "DeactivationRefused" in alarm.message and "EnsureSeedNodeQuorum" in alarm.message and "360 s" in alarm.message
    assert "has been activated again" in alarm.message


def test_a_failed_install_stops_the_run_and_a_rerun_resumes_at_that_node(patching: Patching):
    patching.node("seed-1").install_fails = True

    first = patching.run()

    assert (first.status, first.error) == ("FAILED", "PatchStopped")
    assert patching.active_and_up(*SEEDS)  # seed-1 never rebooted: activated again
    (alarm,) = patching.world.machines.alarms()
    assert "PatchInstallFailed" in alarm.message and "exit code 1" in alarm.message
    patching.node("seed-1").install_fails = False
    sent_before = len(patching.stand_in.sent)

    second = patching.run()

    assert second.status == "SUCCEEDED", [i for i in second.invocations if i.error]
    assert [n for n, op, _ in patching.stand_in.sent[sent_before:] if op == "Scan"] == ["seed-1", "seed-2", *SCALING]
    assert patching.node("seed-0").reboots == 1 and patching.node("seed-1").reboots == 1
    assert patching.active_and_up(*SEEDS, *SCALING) and patching.progress() is None
    assert patching.world.machines.alarms() == []


def test_one_node_on_request_leaves_the_round_as_it_was(patching: Patching):
    unknown = patching.run({"node": "scale-9"})
    assert (unknown.status, unknown.error) == ("FAILED", "PatchStopped")
    (alarm,) = patching.world.machines.alarms()
    assert "node scale-9 is not in the cluster" in alarm.message and "Owner" not in patching.progress()

    execution = patching.run({"node": "scale-1"})

    assert execution.status == "SUCCEEDED"
    assert [n for n, _, _ in patching.stand_in.sent] == ["scale-1", "scale-1"]
    assert patching.progress()["Done"]["L"] == [{"S": "scale-1"}] and "Owner" not in patching.progress()


def test_a_rerun_waits_for_the_install_a_stopped_run_left_running(patching: Patching):
    # seed-0's Windows Update outlasts the node's time: the run stops with the Install still
    # InProgress on the machine (Run Command goes on with it), the node left deactivated.
    patching.node("seed-0").install_hold = 10**6

    first = patching.run()

    assert (first.status, first.error) == ("FAILED", "PatchStopped")
    (alarm,) = patching.world.machines.alarms()
    assert "WaitTimedOut" in alarm.message and "left deactivated" in alarm.message
    (running,) = [c for c in patching.stand_in.commands.values() if c.status == "InProgress"]
    assert running.operation == "Install" and patching.world.cluster.node("seed-0").deactivation_intent == "Restart"
    patching.node("seed-0").install_hold = 3  # it ends a few looks into the next run
    sent_before = len(patching.stand_in.sent)

    second = patching.run()

    assert second.status == "SUCCEEDED", [i for i in second.invocations if i.error]
    assert patching.stand_in.overlaps == []  # no Scan or Install beside the running Install
    assert running.status == "Success" and patching.node("seed-0").reboots == 1  # it rebooted once, and ended
    # seed-0 was found up to date after that install, and activated; the others patched.
    assert [(n, op) for n, op, _ in patching.stand_in.sent[sent_before:] if op == "Install"] == [(n, "Install") for n in SEEDS[1:] + SCALING]
    assert patching.active_and_up(*SEEDS, *SCALING) and patching.world.machines.alarms() == []


def test_every_scan_and_install_of_a_run_uses_the_runs_one_patch_baseline_snapshot(patching: Patching):
    first = patching.run()
    for name in SEEDS + SCALING:
        patching.node(name).missing = 1
    second = patching.run()

    assert (first.status, second.status) == ("SUCCEEDED", "SUCCEEDED")
    commands = list(patching.stand_in.commands.values())
    snapshots = [{c.snapshot_id for c in commands[:10]}, {c.snapshot_id for c in commands[10:]}]
    assert len(commands) == 20 and all(len(run) == 1 for run in snapshots)  # one per run, on every node
    assert snapshots[0] != snapshots[1] and all(uuid.UUID(s) for (s,) in snapshots)
    states = {m.patch_state["SnapshotId"] for m in patching.stand_in.machines.values()}
    assert states == snapshots[1]  # each node's counts were taken with the run's snapshot


def test_an_install_whose_answer_was_lost_is_not_sent_again(patching: Patching):
    # The install step ran (SendCommand went out) and Lambda answered 500: the Task's retrier
    # invokes it again, which finds this run's Install running on seed-1 and follows it.
    lost = {"sent": 0}

    def answer_lost() -> None:
        if patching.stand_in.sent[-1][0] != "seed-1":
            patching.world.machines.after_step["install"] = answer_lost
            return
        lost["sent"] += 1
        raise ClientError({"Error": {"Code": "ServiceException", "Message": "the answer was lost (injected)"},
                           "ResponseMetadata": {"HTTPStatusCode": 500}}, "Invoke")  # fmt: skip

    patching.world.machines.after_step["install"] = answer_lost

    execution = patching.run()

    assert lost["sent"] == 1 and len(execution.steps("install")) == len(SEEDS + SCALING) + 1  # seed-1 twice
    assert [op for n, op, _ in patching.stand_in.sent if n == "seed-1"] == ["Scan", "Install"]
    assert patching.stand_in.overlaps == [] and patching.node("seed-1").reboots == 1
    assert execution.status == "SUCCEEDED", [i for i in execution.invocations if i.error]
    assert patching.active_and_up(*SEEDS, *SCALING) and patching.world.machines.alarms() == []


def test_an_install_is_judged_by_its_own_patch_state_not_the_scans_still_read(patching: Patching):
    # scale-1's patch state is read a few looks late: after its Install ends, DescribeInstancePatchStates
    # still answers the Scan's counts for a while.
    patching.node("scale-1").report_lag = 3

    execution = patching.run()

    assert execution.status == "SUCCEEDED", [i for i in execution.invocations if i.error]
    installed = execution.output["installed"]  # the last node's, scale-1
    assert (installed["operation"], installed["missing"]) == ("Install", 0)


def test_cancelling_is_not_the_end_of_a_command():
    from node_lifecycle.patch_baseline import PatchCommand

    assert not PatchCommand("c", "Cancelling", -1).finished  # the agent may still install and reboot
    assert all(PatchCommand("c", s, 0).finished for s in ("Success", "Failed", "Cancelled", "TimedOut"))


def test_a_seed_held_for_seed_quorum_waits_until_the_failover_manager_lets_it_go(patching: Patching):
    # After seed-0's reboot, seed-1's deactivation is held in EnsureSeedNodeQuorum until seed-0
    # has been up for the FM's seed wait (180 s); the FM then completes it by itself.
    held: list[str] = []
    sample = patching.rules.sample

    def sampled() -> None:
        sample()
        held.extend(n.name for n in patching.world.cluster.nodes.values() if "EnsureSeedNodeQuorum" in n.pending_safety_checks)

    patching.rules.sample = sampled

    execution = patching.run()

    assert execution.status == "SUCCEEDED", [i for i in execution.invocations if i.error]
    assert {"seed-1", "seed-2"} <= set(held)  # each waited for the seed before it
    assert patching.rules.deactivated == SEEDS + SCALING and patching.rules.most_seeds_away == 1
    assert patching.active_and_up(*SEEDS, *SCALING) and patching.world.machines.alarms() == []
    assert execution.virtual_seconds >= 2 * 180


@pytest.mark.overlap
def test_a_cluster_code_upgrade_under_way_stops_patching_before_any_node_leaves_service(patching: Patching):
    cm = patching.world.cluster.cm
    cm.ticks_per_domain = 10**6  # telemetry cluster upgrade's upgrade, still in its first domain
    cm.put_in_image_store("MicrosoftServiceFabric.11.5.0.1.cab")
    cm.provision({"CodeFilePath": "MicrosoftServiceFabric.11.5.0.1.cab"})
    cm.start_upgrade({"CodeVersion": "11.5.0.1", "RollingUpgradeMode": "Monitored"}, ["UD0", "UD1", "UD2"])

    execution = patching.run()

    assert (execution.status, execution.error) == ("FAILED", "PatchStopped")
    assert patching.rules.deactivated == [] and patching.active_and_up(*SEEDS, *SCALING)
    (alarm,) = patching.world.machines.alarms()
    assert "ClusterUpgradeInProgress" in alarm.message and "RollingForwardInProgress to 11.5.0.1" in alarm.message
    assert "Let the code upgrade end" in alarm.message and "resumes at this node" in alarm.message


def test_a_run_that_gives_up_waiting_for_a_running_install_leaves_the_node_deactivated(patching: Patching):
    patching.node("seed-0").install_hold = 10**6  # an Install that runs on past two runs' node time
    assert patching.run().status == "FAILED"
    patching.world.machines.alarms()

    second = patching.run()

    assert (second.status, second.error) == ("FAILED", "PatchStopped")
    assert patching.stand_in.overlaps == [] and [op for _, op, _ in patching.stand_in.sent] == ["Scan", "Install"]
    (alarm,) = patching.world.machines.alarms()
    assert "WaitTimedOut" in alarm.message and "still running on seed-0" in alarm.message
    assert "left deactivated" in alarm.message  # stopped before its scan, yet the Install may still reboot it
    assert patching.world.cluster.node("seed-0").deactivation_intent == "Restart"


@pytest.mark.overlap
def test_a_patched_node_is_named_in_the_membership_lock_with_the_runs_intent(patching: Patching):
    """Whoever the lock refuses meanwhile (a drain, telemetry cluster drain, telemetry cluster
    upgrade) reads what holds the cluster: the run, intent patch, the node out of service."""
    seen = []
    lock_item = {"LockName": {"S": "cluster-membership"}}
    patching.world.machines.after_step["deactivate"] = lambda: seen.append(
        patching.world.dynamodb.get_item(TableName=patching.world.lock_table, Key=lock_item, ConsistentRead=True)["Item"])

    assert patching.run({"node": "scale-1"}).status == "SUCCEEDED"

    (item,) = seen
    assert (item["Intent"]["S"], item["Node"]["S"]) == ("patch", "scale-1") and item["Owner"]["S"].startswith("patch:")


@pytest.mark.overlap
def test_a_patch_run_and_a_drain_at_once_never_take_two_nodes_out_of_service(patching: Patching):
    """A maintenance window's run meets a scale-in of scale-0, both executing at once: the
    membership lock lets one node out of service at a time. scale-0 leaves the cluster (patched
    first, or passed over once gone), every other node is patched, and no two nodes were ever
    deactivated together."""
    world = patching.world
    most_out = [0]
    sample = patching.rules.sample

    def sampled() -> None:  # the rules' own sample, at every gateway request and machine change
        sample()
        out = [n for n in world.cluster.nodes.values() if n.deactivation_intent != "Invalid" and n.status != "Removed"]
        most_out[0] = max(most_out[0], len(out))

    patching.rules.sample = sampled
    drain = world.machines.begin("terminate", patching.instance_of["scale-0"])

    run, drained = world.machines.run_mixed((patching.machine, patching.machine["scheduled_input"]), drain, real_seconds=120)

    patching.rules.held()
    assert run.status == "SUCCEEDED", [i for i in run.invocations if i.error]
    assert drained.status == "SUCCEEDED" and (drain.result, drain.ended_by) == ("CONTINUE", "completed")
    assert world.removed("scale-0")
    assert most_out[0] == 1, f"{most_out[0]} nodes were out of service at once"
    assert patching.active_and_up(*SEEDS, "scale-1") and world.lock_holder() is None




@pytest.mark.overlap
@pytest.mark.parametrize("join_arrives", ["with the run", "while a node installs"])
def test_a_patch_run_and_a_join_take_turns_and_the_joined_node_serves(patching: Patching, join_arrives: str):
    """A maintenance window's run meets a scale-out: the launch event arriving with the run (the
    join takes the lock first), or while the run's first node installs (the join waits for it).
    No node joins while another is deactivated, and none is deactivated between a join's AddNode
    and its registration upgrade's end. The joined node ends Up and active, every node is back in
    service, and the lock is free."""
    world, cluster = patching.world, patching.world.cluster
    instance_id = world.instance()
    joined = f"scale-{instance_id}"
    patching.stand_in.machines[instance_id] = Machine(joined, missing=0)  # launched from the round's image
    overlaps: list[str] = []
    join_by_add_node, deactivate = cluster.join_by_add_node, cluster.deactivate

    def joining(parameters: dict[str, str]):  # AddNode.ps1, run on the new machine
        out = [n.name for n in cluster.nodes.values() if n.deactivation_intent != "Invalid" and n.status != "Removed"]
        overlaps.extend(f"{joined} joined while {name} was out of service" for name in out)
        return join_by_add_node(parameters)

    def deactivating(name: str, intent: str) -> None:  # the gateway's Deactivate route
        if cluster.node(joined) is not None and (joined not in cluster.uos_nodes or cluster.uos.pending is not None):
            overlaps.append(f"{name} was deactivated while {joined} joined, its registration not done")
        deactivate(name, intent)

    cluster.join_by_add_node, cluster.deactivate = joining, deactivating
    launch = world.machines.begin("launch", instance_id)
    patch_run = (patching.machine, patching.machine["scheduled_input"])

    if join_arrives == "with the run":
        run, join = world.machines.run_mixed(patch_run, launch, real_seconds=120)
    else:
        # A long Windows Update (15 looks, a minute apart): the launch event arrives meanwhile, and
        # the join waits for it inside its deadline (config.py: _joins_and_drains_outwait_a_patched_node).
        patching.node("seed-0").install_hold = 15
        run, join = world.machines.run_mixed(patch_run, real_seconds=120, then=("install", launch))

    patching.rules.held()
    assert run.status == "SUCCEEDED", [i for i in run.invocations if i.error]
    assert join.status == "SUCCEEDED" and (launch.result, launch.ended_by) == ("CONTINUE", "completed")
    assert overlaps == []
    assert patching.active_and_up(*SEEDS, *SCALING, joined) and world.lock_holder() is None
    assert world.machines.alarms() == []



@pytest.mark.overlap
def test_a_lock_that_lapsed_while_a_node_was_out_of_service_stops_the_run(patching: Patching):
    """The run's renewals missed the lock's TTL while scale-1 installed, and another operation took
    the lock and let it go meanwhile (the item is gone): the next renewal would take it afresh.
    That is not a renewal, so the run stops and says so."""
    world = patching.world
    world.machines.after_step["install"] = lambda: world.dynamodb.delete_item(TableName=world.lock_table, Key=LOCK_ITEM)

    execution = patching.run({"node": "scale-1"})

    assert execution.status == "FAILED"
    (alarm,) = world.machines.alarms()
    assert "the membership lock lapsed while a node was out of service" in alarm.message
    assert world.lock_holder() is None
