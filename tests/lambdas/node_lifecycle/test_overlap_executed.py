"""Operations that overlap, executed: two lifecycle operations on one node or one cluster, run in
the same stand-in world (the synthesized state machines under moto's ASL interpreter, moto and
the wire, the Service Fabric emulator), at once or one after the other, as they meet on AWS.

The rule each pair checks is the issue's: one owner for a node at a time. An execution touches a
node only while it holds the membership lock for it, and an execution whose lifecycle action Auto
Scaling no longer has stops without touching the node (the execution or operator that ended the
action owns what follows). How Auto Scaling answers for an ended action, and why two executions
serve one action at all, are in lifecycle_actions.py and docs/day-2.md, "Node lifecycle operations that
overlap".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from telemetry import cli
from telemetry.shared.cluster_lock import HeldLock

from tests.sf_emulator import EmulatedCluster, Pki, SfEmulator

from tests.lambdas.node_lifecycle.executions import LOCK_ITEM, World, open_world

pytestmark = [pytest.mark.integration, pytest.mark.overlap]

ENVIRONMENT = "dev"
DEACTIVATE = r"/Nodes/[^/]+/\$/Deactivate"


@pytest.fixture
def world(synthesized, sf_cluster: EmulatedCluster, sf_emulator: SfEmulator, sf_pki: Pki, monkeypatch) -> Iterator[World]:
    with open_world(ENVIRONMENT, synthesized, sf_cluster, sf_emulator, sf_pki, monkeypatch) as opened:
        yield opened


def serving(world: World, name: str) -> None:
    """The node is Up, active, and no automation ever asked to deactivate it."""
    node = world.cluster.node(name)
    assert (node.status, node.deactivation_intent) == ("Up", "Invalid")
    assert world.emulator.requests_to("POST", DEACTIVATE) == []


def twin_holds_the_lock(world: World, owner: str) -> str:
    """The lock as the first of two executions for one action holds it, past the second's deadline."""
    world.dynamodb.put_item(TableName=world.lock_table, Item={
        "LockName": {"S": "cluster-membership"}, "Owner": {"S": owner},
        "ExpiresAt": {"N": str(int(world.clock() + 4 * int(world.setting("WORKFLOW_TIMEOUT_SECONDS"))))}})  # fmt: skip
    return owner


# -- a join and a duplicate execution of its launch action ---------------------------------------


def test_a_duplicate_join_running_beside_the_first_stops_at_the_lock_without_touching_the_node(world: World):
    """EventBridge delivers at least once: two executions for one launch action, at once. The one
    that takes the lock joins the node; the other waits, finds the action gone once the first has
    completed it, and stops quietly: no second AddNode.ps1, no second registration, no alarm."""
    action = world.machines.begin("launch", world.instance())

    first, second = world.machines.run_together(action, action)

    assert {first.status, second.status} == {"SUCCEEDED"}
    # The executions' invocations interleave; each one's output says where it went.
    (joined,) = [e for e in (first, second) if "finish" in e.output]
    (duplicate,) = [e for e in (first, second) if "gone" in e.output]
    assert "plan" not in duplicate.output and duplicate.output["gone"]["alarm"] is False
    assert joined.output["finish"]["outcome"] == "requested"
    assert (action.result, action.ended_by) == ("CONTINUE", "completed")
    serving(world, f"scale-{action.instance_id}")
    assert len(world.ssm.list_commands()["Commands"]) == 1  # AddNode.ps1 ran once
    assert len(world.cluster.upgrade_requests) == 1  # one registration
    assert world.lock_holder() is None
    assert world.machines.alarms() == []
    assert world.machines.metrics.names() == ["JoinsStarted", "JoinsSucceeded", "JoinDurationSeconds"]  # nothing stopped


