"""The states of the scale-in and scale-out state machines, as plain functions.

Each state invokes the function's Lambda with `{"step": NAME, "state": <the execution's
JSON>}`; the step reads what it needs from the state, calls one logic function, and
returns a JSON document the state machine stores under the step's key (see
stacks/constructs/lifecycle_workflows.py for the wiring). Every step is idempotent,
so Step Functions' retries and duplicated lifecycle events are harmless.

The execution's state:
    hook         the lifecycle action (group, hook, instance, token)
    owner        who holds the membership lock for this execution
    started_at   epoch seconds; deadline = started_at + workflow timeout
    <step>       each step's result, e.g. node, deactivation, plan, join, configuration
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from .errors import ActionNoLongerPending, LifecycleError, WaitTimedOut
from .interfaces import IN_SERVICE, RETAINED_STATE, LifecycleHook
from .lifecycle import ABANDON, CONTINUE, complete_lifecycle_action
from .membership_config import (
    check_node_removed,
    poll_configuration_upgrade,
    start_configuration_registration,
    start_configuration_removal,
)
from .orphans import Restart, execution_name, lifecycle_event, orphans
from .reaper import decide_reaping, instance_states_by_node
from .results import NodePlan, Outcome
from .runtime import Runtime
from .scale_in import (
    deactivate_node,
    poll_deactivation,
    poll_node_down,
    refuse_seed_node,
    remove_node_state,
    resolve_node,
    stop_fabric_host,
)
from .scale_out import (
    clean_up_failed_join,
    join_node,
    plan_node,
    poll_node_up,
    tag_node_instance,
)

State = Mapping[str, Any]
Step = Callable[[Runtime, State], dict[str, Any]]

SCALE_IN = "scale-in"
SCALE_OUT = "scale-out"
# An SNS subject "must be less than 100 characters long" (SNS API Reference, Publish, Subject).
SUBJECT_LIMIT = 99


# -- shared by both workflows ---------------------------------------------------------


def begin(runtime: Runtime, state: State, *, flow: str) -> dict[str, Any]:
    """From the EventBridge event to the execution's state, and a first heartbeat: EventBridge
    may have retried the start for most of the hook's heartbeat timeout."""
    event, execution = state.get("event") or {}, str(state.get("execution") or "")
    try:
        hook = LifecycleHook.from_event_detail(event["detail"])
    except (KeyError, TypeError) as err:
        raise LifecycleError(f"not an Auto Scaling lifecycle action event: missing {err}") from err
    return {
        "hook": hook.to_dict(),
        "flow": flow,
        "owner": f"{flow}:{hook.instance_id}:{execution}",
        "started_at": runtime.clock(),
        "heartbeat": _try_keep_alive(runtime, hook),
    }


def acquire_lock(runtime: Runtime, state: State) -> dict[str, Any]:
    """Take the membership lock, or say who holds it (the state machine waits and retries,
    keeping the lifecycle action alive meanwhile)."""
    _keep_alive(runtime, state)
    # The owner names the flow and the instance; the node is known only after the lock is taken.
    intent = "join" if state.get("flow") == SCALE_OUT else "drain"
    grant = runtime.lock.acquire(state["owner"], ttl_seconds=runtime.settings.lock_ttl_seconds, intent=intent)
    if not grant.acquired:
        _check_deadline(runtime, state, f"the membership lock (held by {grant.holder})")
    return grant.to_dict()


def retain_instance(runtime: Runtime, state: State) -> dict[str, Any]:
    """A seed node's instance is never let go: give the lock up, then ABANDON the terminate action,
    which keeps the instance running, retained, for an operator (the group's retention policy)."""
    lock_note = _release_for_failure(runtime, state)
    return {"lock_released": not lock_note, "action": _end_terminate_action(runtime, _hook_or_none(state), ABANDON)}


def poll_upgrade(runtime: Runtime, state: State) -> dict[str, Any]:
    _check_deadline(runtime, state, "the configuration upgrade")
    status = poll_configuration_upgrade(
        runtime.client,
        state["configuration"],
        now=runtime.clock(),
        lifecycle=runtime.lifecycle,
        hook=_hook(state),
    )
    _still_pending(state, status.heartbeat)
    return status.to_dict()


def _hook(state: State) -> LifecycleHook:
    hook = _hook_or_none(state)
    if hook is None:
        raise LifecycleError("the execution's state names no lifecycle action")
    return hook


