"""The node lifecycle's state machines, executed as synthesized for dev, staging and prod, against
what a real account does that the other scenarios never do: Lambda refusing invokes, Auto Scaling
refusing heartbeats, the hook's global timeout, EventBridge failing to start an execution.

Each environment runs with its own heartbeat timeout, deadlines and hold (its synthesized
templates), on the virtual clock that the lifecycle action's heartbeat timer and global timeout
(lifecycle_actions.py) also read. However a scenario ends, no instance leaves while its node is
still in the cluster: either the node was removed and the action completed with CONTINUE, or the
action is still pending (held for an operator, who was told).

Limits relied on, with their sources:
- Step Functions reports Lambda's refusal of an invoke as "Lambda.<code>", e.g.
  Lambda.TooManyRequestsException (Step Functions Developer Guide, "Handle Lambda service
  exceptions"); the codes are the Invoke API's (Lambda API Reference, Invoke, Errors).
- RecordLifecycleActionHeartbeat's one documented error is ResourceContention (HTTP 500, Auto
  Scaling API Reference); Throttling and AccessDenied are Auto Scaling's common errors.
- A lifecycle action ends at min(48 h, 100 x heartbeat timeout) (Auto Scaling API Reference,
  LifecycleHook, GlobalTimeout), whatever heartbeats it gets.
- A Standard execution dies at 25,000 history events (Step Functions service quotas).
- StartExecution's throttling (ThrottlingException, a common error of Step Functions' API), its
  ExecutionLimitExceeded (HTTP 400) and StateMachineDoesNotExist (Step Functions API Reference);
  what EventBridge does with them: asl_harness.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from stacks.config import load_environment
from stacks.lifecycle_timing import EVENTS_PER_LOOP, INVOKE_RETRY
from tests.conftest import ENVIRONMENTS, cdk_context
from tests.sf_emulator import Pki

from tests.lambdas.node_lifecycle.executions import World, open_world
from tests.lambdas.node_lifecycle.lifecycle_actions import LifecycleAction

pytestmark = pytest.mark.integration  # the HTTPS emulator and the ASL interpreter's threads

THROTTLED = "Lambda.TooManyRequestsException"


@pytest.fixture(params=ENVIRONMENTS)
def world(request, synthesized, sf_cluster, sf_emulator, sf_pki: Pki, monkeypatch) -> Iterator[World]:
    with open_world(request.param, synthesized, sf_cluster, sf_emulator, sf_pki, monkeypatch) as opened:
        yield opened


def timing(world: World):
    return load_environment(cdk_context()["environments"], world.environment).lifecycle_timing


def global_timeout(action: LifecycleAction) -> float:
    return min(48 * 3600, 100 * action.heartbeat_timeout)


def failed_drain(world: World) -> LifecycleAction:
    """A drain the cluster refuses for good (the machine does not answer on 445), on scale-0."""
    world.cluster.nodes["scale-0"].machine_reachable = False
    return world.machines.begin("terminate", world.instance("scale-0"))


# -- Lambda refusing invokes ----------------------------------------------------------------


def test_a_join_rides_out_a_throttle_at_every_step(world: World):
    world.machines.throttle_each_step_once = True
    action = world.machines.begin("launch", world.instance())

    execution = world.machines.run(action)

    world.continued(execution, action)
    steps = [i.step for i in execution.invocations]
    throttled = [i.step for i in execution.invocations if i.error == THROTTLED]
    assert throttled == sorted(set(steps), key=steps.index)  # each step once, reading the action first
    assert steps[0] == "begin" and execution.state_errors.count(THROTTLED) == len(throttled)
    assert world.cluster.node(f"scale-{action.instance_id}").status == "Up"


def test_a_drain_rides_out_a_throttle_at_every_step(world: World):
    world.machines.throttle_each_step_once = True
    action = world.machines.begin("terminate", world.instance("scale-0"))

    execution = world.machines.run(action)

    world.continued(execution, action)
    assert {i.step for i in execution.invocations if i.error == THROTTLED} == {i.step for i in execution.invocations}
    assert world.removed("scale-0")


def test_a_failed_drain_throttled_at_every_step_still_alarms_and_holds(world: World):
    world.machines.throttle_each_step_once = True
    action = failed_drain(world)

    (alarm,) = world.held(world.machines.run(action), action)

    assert "Required ports on the node to be removed are not reacheable" in alarm.message


@pytest.mark.parametrize("code", ["TooManyRequestsException", "ResourceNotReadyException"])
def test_reading_the_lifecycle_action_is_retried_through_a_burst_of_refusals(world: World, code: str):
    # A burst that takes all but the last of the invoke retries; ResourceNotReady is a function in
    # a VPC whose connection Lambda is rebuilding after it idled (Lambda Developer Guide, states).
    world.machines.fail_invoke(code, step="begin", times=INVOKE_RETRY.max_attempts)
    action = world.machines.begin("terminate", world.instance("scale-0"))

    execution = world.machines.run(action)

    world.continued(execution, action)
    assert execution.retried("begin") == INVOKE_RETRY.max_attempts
    assert world.removed("scale-0")


def test_reading_the_lifecycle_action_refused_past_its_retries_still_holds_the_instance(world: World):
    """Before, the failure path found no $.hook: no hold, an alarm naming no instance, and the
    terminate hook timing out to CONTINUE with the node never drained."""
    world.machines.fail_invoke("TooManyRequestsException", step="begin", times=INVOKE_RETRY.max_attempts + 1)
    action = world.machines.begin("terminate", world.instance("scale-0"))

    execution = world.machines.run(action)

    (alarm,) = world.held(execution, action)
    assert alarm.subject == f"Service Fabric drain failed: (unresolved) on {action.instance_id}"
    assert THROTTLED in alarm.message
    assert world.cluster.node("scale-0").status == "Up" and world.posts() == 0


# -- heartbeats during a hold ----------------------------------------------------------------


@pytest.mark.parametrize("how", ["contention", "hung to the Task's timeout"])
def test_a_hold_outlasts_two_heartbeats_failing_in_a_row(world: World, how: str):
    """At their worst: after a heartbeat the hold recorded, the next three attempts are each
    throttled through all their invoke retries (every delay at its longest); the first two then
    fail, the third lands."""
    action = failed_drain(world)
    if how == "contention":  # the operation's documented error, through the client's 3 tries, twice
        fail = dict(code="ResourceContention", status=500, times=2 * 3)
    else:  # each try hangs, so each attempt runs past its Task's 60 s timeout
        fail = dict(code="Throttling", times=2 * 3, hang_seconds=21)
    world.machines.after_step["hold_instance"] = lambda: world.wire.fail("auto-scaling", "RecordLifecycleActionHeartbeat", **fail)
    world.machines.fail_invoke("TooManyRequestsException", step="hold_instance", times=INVOKE_RETRY.max_attempts,
                               then_run=3, after_runs=1)  # fmt: skip

    execution = world.machines.run(action)

    (alarm,) = world.held(execution, action)
    runs = [i for i in execution.steps("hold_instance") if i.error != THROTTLED]
    assert [bool(i.error) for i in runs[:4]] == [False, True, True, False]
    if how != "contention":
        assert {i.error for i in runs[1:3]} == {"States.Timeout"}
    assert world.max_heartbeat_gap(action) <= action.heartbeat_timeout
    assert alarm.subject.startswith("Service Fabric drain failed: scale-0")


def test_a_heartbeat_refused_for_good_ends_the_hold_with_an_alarm_not_a_timeout(world: World):
    action = failed_drain(world)
    world.machines.after_step["fail"] = lambda: world.wire.fail(
        "auto-scaling", "RecordLifecycleActionHeartbeat", "AccessDenied", status=403, times=10_000,
        message="User is not authorized to perform: autoscaling:RecordLifecycleActionHeartbeat",
    )  # fmt: skip

    execution = world.machines.run(action)

    assert (execution.status, execution.error) == ("FAILED", "DrainFailed")
    assert len(execution.steps("hold_instance")) == 1  # not retried: a refusal is an answer
    drain, lost = world.machines.alarms()
    assert drain.subject == f"Service Fabric drain failed: scale-0 on {action.instance_id}"
    assert lost.subject == f"Service Fabric hold lost: scale-0 on {action.instance_id}"
    assert "AccessDenied" in lost.message and "telemetry cluster drain --env <environment> --node scale-0" in lost.message
    assert "HoldsLost" in world.machines.metrics.names()


def test_a_hold_whose_action_is_gone_says_so_instead_of_ending_quietly(world: World):
    """The action timed out or was completed by someone mid-hold: Auto Scaling answers the
    heartbeat with ValidationError "No active Lifecycle Action found ..." (lifecycle_actions.py)."""
    action = failed_drain(world)
    world.machines.after_step["fail"] = lambda: world.machines.lifecycle.complete(
        group=action.group, hook=action.hook, token=action.token, instance_id="", result="CONTINUE")

    execution = world.machines.run(action)

    assert (execution.status, execution.error) == ("FAILED", "DrainFailed")
    drain, lost = world.machines.alarms()
    assert lost.subject == f"Service Fabric hold lost: scale-0 on {action.instance_id}"
    assert "no pending lifecycle action" in lost.message and "someone completed it, or it timed out" in lost.message
    assert "HoldsLost" in world.machines.metrics.names()


def test_a_seed_hold_whose_heartbeat_is_refused_says_the_seed_is_about_to_go(world: World):
    action = world.machines.begin("terminate", world.instance("seed-1"))
    world.machines.after_step["refuse_seed_node"] = lambda: world.wire.fail(
        "auto-scaling", "RecordLifecycleActionHeartbeat", "AccessDenied", status=403, times=10_000
    )

    execution = world.machines.run(action)

    assert (execution.status, execution.error) == ("FAILED", "DrainFailed")
    refused, lost = world.machines.alarms()
    assert refused.subject == "Service Fabric scale-in refused a seed node"
    assert lost.subject == f"Service Fabric hold lost: seed-1 on {action.instance_id}"
    assert "never drained" in lost.message and "telemetry cluster drain" not in lost.message
    assert world.cluster.node("seed-1").status == "Up"


# -- the hook's global timeout and the history limit -----------------------------------------


def test_a_drain_failing_at_its_deadline_is_held_to_the_end_inside_the_hooks_global_timeout(world: World):
    world.cluster.set_stuck_in_safety_check("scale-0")
    action = world.machines.begin("terminate", world.instance("scale-0"))

    execution = world.machines.run(action, real_seconds=120)

    (alarm,) = world.held(execution, action)  # still pending at the end: the global timeout not reached
    deadline, hold = int(world.setting("WORKFLOW_TIMEOUT_SECONDS")), int(world.setting("OPERATOR_HOLD_SECONDS"))
    assert deadline + hold <= execution.virtual_seconds <= global_timeout(action)
    assert "WaitTimedOut" in alarm.message and f"for {hold // 60} minutes" in alarm.message
    # The history the model bounds: nine events a turn of a wait loop, and about as many in all.
    assert len(execution.history) <= timing(world).drain_history_events
    entered = [n for n, e in enumerate(execution.history)
               if e["type"] == "TaskStateEntered" and e["stateEnteredEventDetails"]["name"] == "Wait until the node is Disabled"]  # fmt: skip
    assert {b - a for a, b in zip(entered, entered[1:])} == {EVENTS_PER_LOOP}


# -- EventBridge starting the execution ------------------------------------------------------


def tries_within(max_age: int) -> int:
    """How many failed StartExecution tries still leave one inside the event's age (asl_harness's
    schedule: 2, 4, 8 ... s, at most 300 s apart)."""
    waited, tries = 0.0, 0
    while waited + min(2.0 ** (tries + 1), 300.0) <= max_age:
        tries += 1
        waited += min(2.0**tries, 300.0)
    return tries


def test_an_execution_eventbridge_starts_late_still_drains_the_node(world: World):
    max_age = timing(world).event_age_seconds
    world.wire.fail("sfn", "StartExecution", "ThrottlingException", times=tries_within(max_age))
    action = world.machines.begin("terminate", world.instance("scale-0"))

    delivery = world.machines.deliver(action)

    assert delivery.execution is not None and delivery.tries == tries_within(max_age) + 1
    world.continued(delivery.execution, action)
    assert action.heartbeats[0] - action.started_at > action.heartbeat_timeout / 2  # it really was late
    assert world.removed("scale-0") and world.machines.dead_letters() == []


def test_an_event_eventbridge_could_not_deliver_is_kept_for_an_operator(world: World):
    world.wire.fail("sfn", "StartExecution", "ThrottlingException", times=10_000)
    action = world.machines.begin("terminate", world.instance("scale-0"))

    delivery = world.machines.deliver(action)

    assert delivery.execution is None
    (letter,) = world.machines.dead_letters()
    assert letter["attributes"]["EXHAUSTED_RETRY_CONDITION"] == "MaximumEventAgeInSeconds"
    assert letter["attributes"]["ERROR_CODE"] == "THROTTLING"
    assert letter["body"]["detail"]["EC2InstanceId"] == action.instance_id
    # The queue's depth alarm fires with the action still pending; the README's row: start the
    # state machine with the message's body as its input while the instance waits.
    assert action.pending
    world.wire.faults.clear()
    machine = next(m for m in world.machines.state_machines.values() if m["arn"] == letter["attributes"]["TARGET_ARN"])
    world.continued(world.machines.start(machine, letter["body"]), action)
    assert world.removed("scale-0")


@pytest.mark.parametrize("code", ["StateMachineDoesNotExist", "ExecutionLimitExceeded"])
def test_an_event_refused_with_a_4xx_goes_to_the_queue_at_once(world: World, code: str):
    world.wire.fail("sfn", "StartExecution", code, times=1)
    action = world.machines.begin("launch", world.instance())

    delivery = world.machines.deliver(action)

    assert delivery.execution is None and delivery.tries == 1
    (letter,) = world.machines.dead_letters()
    assert letter["attributes"]["RETRY_ATTEMPTS"] == "0" and "EXHAUSTED_RETRY_CONDITION" not in letter["attributes"]


# -- the reaper's backstop for events lost outright --------------------------------------------


@pytest.mark.parametrize("transition", ["terminate", "launch"])
def test_a_lifecycle_event_never_delivered_is_picked_up_by_the_reaper(world: World, transition: str):
    """Auto Scaling sends lifecycle events on a best-effort basis (User Guide, event reference), and
    an EventBridge delivery can fail outright: the reaper's next run finds the instance waiting in
    its hook with no execution, records a heartbeat and starts one."""
    instance_id = world.instance("scale-0" if transition == "terminate" else "")
    action = world.machines.begin(transition, instance_id)
    world.clock.sleep(timing(world).reaper_interval_seconds)  # no event came; the reaper runs next

    answer, executions = world.machines.run_reaper()

    (execution,) = executions
    (restart,) = answer["actions_restarted"]
    assert (restart["instance_id"], restart["heartbeat"]) == (instance_id, True)
    world.continued(execution, action)
    assert action.heartbeats[0] - action.started_at <= action.heartbeat_timeout
    assert "LifecycleActionsRestarted" in world.machines.metrics.names()
    if transition == "terminate":
        assert world.removed("scale-0")
    else:
        assert world.cluster.node(f"scale-{instance_id}").status == "Up"


def test_the_reaper_leaves_alone_an_action_an_execution_already_served(world: World):
    """A failed drain's hold is over and its action waits to time out: that is meant, not lost."""
    action = failed_drain(world)
    world.held(world.machines.run(action), action)
    assert action.pending

    answer, executions = world.machines.run_reaper()

    assert (answer["actions_waiting"], answer["actions_restarted"], executions) == (1, [], [])