def test_a_duplicate_delivered_after_the_join_completed_ends_at_the_lock(world: World):
    action = world.machines.begin("launch", world.instance())
    world.machines.run(action)
    upgrades = len(world.cluster.upgrade_requests)

    again = world.machines.run(action)

    assert again.status == "SUCCEEDED" and again.steps("action_gone") and not again.steps("plan_node")
    assert len(world.cluster.upgrade_requests) == upgrades  # no registration upgrade for nothing
    assert len(world.ssm.list_commands()["Commands"]) == 1
    serving(world, f"scale-{action.instance_id}")
    assert world.machines.alarms() == []


def test_a_join_that_completed_but_could_not_release_the_lock_leaves_its_node_serving(world: World):
    """finish sends CONTINUE, then the lock's release fails for good: the failure path must not take
    the node it joined out of service on an InService instance, and says what happened. A duplicate
    delivered meanwhile, which would wait for that lock past its deadline, stops at once instead."""
    world.wire.fail("dynamodb", "DeleteItem", "InternalServerError", status=500, times=10_000)
    action = world.machines.begin("launch", world.instance())

    execution = world.machines.run(action)
    duplicate = world.machines.run(action)

    assert execution.status == "FAILED" and execution.steps("clean_up")
    assert (action.result, action.ended_by) == ("CONTINUE", "completed")  # never ABANDONed afterwards
    serving(world, f"scale-{action.instance_id}")
    (alarm,) = world.machines.alarms()
    assert "no pending launch action any more" in alarm.message and "nothing was abandoned" in alarm.message
    assert "replaces the instance" not in alarm.message
    assert duplicate.status == "SUCCEEDED" and duplicate.steps("action_gone") and not duplicate.steps("clean_up")


def test_a_duplicate_that_waited_out_its_deadline_for_the_lock_changes_nothing(world: World):
    """The issue's case: two executions for one launch action; the first holds the lock and is still
    at work on a joined node (here: its node Up, its lock held, the action pending) for longer than
    the second's deadline. The second fails at its deadline having never held the lock: it must
    neither deactivate the node of its instance's name nor complete the action the first serves."""
    action = world.machines.begin("launch", world.instance())
    name = f"scale-{action.instance_id}"
    world.cluster.add_node(name, upgrade_domain="UD2")  # what the first execution's AddNode.ps1 did
    owner = twin_holds_the_lock(world, f"scale-out:{action.instance_id}:the-first-execution")

    execution = world.machines.run(action)

    assert (execution.status, execution.error) == ("FAILED", "JoinFailed")
    assert "WaitTimedOut" in str(execution.history) and not execution.steps("plan_node")
    serving(world, name)
    assert action.pending  # left to the execution that holds the lock
    assert world.lock_holder() == owner  # someone else's lock, left alone
    (alarm,) = world.machines.alarms()
    assert "never held the membership lock" in alarm.message and owner in alarm.message
    assert "was not completed either" in alarm.message


def test_a_duplicate_drain_that_waited_out_its_deadline_for_the_lock_leaves_the_action_to_its_twin(world: World):
    """Two executions for one terminate action; the first holds the lock and still drains scale-0
    when the second's deadline passes. The second touches no node and does not ABANDON the action
    (that would retain the instance mid-drain): the first ends it."""
    action = world.machines.begin("terminate", world.instance("scale-0"))
    owner = twin_holds_the_lock(world, f"scale-in:{action.instance_id}:the-first-execution")

    execution = world.machines.run(action)

    assert (execution.status, execution.error) == ("FAILED", "DrainFailed")
    assert not execution.steps("resolve_node") and world.emulator.requests_to("POST", DEACTIVATE) == []
    assert action.pending and world.lock_holder() == owner  # left to the execution that serves it
    (alarm,) = world.machines.alarms()
    assert "never held the membership lock" in alarm.message and owner in alarm.message
    assert "its terminate action was left alone" in alarm.message and "telemetry cluster drain" in alarm.message