def _hook_or_none(state: State) -> LifecycleHook | None:
    """The action begin read, or, on a failure path that begin never answered (throttled, or
    the function broken), the one the execution's input names: the state is then the event."""
    if state.get("hook"):
        return LifecycleHook(**state["hook"])
    try:
        return LifecycleHook.from_event_detail(state["detail"])
    except (KeyError, TypeError):
        return None


def _keep_alive(runtime: Runtime, state: State) -> None:
    """Restart the hook's heartbeat timer, first thing in every step that works on the action:
    a step retried through an outage must not let the instance go meanwhile. A failure leaves
    the step (a throttle is retried with it; a refusal ends in the failure path)."""
    _still_pending(state, runtime.lifecycle.record_lifecycle_action_heartbeat(_hook(state)))


def _still_pending(state: State, heartbeat: bool | None) -> None:
    """A join whose launch action Auto Scaling no longer has stops here: another execution
    completed it (EventBridge delivers at least once, and the reaper may restart an action an
    execution already serves), someone did by hand, or it timed out, and the instance then
    terminates through the terminate hook, whose drain owns the node from there. A drain goes on:
    its machine still runs, and the node must leave the cluster whatever became of the action."""
    if heartbeat is False and state.get("flow") == SCALE_OUT:
        raise ActionNoLongerPending(
            f"Auto Scaling has no pending launch action for instance {_hook(state).instance_id}: another "
            "execution completed it, someone did by hand, or it timed out"
        )


def _try_keep_alive(runtime: Runtime, hook: LifecycleHook | None) -> bool | None:
    """A heartbeat in a step that must not fail (the first step, the failure path): whether it
    was recorded (None: no action to keep, or the call failed; the next step tries again)."""
    if hook is None:
        return None
    try:
        return runtime.lifecycle.record_lifecycle_action_heartbeat(hook)
    except Exception as err:  # noqa: BLE001 - the step's own work must go on
        print(json.dumps({"heartbeat_failed": f"{type(err).__name__}: {err}"}))
        return None


def _release_for_failure(runtime: Runtime, state: State) -> str:
    """Give the lock up on the failure path without ever failing it: '' when released or not
    held, else why not (the lock then expires after its TTL)."""
    if not state.get("owner"):
        return ""
    try:
        runtime.lock.release(state["owner"])
    except Exception as err:  # noqa: BLE001 - the alarm and the end of the action must not depend on it
        return f"The membership lock could not be released ({type(err).__name__}: {err}); it expires by itself."
    return ""


def _over_deadline(runtime: Runtime, state: State) -> float | None:
    """The seconds since the drain or join began, once they are past its deadline."""
    elapsed = runtime.clock() - float(state["started_at"])
    return elapsed if elapsed > runtime.settings.workflow_timeout_seconds else None


def _check_deadline(runtime: Runtime, state: State, what: str) -> None:
    if (elapsed := _over_deadline(runtime, state)) is not None:
        raise WaitTimedOut(
            f"gave up after {elapsed:.0f} s waiting for {what} "
            f"(limit {runtime.settings.workflow_timeout_seconds} s)"
        )


def _start_work(runtime: Runtime, state: State, doing: str) -> None:
    """First in every step that starts work: the heartbeat, then the deadline, so that a drain
    or join past its deadline fails at its next step, and the hook's global timeout is never
    reached by steps run one after another (stacks/lifecycle_timing.py counts one)."""
    _keep_alive(runtime, state)
    if (elapsed := _over_deadline(runtime, state)) is not None:
        raise WaitTimedOut(
            f"out of time after {elapsed:.0f} s (limit {runtime.settings.workflow_timeout_seconds} s), "
            f"before {doing}"
        )


def _failure(state: State) -> str:
    """`{"Error": ..., "Cause": ...}` from a Catch, as one line: the message (led by the original
    exception's type), then the kind the state machine saw."""
    error = state.get("error") or {}
    name, cause = str(error.get("Error") or "unknown error"), error.get("Cause") or ""
    try:
        cause = str(json.loads(cause).get("errorMessage") or "")
    except (ValueError, AttributeError):
        pass
    return f"{cause} ({name})" if cause else name


def _elapsed(runtime: Runtime, state: State) -> float:
    return max(runtime.clock() - float(state.get("started_at") or runtime.clock()), 0.0)


def alarm_undelivered(runtime: Runtime, state: State) -> dict[str, Any]:
    """The alarm topic refused the alarm after every retry: count it (the AlarmsUndelivered
    alarm watches the count) and print the alarm into the function's log, then the execution
    goes on, as it would have."""
    _try_keep_alive(runtime, _hook_or_none(state))
    return count_undelivered_alarm(runtime, state)


