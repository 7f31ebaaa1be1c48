"""Operations that overlap, executed: two lifecycle operations on one node or one cluster, run in
the same stand-in world (the synthesized state machines under moto's ASL interpreter, moto and
the wire, the Service Fabric emulator), at once or one after the other, as they meet on AWS.

The rule each pair checks is the issue's: one owner for a node at a time. An execution touches a
node only while it holds the membership lock for it, and an execution whose lifecycle action Auto
Scaling no longer has stops without touching the node (the execution or operator that ended the
action owns what follows). How Auto Scaling answers for an ended action, and why two executions
serve one action at all, are in lifecycle_actions.py and the README's "Operations that overlap".
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.sf_emulator import EmulatedCluster, Pki, SfEmulator

from tests.lambdas.node_lifecycle.executions import World, open_world

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
    owner = f"scale-out:{action.instance_id}:the-first-execution"
    world.dynamodb.put_item(TableName=world.lock_table, Item={
        "LockName": {"S": "cluster-membership"}, "Owner": {"S": owner},
        "ExpiresAt": {"N": str(int(world.clock() + 4 * int(world.setting("WORKFLOW_TIMEOUT_SECONDS"))))}})  # fmt: skip

    execution = world.machines.run(action)

    assert (execution.status, execution.error) == ("FAILED", "JoinFailed")
    assert "WaitTimedOut" in str(execution.history) and not execution.steps("plan_node")
    serving(world, name)
    assert action.pending  # left to the execution that holds the lock
    assert world.lock_holder() == owner  # someone else's lock, left alone
    (alarm,) = world.machines.alarms()
    assert "never held the membership lock" in alarm.message and owner in alarm.message
    assert "was not completed either" in alarm.message


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