@pytest.mark.parametrize("ended", ["timed out to ABANDON", "answer lost, finish resent"])
def test_a_join_whose_action_ended_before_its_finish_says_what_becomes_of_the_node(world: World, ended: str):
    """The node has joined and registered; the finish's CONTINUE finds the launch action ended.
    Timed out (ABANDON: Auto Scaling terminates the instance), it alarms and counts no join: the
    terminate hook will drain the node. Completed by the finish's own earlier try, whose answer
    was lost (the instance InService), it is a join like any other."""
    action = world.machines.begin("launch", world.instance())
    lifecycle = world.machines.lifecycle
    complete = lifecycle.complete

    def completing(**request) -> None:
        if request["result"] == "CONTINUE":
            if ended == "timed out to ABANDON":
                action.result, action.ended_at, action.ended_by = "ABANDON", world.clock(), "timed out"
            else:
                complete(**request)  # the first try landed; its answer did not
        complete(**request)

    lifecycle.complete = completing

    execution = world.machines.run(action)

    assert execution.status == "SUCCEEDED" and world.lock_holder() is None
    assert world.cluster.node(f"scale-{action.instance_id}").status == "Up"
    assert execution.output["finish"]["outcome"] == "already_done"
    if ended == "timed out to ABANDON":
        (alarm,) = world.machines.alarms()
        assert alarm.subject == f"Service Fabric join stopped: launch action of {action.instance_id} ended"
        assert "Auto Scaling shows the instance Terminating" in alarm.message and "terminate hook drains" in alarm.message
        assert "JoinsStopped" in world.machines.metrics.names() and "JoinsSucceeded" not in world.machines.metrics.names()
    else:
        assert world.machines.alarms() == [] and "JoinsSucceeded" in world.machines.metrics.names()


# -- joins and drains of different nodes -----------------------------------------------------------


def test_two_joins_at_once_take_turns_and_both_nodes_serve(world: World):
    """The group scales out by two: one join at a time behind the lock, each with its own
    registration upgrade, both nodes Up and active in the end."""
    first, second = (world.machines.begin("launch", world.instance()) for _ in range(2))

    executions = world.machines.run_together(first, second)

    for execution, action in zip(executions, (first, second)):
        world.continued(execution, action)
        serving(world, f"scale-{action.instance_id}")
        assert f"scale-{action.instance_id}" in world.cluster.uos_nodes
    assert len(world.ssm.list_commands()["Commands"]) == 2


def test_a_join_and_a_drain_at_once_take_turns(world: World):
    """A refresh's replacement joining while an old node drains: the lock lets one membership
    change through at a time, and neither touches the other's node."""
    launch = world.machines.begin("launch", world.instance())
    terminate = world.machines.begin("terminate", world.instance("scale-0"))

    joined, drained = world.machines.run_together(launch, terminate)

    world.continued(joined, launch)
    world.continued(drained, terminate)
    assert world.removed("scale-0")
    assert world.cluster.node(f"scale-{launch.instance_id}").status == "Up"
    assert [u.removing for u in world.cluster.upgrades if u.removing] == [("scale-0",)]


def test_the_replacement_auto_scaling_launches_beside_a_retained_instance_joins_and_leaves_its_node_alone(world: World):
    """A refresh's or health check's termination whose drain failed: the instance is retained with
    scale-0 deactivated (RemoveNode), and Auto Scaling launches a replacement at once ("Manage
    retained instances"; the stand-in does not launch by itself, so the test does). The replacement
    joins; scale-0 stays as the failed drain left it, for the operator."""
    world.cluster.nodes["scale-0"].machine_reachable = False  # the removal upgrade is refused for good
    terminate = world.machines.begin("terminate", world.instance("scale-0"))
    world.retained(world.machines.run(terminate), terminate)
    launch = world.machines.begin("launch", world.instance())

    joined = world.machines.run(launch)

    world.continued(joined, launch)
    assert world.cluster.node(f"scale-{launch.instance_id}").status == "Up"
    assert world.cluster.node("scale-0").deactivation_intent == "RemoveNode" and terminate.retained
    assert f"scale-{launch.instance_id}" in world.cluster.uos_nodes and "scale-0" in world.cluster.uos_nodes