def count_undelivered_alarm(runtime: Runtime, state: State) -> dict[str, Any]:
    """The AlarmsUndelivered count, and the alarm the topic refused printed into the log (every
    workflow's, the patch run's too)."""
    runtime.record_metric("AlarmsUndelivered", 1, "Count")
    failure = next((state[key] for key in ("failure", "gone", "finish") if (state.get(key) or {}).get("subject")), {})
    print(json.dumps({"undelivered_alarm": {"subject": failure.get("subject"), "message": failure.get("message"),
                                            "publish_error": state.get("alarm_error")}}))  # fmt: skip
    return {"counted": True}


# -- scale-in -------------------------------------------------------------------------


def resolve(runtime: Runtime, state: State) -> dict[str, Any]:
    _start_work(runtime, state, "resolving the node")
    resolution = resolve_node(runtime.client, runtime.instances, _hook(state).instance_id)
    if resolution.is_member:
        runtime.record_metric("DrainsStarted", 1, "Count")
    return resolution.to_dict()


def check_seed(runtime: Runtime, state: State) -> dict[str, Any]:
    _start_work(runtime, state, "checking for a seed node")
    return refuse_seed_node(runtime.client, state["node"]["node_name"]).to_dict()


def deactivate(runtime: Runtime, state: State) -> dict[str, Any]:
    _start_work(runtime, state, "deactivating the node")
    return deactivate_node(runtime.client, state["node"]["node_name"]).to_dict()


def wait_disabled(runtime: Runtime, state: State) -> dict[str, Any]:
    name = state["node"]["node_name"]
    _check_deadline(runtime, state, f"{name} to be Disabled")
    return poll_deactivation(
        runtime.client, name, lifecycle=runtime.lifecycle, hook=_hook(state)
    ).to_dict()


def remove_from_configuration(runtime: Runtime, state: State) -> dict[str, Any]:
    """The removal upgrade, while the machine runs (WAIT_FOR_UPGRADE: the state machine waits
    and calls again)."""
    _check_deadline(runtime, state, "other configuration upgrades to finish")
    _keep_alive(runtime, state)
    name = state["node"]["node_name"]
    return start_configuration_removal(runtime.client, name, now=runtime.clock()).to_dict()


def check_removed(runtime: Runtime, state: State) -> dict[str, Any]:
    """Is the node out of the node list? If not, the state machine runs the clean-up."""
    _keep_alive(runtime, state)
    return check_node_removed(runtime.client, state["node"]["node_name"]).to_dict()


def stop_host(runtime: Runtime, state: State) -> dict[str, Any]:
    _start_work(runtime, state, "stopping the Fabric host")
    name, instance_id = state["node"]["node_name"], _hook(state).instance_id
    return stop_fabric_host(runtime.client, runtime.host, name, instance_id).to_dict()


def wait_down(runtime: Runtime, state: State) -> dict[str, Any]:
    name = state["node"]["node_name"]
    _check_deadline(runtime, state, f"{name} to be Down")
    return poll_node_down(
        runtime.client,
        name,
        host=runtime.host,
        instance_id=_hook(state).instance_id,
        command_id=(state.get("host_stop") or {}).get("command_id", ""),
        lifecycle=runtime.lifecycle,
        hook=_hook(state),
    ).to_dict()


def remove_state(runtime: Runtime, state: State) -> dict[str, Any]:
    _start_work(runtime, state, "removing the node state")
    return remove_node_state(runtime.client, state["node"]["node_name"]).to_dict()


def finish_scale_in(runtime: Runtime, state: State) -> dict[str, Any]:
    """Complete with CONTINUE, give the lock up, count the drain. A drain that finds the action
    ended already looks whether Auto Scaling retained the instance (the action timed out to ABANDON
    mid-drain, or someone ABANDONed it): its node is out, but the instance runs, billed, until
    someone terminates it, so the alarm says so (`alarm`, published next)."""
    hook = _hook(state)
    completion = complete_lifecycle_action(runtime.lifecycle, hook, CONTINUE)
    release = runtime.lock.release(state["owner"])
    drained = bool(state.get("node", {}).get("is_member"))
    if drained:
        runtime.record_metric("DrainsSucceeded", 1, "Count")
        runtime.record_metric("DrainDurationSeconds", _elapsed(runtime, state), "Seconds")
    found = {**completion.to_dict(), "lock_released": release.released, "drained": drained, "alarm": False}
    if completion.outcome != Outcome.ALREADY_DONE:
        return found
    where = _instance_state(runtime, hook)
    retained = None if where is None else where == RETAINED_STATE
    if retained is False:
        return found  # completed before (this step's earlier try, or another execution): the instance goes
    node = state.get("node", {}).get("node_name") or "(no node)"
    seen = "is retained by Auto Scaling (Terminating:Retained)" if retained else "may be retained by Auto Scaling"
    return {
        **found,
        "alarm": True,
        "subject": f"Service Fabric drain done, instance kept: {hook.instance_id}"[:SUBJECT_LIMIT],
        "message": (
            f"Node {node} has left the cluster, but Auto Scaling had no pending terminate action for instance "
            f"{hook.instance_id} any more (it timed out to ABANDON, or someone ended it), and the instance {seen}: "
            f"it runs, billed, until terminated. Terminate it: aws autoscaling terminate-instance-in-auto-scaling-group "
            f"--instance-id {hook.instance_id} --no-should-decrement-desired-capacity --region {runtime.settings.region}"
        ),
    }


