"""The node lifecycle's state machines, executed as synthesized for dev, staging and prod, against
what a real account does that the other scenarios never do: Lambda refusing invokes, Auto Scaling
refusing heartbeats, the hook's global timeout, EventBridge failing to start an execution.

Each environment runs with its own heartbeat timeout and deadlines (its synthesized templates),
on the virtual clock that the lifecycle action's heartbeat timer and global timeout
(lifecycle_actions.py) also read. However a scenario ends, no instance leaves while its node is
still in the cluster: either the node was removed and the action completed with CONTINUE, or the
action was ABANDONed, by the failure path or by its timeout, and the group retains the instance
for an operator, who was told.

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
from botocore.exceptions import ClientError

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


def test_a_failed_drain_throttled_at_every_step_still_alarms_and_is_retained(world: World):
    world.machines.throttle_each_step_once = True
    action = failed_drain(world)

    (alarm,) = world.retained(world.machines.run(action), action)

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


def test_reading_the_lifecycle_action_refused_past_its_retries_still_retains_the_instance(world: World):
    """The failure path reads the instance from the event itself when begin never answered."""
    world.machines.fail_invoke("TooManyRequestsException", step="begin", times=INVOKE_RETRY.max_attempts + 1)
    action = world.machines.begin("terminate", world.instance("scale-0"))

    execution = world.machines.run(action)

    (alarm,) = world.retained(execution, action)
    assert alarm.subject == f"Service Fabric drain failed: (unresolved) on {action.instance_id}"
    assert THROTTLED in alarm.message
    assert world.cluster.node("scale-0").status == "Up" and world.posts() == 0


# -- ending the terminate action ----------------------------------------------------------


def test_a_failed_drain_whose_abandon_is_refused_is_retained_when_its_action_times_out(world: World):
    """Auto Scaling refuses CompleteLifecycleAction for good (the function's role, say): the alarm
    says so, and the action's own timeout (default result ABANDON) retains the instance all the
    same: the node is never let go undrained."""
    action = failed_drain(world)
    world.wire.fail("auto-scaling", "CompleteLifecycleAction", "AccessDenied", status=403, times=10_000,
                    message="User is not authorized to perform: autoscaling:CompleteLifecycleAction")  # fmt: skip

    execution = world.machines.run(action)

    assert (execution.status, execution.error) == ("FAILED", "DrainFailed") and action.pending
    (alarm,) = world.machines.alarms()
    assert "Completing its terminate action failed (ClientError" in alarm.message and "AccessDenied" in alarm.message
    assert "retains the instance all the same" in alarm.message
    world.clock.sleep(action.heartbeat_timeout + 1)
    world.machines.lifecycle.settle()
    assert action.retained and action.ended_by == "timed out"
    assert world.cluster.node("scale-0").status == "Disabled" and "scale-0" in world.cluster.uos_nodes


@pytest.mark.overlap
def test_a_drain_whose_terminate_action_is_gone_still_drains_the_node_and_says_the_instance_is_kept(world: World):
    """Someone ABANDONed the action by hand mid-drain (or it timed out to ABANDON): the drain goes
    on while the machine answers and the node leaves; the instance is retained, so the finish step
    finds it in Terminating:Retained and says how to let it go, or it would run, billed, for good."""
    action = world.machines.begin("terminate", world.instance("scale-0"))
    world.machines.after_step["deactivate_node"] = lambda: world.machines.lifecycle.complete(
        group=action.group, hook=action.hook, token=action.token, instance_id="", result="ABANDON")

    execution = world.machines.run(action)

    assert execution.status == "SUCCEEDED" and execution.output["finish"]["outcome"] == "already_done"
    assert world.removed("scale-0") and action.retained
    (alarm,) = world.machines.alarms()
    assert alarm.subject == f"Service Fabric drain done, instance kept: {action.instance_id}"
    assert "is retained by Auto Scaling (Terminating:Retained)" in alarm.message
    assert f"terminate-instance-in-auto-scaling-group --instance-id {action.instance_id} --no-should-decrement" in alarm.message


def test_a_finish_resent_after_its_answer_was_lost_finds_its_own_continue_and_stays_quiet(world: World):
    """The CONTINUE went through but Lambda's answer was lost; the resent step finds no pending
    action, and the instance is not retained (it terminates): nothing to alarm about."""
    action = world.machines.begin("terminate", world.instance("scale-0"))
    lost = {"sent": 0}

    def answer_lost() -> None:
        lost["sent"] += 1
        raise ClientError({"Error": {"Code": "ServiceException", "Message": "the answer was lost (injected)"},
                           "ResponseMetadata": {"HTTPStatusCode": 500}}, "Invoke")  # fmt: skip

    world.machines.after_step["finish"] = answer_lost

    execution = world.machines.run(action)

    assert lost["sent"] == 1 and len(execution.steps("finish")) == 2
    assert execution.status == "SUCCEEDED" and execution.output["finish"]["outcome"] == "already_done"
    assert (action.result, action.ended_by) == ("CONTINUE", "completed") and world.removed("scale-0")
    assert world.machines.alarms() == []


# -- the hook's global timeout and the history limit -----------------------------------------


def test_a_drain_failing_at_its_deadline_is_retained_inside_the_hooks_global_timeout(world: World):
    world.cluster.set_stuck_in_safety_check("scale-0")
    action = world.machines.begin("terminate", world.instance("scale-0"))

    execution = world.machines.run(action, real_seconds=120)

    (alarm,) = world.retained(execution, action)
    assert action.ended_by == "completed"  # ABANDONed by the failure path, before the global timeout
    assert int(world.setting("WORKFLOW_TIMEOUT_SECONDS")) <= execution.virtual_seconds <= global_timeout(action)
    assert "WaitTimedOut" in alarm.message
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
    # The queue's depth alarm fires with the action still pending; docs/day-2.md's row: start the
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


@pytest.mark.overlap
def test_the_reaper_leaves_alone_an_action_an_execution_already_served(world: World):
    """A failed drain whose ABANDON Auto Scaling refused: its action waits to time out (and retain
    the instance), which is meant, not lost."""
    action = failed_drain(world)
    world.wire.fail("auto-scaling", "CompleteLifecycleAction", "AccessDenied", status=403, times=10_000)
    world.machines.run(action)
    assert action.pending

    answer, executions = world.machines.run_reaper()

    assert (answer["actions_waiting"], answer["actions_restarted"], executions) == (1, [], [])