def test_a_drain_failing_while_its_removal_upgrade_rolls_leaves_the_lock_to_expire(world: World):
    """The removal upgrade outlives the drain's deadline: releasing the lock would let a join, a
    drain or a patched node overlap an upgrade still rolling. The lock stays the drain's until it
    expires; the alarm says so, and the instance is retained."""
    world.cluster.uos.upgrade_ticks = 10**6  # the manifest upgrade that removes scale-0 never ends here
    action = world.machines.begin("terminate", world.instance("scale-0"))

    execution = world.machines.run(action)

    assert (execution.status, execution.error) == ("FAILED", "DrainFailed") and action.retained
    assert (world.lock_holder() or "").startswith(f"scale-in:{action.instance_id}:")
    (alarm,) = world.machines.alarms()
    assert "WaitTimedOut" in alarm.message and "left to expire (at " in alarm.message
    assert "removal upgrade this drain started may still roll" in alarm.message


# -- telemetry cluster drain and the hook's drain of the same node -----------------------------


@pytest.fixture
def operator_drain(world: World, sf_pki: Pki, capsys) -> Callable[[str], tuple[int, str]]:
    """`telemetry cluster drain --env dev --node NAME` as an operator types it, in this process:
    its membership lock in the world's DynamoDB (moto), the emulator's gateway over mutual TLS.
    Returns its exit code and what it wrote to stderr."""
    gateway = sf_pki.gateway_flags(world.emulator.endpoint)

    def run(name: str) -> tuple[int, str]:
        code = cli.main(["cluster", "drain", "--env", ENVIRONMENT, "--node", name, *gateway, "--poll-interval", "0.02", "--timeout", "30"])
        return code, capsys.readouterr().err

    return run


def deactivations(world: World, name: str) -> int:
    return sum(1 for r in world.emulator.requests if r.method == "POST" and r.path.endswith(f"/Nodes/{name}/$/Deactivate"))


def test_an_operator_drain_of_a_node_the_hook_is_draining_is_refused_and_changes_nothing(world: World, operator_drain):
    """The terminate hook's drain holds the lock (intent drain) when an operator starts
    `telemetry cluster drain` for the same node: the command is refused in one line naming the
    execution, before any change; the hook's drain goes on alone and the node leaves once."""
    refused: list[tuple[int, str]] = []
    world.machines.after_step["deactivate_node"] = lambda: refused.append(operator_drain("scale-0"))
    action = world.machines.begin("terminate", world.instance("scale-0"))

    execution = world.machines.run(action)

    (code, err), = refused
    assert code == 1 and err.count("\n") == 1, err
    assert f"is held by scale-in:{action.instance_id}:" in err and "(intent drain" in err and "nothing was changed" in err
    world.continued(execution, action)
    assert world.removed("scale-0") and deactivations(world, "scale-0") == 1
    assert [u.removing for u in world.cluster.upgrades if u.removing] == [("scale-0",)]


def test_the_hook_drain_of_a_node_an_operator_is_draining_waits_and_then_finds_it_gone(world: World, operator_drain):
    """An operator runs `telemetry cluster drain` for scale-0 and its instance is terminated
    meanwhile (the terminate event arrives once the command holds the lock): the execution waits
    for the lock, then finds the node removed and completes the action without touching it.
    Virtual time runs at the wall clock's pace meanwhile, as the command's does."""
    action = world.machines.begin("terminate", world.instance("scale-0"))
    pending: list[Callable[[], Any]] = []
    renew = HeldLock.renew

    def renewing(self: HeldLock) -> None:  # the command holds the lock from here on
        if not pending:
            tried = len(world.machines.invocations)
            pending.append(world.machines.start_now(action))
            deadline = time.monotonic() + 20
            while not any(i.step == "acquire_lock" for i in world.machines.invocations[tried:]):  # refused once
                assert time.monotonic() < deadline, "the execution never asked for the lock"
                time.sleep(0.01)
        renew(self)

    with pytest.MonkeyPatch.context() as meanwhile:
        meanwhile.setattr(world.machines.clock, "sleep", lambda seconds: time.sleep(min(seconds, 0.02)), raising=False)
        meanwhile.setattr(HeldLock, "renew", renewing)
        code, err = operator_drain("scale-0")
    execution = pending[0]()

    assert (code, err) == (0, "")
    world.continued(execution, action)
    waited = [i for i in execution.invocations if i.step == "acquire_lock"]
    assert len(waited) > 1, "the execution never waited for the lock"
    assert world.removed("scale-0") and deactivations(world, "scale-0") == 1