def _instance_state(runtime: Runtime, hook: LifecycleHook) -> str | None:
    """Where Auto Scaling has the instance whose action ended before this execution completed it
    (its LifecycleState, '' when the group no longer lists it); None when that cannot be read: the
    drain or join is done, and only the alarm's wording depends on it."""
    try:
        return runtime.lifecycle.instance_state(hook.group_name, hook.instance_id)
    except Exception as err:  # noqa: BLE001 - see above
        print(json.dumps({"instance_state_unknown": f"{type(err).__name__}: {err}"}))
        return None


def fail_scale_in(runtime: Runtime, state: State) -> dict[str, Any]:
    """After any failure: give the lock up, end the terminate action, count it, word the alarm
    (published next). Needs neither the gateway nor a well-formed event, and fails on nothing it
    calls. The action ends with ABANDON, which keeps the instance running, retained, so an operator
    can finish the drain while the removal upgrade can still reach the machine; with CONTINUE only
    when the node is known to have left the cluster already (a later step failed, not the drain)."""
    found = _hook_or_none(state)
    kept = _keep_lock_for_removal(state)
    lock_note = kept or _release_for_failure(runtime, state)
    runtime.record_metric("DrainsFailed", 1, "Count")
    hook = found.to_dict() if found else {}
    instance_id = hook.get("instance_id") or "(unknown instance)"
    node = (state.get("node") or {}).get("node_name") or "(unresolved)"
    node_left = (state.get("node") or {}).get("is_member") is False or (state.get("removal") or {}).get("removed") is True
    never_held = bool(state.get("lock")) and not state["lock"].get("acquired")
    if never_held and hook:
        # Refused the lock until its deadline: a duplicate execution (EventBridge delivers at least
        # once, the reaper can race it) may have waited while its twin drains the node, and an
        # ABANDON here would retain the instance mid-drain. Left alone, the action ends by its twin,
        # or by its default, ABANDON. (One that failed before asking for the lock ABANDONs: no
        # execution is known to serve the action, and retention keeps the instance at once.)
        holder = state["lock"].get("holder") or "nobody"
        ended = (f"This execution never held the membership lock (last held by {holder}), so it changed nothing, and "
                 "its terminate action was left alone: another execution may be serving it; if none is, it times "
                 "out with the hook's default result, ABANDON, and Auto Scaling retains the instance.")
    else:
        ended = _end_terminate_action(runtime, found, CONTINUE if node_left else ABANDON)
    if not hook:
        then = "There is no lifecycle action to end: the event did not name one."
    elif never_held:
        then = (
            f"{ended} If `aws autoscaling describe-auto-scaling-instances --instance-ids {instance_id}` shows it "
            "Terminating:Retained, no execution drains it any more: drain its node with telemetry cluster drain, then "
            "terminate the instance."
        )
    elif node_left:
        then = f"The node had left the cluster already; {ended}"
    else:
        then = (
            f"{ended} Finish the drain while the machine runs (the removal upgrade needs it to answer on port 445): "
            f"telemetry cluster drain --env <environment> --node {node}; then let the instance go: aws autoscaling "
            f"terminate-instance-in-auto-scaling-group --instance-id {instance_id} --no-should-decrement-desired-capacity "
            f"--region {runtime.settings.region}. A node whose machine is gone can no longer be removed by upgrade "
            "(docs/day-2.md: lost machines)."
        )
    return {
        "lock_released": not lock_note,
        "lock_kept": bool(kept),
        "subject": f"Service Fabric drain failed: {node} on {instance_id}"[:SUBJECT_LIMIT],
        "message": (
            f"Draining node {node} (instance {instance_id}, group {hook.get('group_name', '(unknown)')}) "
            f"failed after {_elapsed(runtime, state):.0f} s: {_failure(state)}. {then} {lock_note}"
        ).strip(),
    }


def _keep_lock_for_removal(state: State) -> str:
    """A drain that started its removal upgrade and never saw it over leaves the lock to expire
    rather than releasing it: the upgrade may still roll, and no join, drain or patched node may
    overlap it (Service Fabric runs one upgrade at a time, and a node taken out of service meanwhile
    would be a second domain down). '' when there is no such upgrade; else what the alarm says."""
    if not (state.get("configuration") or {}).get("changed") or (state.get("upgrade") or {}).get("done"):
        return ""
    if "ConfigurationUpgradeFailed" in _failure(state):  # the upgrade ended: failed or rolled back
        return ""
    expires = float((state.get("lock") or {}).get("expires_at") or 0)
    until = datetime.fromtimestamp(expires, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if expires else "its TTL"
    return (f"The membership lock is left to expire (at {until}) rather than released: the removal upgrade this drain "
            "started may still roll, and no join, drain or patched node may overlap it.")


def _end_terminate_action(runtime: Runtime, hook: LifecycleHook | None, result: str) -> str:
    """Complete the terminate action with `result`, never failing; what became of it, in words."""
    if hook is None:
        return "There was no lifecycle action to end."
    try:
        completion = complete_lifecycle_action(runtime.lifecycle, hook, result)
    except Exception as err:  # noqa: BLE001 - the alarm must go out whatever
        return (f"Completing its terminate action failed ({type(err).__name__}: {err}); the action times out with "
                "the hook's default result, ABANDON, and Auto Scaling retains the instance all the same.")  # fmt: skip
    if completion.outcome == Outcome.ALREADY_DONE:
        return ("Auto Scaling had no pending terminate action for it any more (completed already, or timed out: a "
                "terminate action that times out is ABANDONed, and its instance retained).")  # fmt: skip
    if result == CONTINUE:
        return "Its terminate action was completed with CONTINUE: the instance terminates."
    return ("Its terminate action was ABANDONed: Auto Scaling retains the instance (Terminating:Retained), running "
            "and outside the group's desired capacity, until it is terminated.")  # fmt: skip


# -- scale-out ------------------------------------------------------------------------


def _plan(state: State) -> NodePlan:
    return NodePlan(**state["plan"])


def plan(runtime: Runtime, state: State) -> dict[str, Any]:
    _start_work(runtime, state, "planning the node")
    runtime.record_metric("JoinsStarted", 1, "Count")
    return plan_node(
        runtime.client,
        runtime.instances,
        _hook(state).instance_id,
        node_type=runtime.settings.scaling_node_type,
        region=runtime.settings.region,
    ).to_dict()


def join(runtime: Runtime, state: State) -> dict[str, Any]:
    _check_deadline(runtime, state, "the instance to take AddNode.ps1")
    _keep_alive(runtime, state)
    return join_node(runtime.client, runtime.host, _plan(state)).to_dict()


def wait_up(runtime: Runtime, state: State) -> dict[str, Any]:
    node_plan = _plan(state)
    _check_deadline(runtime, state, f"{node_plan.node_name} to be Up")
    status = poll_node_up(
        runtime.client,
        node_plan,
        host=runtime.host,
        command_id=state["join"].get("command_id", ""),
        lifecycle=runtime.lifecycle,
        hook=_hook(state),
    )
    _still_pending(state, status.heartbeat)
    return status.to_dict()


def tag_instance(runtime: Runtime, state: State) -> dict[str, Any]:
    _start_work(runtime, state, "tagging the instance")
    return tag_node_instance(runtime.instances, _plan(state))


def register_in_configuration(runtime: Runtime, state: State) -> dict[str, Any]:
    """Always one registration upgrade after AddNode.ps1, recorded in the execution's state
    (`configuration`): GetClusterConfiguration lists the node before the UOS knows it."""
    _check_deadline(runtime, state, "other configuration upgrades to finish")
    _keep_alive(runtime, state)
    name = _plan(state).node_name
    return start_configuration_registration(runtime.client, name, now=runtime.clock()).to_dict()


def finish_scale_out(runtime: Runtime, state: State) -> dict[str, Any]:
    """Complete with CONTINUE, give the lock up, count the join. A join that finds the action ended
    already looks where Auto Scaling has the instance: InService, this step's earlier try (or
    another execution) completed it, and the join counts; anywhere else the action timed out to
    ABANDON, or someone ended it, after the node joined, so the alarm says what becomes of the node
    (`alarm`, published next)."""
    hook = _hook(state)
    completion = complete_lifecycle_action(runtime.lifecycle, hook, CONTINUE)
    release = runtime.lock.release(state["owner"])
    found = {**completion.to_dict(), "lock_released": release.released, "alarm": False}
    where = IN_SERVICE if completion.outcome != Outcome.ALREADY_DONE else _instance_state(runtime, hook)
    if where == IN_SERVICE:
        runtime.record_metric("JoinsSucceeded", 1, "Count")
        runtime.record_metric("JoinDurationSeconds", _elapsed(runtime, state), "Seconds")
        return found
    runtime.record_metric("JoinsStopped", 1, "Count")
    name = (state.get("plan") or {}).get("node_name", "") or "(no node)"
    seen = f"Auto Scaling shows the instance {where}" if where else (
        "the group does not list the instance" if where == "" else "where Auto Scaling has the instance could not be read")
    return {
        **found,
        "alarm": True,
        "subject": f"Service Fabric join stopped: launch action of {hook.instance_id} ended"[:SUBJECT_LIMIT],
        "message": (
            f"Node {name} joined the cluster on instance {hook.instance_id}, but Auto Scaling had no pending launch "
            f"action for it any more when the join completed (it timed out to ABANDON, or someone ended it), and {seen}. "
            f"If the instance terminates, its terminate hook drains {name}; if it stays InService, nothing is lost. "
            f"Check {name} with telemetry cluster status."
        ),
    }


def clean_up_join(runtime: Runtime, state: State) -> dict[str, Any]:
    """The first step after any failure: give the lock up, then tag and deactivate a node the
    join half-added, as far as the cluster answers. Reports, never raises, what it could not do.

    Only the owner of the node cleans it up: an execution that never took the membership lock
    (a duplicate that waited while another joined the node) touches nothing, and neither does one
    whose launch action is gone (completed with CONTINUE, by this execution or another, so the
    node serves on an InService instance; or timed out, so the terminate hook's drain owns it)."""
    lock_note = _release_for_failure(runtime, state)
    found = _hook_or_none(state)
    hook = found.to_dict() if found else {}
    if not hook:
        return {"lock_released": not lock_note, "deactivated": False, "node_name": "", "detail": lock_note}
    name = (state.get("plan") or {}).get("node_name", "")
    left_alone, never_held = "", not (state.get("lock") or {}).get("acquired")
    if never_held:
        holder = (state.get("lock") or {}).get("holder") or "nobody"
        left_alone = f"This execution never held the membership lock (last held by {holder}), so it changed nothing in the cluster."
    elif (pending := _try_keep_alive(runtime, found)) is not True:
        # Unknown (the heartbeat failed) is taken as gone: a node left alone on an instance whose
        # launch is then abandoned is drained by its terminate hook; one deactivated on an instance
        # that serves it is lost capacity.
        left_alone = ("Auto Scaling had no pending launch action any more" if pending is False else
                      "Whether Auto Scaling still had the launch action could not be read")  # fmt: skip
        left_alone += (", so the node was left as it is: the instance serves it, or terminates and its drain "
                       "removes it.")
    if left_alone:
        return {"instance_id": hook["instance_id"], "node_name": name, "deactivated": False, "left_alone": True,
                "never_held": never_held, "lock_released": not lock_note, "detail": f"{left_alone} {lock_note}".strip()}  # fmt: skip
    cleanup = clean_up_failed_join(lambda: runtime.client, runtime.instances, hook["instance_id"], name)
    return {**cleanup.to_dict(), "lock_released": not lock_note, "detail": f"{cleanup.detail} {lock_note}".strip()}


def abandon_launch(runtime: Runtime, state: State) -> dict[str, Any]:
    """ABANDON the launch (Auto Scaling then replaces the instance), count the failure and word
    the alarm. Needs no gateway: the lifecycle result never waits on the cluster."""
    found = _hook_or_none(state)
    hook = found.to_dict() if found else {}
    cleanup = state.get("cleanup") or {}
    # An execution that never held the lock may be a duplicate whose twin is joining the node now:
    # it leaves the action to whoever holds it, or to the hook's default result (ABANDON) if nobody does.
    owned = found is not None and not cleanup.get("never_held")
    completion = complete_lifecycle_action(runtime.lifecycle, found, ABANDON).to_dict() if owned else {}
    runtime.record_metric("JoinsFailed", 1, "Count")
    instance_id = hook.get("instance_id") or "(unknown instance)"
    if not hook:
        outcome = "There is no launch to abandon: the event did not name one."
    elif not owned:
        outcome = ("The launch action was not completed either: another execution may be serving it; if none "
                   "is, it times out with the hook's default result, ABANDON, and Auto Scaling replaces the instance.")  # fmt: skip
    elif completion.get("outcome") == Outcome.ALREADY_DONE:
        outcome = ("Auto Scaling had no pending launch action any more (completed already, or timed out), so "
                   "nothing was abandoned.")  # fmt: skip
    else:
        outcome = "The launch was abandoned, so Auto Scaling replaces the instance"
        if cleanup.get("node_name") and not cleanup.get("left_alone"):
            outcome += f"; node {cleanup['node_name']} deactivated: {bool(cleanup.get('deactivated'))}"
        outcome += "."
    notes = cleanup.get("detail") or ("the clean-up step itself failed; see the execution" if "cleanup_error" in state else "")
    return {
        **completion,
        "subject": f"Service Fabric join failed: {instance_id}"[:SUBJECT_LIMIT],
        "message": (
            f"Joining instance {instance_id} (group {hook.get('group_name', '(unknown)')}) failed after "
            f"{_elapsed(runtime, state):.0f} s: {_failure(state)}. {outcome} {notes}"
        ).strip(),
    }


def action_gone(runtime: Runtime, state: State) -> dict[str, Any]:
    """Auto Scaling no longer has the launch action: give the lock up and stop, touching no node.
    Quiet when this execution never got past the lock (a duplicate: the execution that held the
    lock served the action); an alarm when the action ended while this execution was joining."""
    lock_note = _release_for_failure(runtime, state)
    hook = _hook_or_none(state)
    instance_id = hook.instance_id if hook else "(unknown instance)"
    name = (state.get("plan") or {}).get("node_name", "")
    if not name:
        return {"alarm": False, "lock_released": not lock_note, "detail": f"another execution served the action. {lock_note}".strip()}
    runtime.record_metric("JoinsStopped", 1, "Count")
    return {
        "alarm": True,
        "lock_released": not lock_note,
        "subject": f"Service Fabric join stopped: launch action of {instance_id} ended"[:SUBJECT_LIMIT],
        "message": (
            f"Joining instance {instance_id} as node {name} stopped after {_elapsed(runtime, state):.0f} s: Auto Scaling "
            "no longer has its launch action (it timed out, or someone completed it outside this automation). The "
            f"node was left as it is. If the instance terminates, its terminate hook drains {name}; if it stays "
            f"InService, check {name} with telemetry cluster status and drain it with telemetry cluster drain "
            f"--env <environment> --node {name} if it is not Up. {lock_note}"
        ).strip(),
    }


# -- the reaper (a scheduled function, not a state machine) --------------------------


def restart_orphaned_actions(runtime: Runtime, now: datetime | None = None) -> dict[str, Any]:
    """Start an execution for every lifecycle action that waits with none working on it (its
    event lost, or never sent: orphans.py), after a heartbeat that gives it a full heartbeat
    timeout. Needs no gateway, so it runs first."""
    settings, executions = runtime.settings, runtime.executions
    now = now or datetime.now(timezone.utc)
    since = now - timedelta(seconds=settings.global_timeout_seconds)
    machines = {"launch": settings.scale_out_state_machine_arn, "terminate": settings.scale_in_state_machine_arn}
    hooks = {"launch": settings.launch_hook_name, "terminate": settings.terminate_hook_name}
    waiting = runtime.lifecycle.waiting_instances(settings.scaling_group_name)
    if not waiting:
        return {"actions_waiting": 0, "actions_restarted": [], "actions_gone": []}
    if executions is None:
        raise LifecycleError("the reaper has no Step Functions client")
    served = {
        transition: executions.instances_served(machines[transition], since=since)
        for transition in sorted({w.transition for w in waiting})
    }
    restarted, gone = [], []
    for orphan in orphans(waiting, served):
        hook = LifecycleHook(settings.scaling_group_name, hooks[orphan.transition], orphan.instance_id)
        heartbeat = _try_keep_alive(runtime, hook)
        if heartbeat is False:  # Auto Scaling has no such action pending any more: nothing to save
            gone.append(orphan.instance_id)
            continue
        arn = machines[orphan.transition]
        event = lifecycle_event(
            group_name=hook.group_name, hook_name=hook.hook_name, instance_id=orphan.instance_id,
            transition=orphan.transition, account=arn.split(":")[4], region=settings.region, now=now,
        )  # fmt: skip
        execution = executions.start(arn, execution_name(orphan.instance_id, now), event)
        runtime.record_metric("LifecycleActionsRestarted", 1, "Count")
        restarted.append(Restart(orphan.instance_id, orphan.transition, execution, heartbeat))
        print(json.dumps({"restarted_lifecycle_action": restarted[-1].to_dict()}))
    return {"actions_waiting": len(waiting), "actions_restarted": [r.to_dict() for r in restarted], "actions_gone": gone}


def reap(runtime: Runtime) -> dict[str, Any]:
    """The reaper's scheduled run: orphaned lifecycle actions first (no gateway needed), then
    the zombie count; each runs whatever became of the other, and a failure of either fails the
    run after both (the next run follows on schedule)."""
    found: dict[str, Any] = {}
    failures: list[Exception] = []
    for part in (restart_orphaned_actions, reap_zombies):
        try:
            found.update(part(runtime))
        except Exception as err:  # noqa: BLE001 - the other part must run all the same
            failures.append(err)
    if failures:
        raise failures[0]
    return found



def reap_zombies(runtime: Runtime, now: datetime | None = None) -> dict[str, Any]:
    """Count scaling nodes that are Down with their instance gone (zombies) and Down seed nodes,
    for the alarms; change nothing. The UOS removes a node only by configuration upgrade, and
    refuses that for a machine that does not answer on 445 (StandaloneSettingsValidator,
    CheckRequiredPorts); RemoveNodeState alone would leave the UOS listing a node the FM has
    dropped, and every later upgrade, joins included, would fail validation. So a zombie stays
    Down in the cluster (later upgrades keep it in `nodes` and pass) and docs/day-2.md's runbook
    says what an operator can do."""
    nodes = runtime.client.get_node_info_list(status_filter="all")
    states = instance_states_by_node(nodes, runtime.instances.list_node_instances())
    decision = decide_reaping(
        nodes,
        states,
        now=now or datetime.now(timezone.utc),
        down_for=timedelta(seconds=runtime.settings.zombie_down_seconds),
        node_types={runtime.settings.scaling_node_type},
        restart_for=timedelta(seconds=runtime.settings.patch_node_timeout_seconds),
    )
    runtime.record_metric("ZombieNodes", decision.zombie_count, "Count")
    runtime.record_metric("SeedNodesDown", len(decision.seed_nodes_down), "Count")
    return decision.to_dict()


def keep_warm(runtime: Runtime, state: State) -> dict[str, Any]:
    """A scheduled no-op: a function in a VPC left idle for weeks goes Inactive, and the invoke
    that finds it so fails while Lambda rebuilds its network interface (Lambda Developer Guide,
    "Lambda function states", Inactive), far longer than the state machines' invoke retries. A
    daily invoke keeps the drain and join functions ready for a scaling event after a quiet month."""
    return {"warm": True}


SCALE_IN_STEPS: dict[str, Step] = {
    "begin": lambda runtime, state: begin(runtime, state, flow=SCALE_IN),
    "acquire_lock": acquire_lock,
    "retain_instance": retain_instance,
    "resolve_node": resolve,
    "refuse_seed_node": check_seed,
    "deactivate_node": deactivate,
    "poll_deactivation": wait_disabled,
    "start_configuration_removal": remove_from_configuration,
    "poll_configuration_upgrade": poll_upgrade,
    "check_node_removed": check_removed,
    "stop_fabric_host": stop_host,
    "poll_node_down": wait_down,
    "remove_node_state": remove_state,
    "finish": finish_scale_in,
    "fail": fail_scale_in,
    "alarm_undelivered": alarm_undelivered,
    "keep_warm": keep_warm,
}

SCALE_OUT_STEPS: dict[str, Step] = {
    "begin": lambda runtime, state: begin(runtime, state, flow=SCALE_OUT),
    "acquire_lock": acquire_lock,
    "plan_node": plan,
    "join_node": join,
    "poll_node_up": wait_up,
    "tag_node_instance": tag_instance,
    "start_configuration_registration": register_in_configuration,
    "poll_configuration_upgrade": poll_upgrade,
    "finish": finish_scale_out,
    "clean_up": clean_up_join,
    "abandon": abandon_launch,
    "action_gone": action_gone,
    "alarm_undelivered": alarm_undelivered,
    "keep_warm": keep_warm,
}


def run_step(steps: Mapping[str, Step], runtime: Runtime, event: Mapping[str, Any]) -> dict:
    """`{"step": NAME, "state": {...}}` -> the step's result."""
    name = str(event.get("step", ""))
    step = steps.get(name)
    if step is None:
        raise LifecycleError(f"unknown step {name!r}; known: {', '.join(sorted(steps))}")
    return step(runtime, event.get("state") or {})