# -- a runtime upgrade and a removal upgrade still rolling -------------------------------------


def test_a_runtime_upgrade_started_while_a_failed_drains_removal_upgrade_rolls_is_refused(world: World, sf_pki: Pki, capsys):
    """A drain failed at its deadline while its removal upgrade still rolls; the lock is left to
    expire. `telemetry cluster upgrade` is refused in one line with nothing started while the
    lock is held, and after it expired too: the Cluster Manager's progress shows the removal's
    manifest upgrade, and a code upgrade started over it would interrupt it (Service Fabric does
    not refuse a second upgrade; it replaces the pending one)."""
    world.cluster.uos.upgrade_ticks = 10**6  # the manifest upgrade that removes scale-0 never ends here
    action = world.machines.begin("terminate", world.instance("scale-0"))
    assert world.machines.run(action).error == "DrainFailed"
    world.cluster.cm.put_in_image_store("MicrosoftServiceFabric.11.5.0.1.cab")
    gateway = sf_pki.gateway_flags(world.emulator.endpoint)
    capsys.readouterr()

    answers = []
    for lock in ("held", "expired"):
        if lock == "expired":  # DynamoDB's TTL deleted the item the drain left
            world.dynamodb.delete_item(TableName=world.lock_table, Key=LOCK_ITEM)
        code = cli.main(["cluster", "upgrade", "--env", ENVIRONMENT, "--version", "11.5.0.1", *gateway, "--poll-interval", "0.001"])
        answers.append((code, capsys.readouterr().err))

    for code, err in answers:
        assert code != 0 and err.count("\n") == 1, err
        assert "is under way (RollingForwardInProgress); wait until it ends, then run again" in err
    assert world.cluster.cm.upgrade is None and world.cluster.cm.provisioned_code_versions("11.5.0.1") == []
    assert not [r for r in world.emulator.requests if r.method == "POST" and r.path in ("/$/Upgrade", "/$/Provision")]
    assert world.cluster.uos.pending is not None and world.cluster.uos.pending.removing == ("scale-0",)  # rolls on


def test_a_drain_during_a_runtime_upgrade_waits_for_it_before_its_removal_upgrade(world: World):
    """A scale-in while `telemetry cluster upgrade` rolls the runtime (it suspends Launch, not
    Terminate): the configuration status shows the code upgrade, so the drain starts no removal
    upgrade over it (one would interrupt it) and waits inside its deadline; once the code upgrade
    has rolled forward, the node leaves."""
    cm = world.cluster.cm
    cm.put_in_image_store("MicrosoftServiceFabric.11.5.0.1.cab")
    cm.provision({"CodeFilePath": "MicrosoftServiceFabric.11.5.0.1.cab"})
    cm.ticks_per_domain = 20  # a few dozen gateway requests for the whole walk
    world.cluster.start_fabric_upgrade({"CodeVersion": "11.5.0.1", "RollingUpgradeMode": "Monitored"})
    starts_during_code_upgrade = []
    start = world.cluster.uos.start

    def starting(body):  # the UOS receiving a configuration upgrade
        if cm.upgrade is not None:
            starts_during_code_upgrade.append(body)
        return start(body)

    world.cluster.uos.start = starting
    action = world.machines.begin("terminate", world.instance("scale-0"))

    execution = world.machines.run(action, real_seconds=120)

    world.continued(execution, action)
    assert world.removed("scale-0") and starts_during_code_upgrade == []
    assert cm.upgrade is None and cm.code_version == "11.5.0.1"
    waited = [i for i in execution.invocations if i.step == "start_configuration_removal"]
    assert len(waited) > 1, "the drain never had to wait for the code upgrade"
