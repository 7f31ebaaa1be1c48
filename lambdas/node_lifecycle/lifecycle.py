"""Lifecycle hook steps: complete the action, and keep it alive while we work."""

from __future__ import annotations

from .interfaces import AutoScalingLifecycle, LifecycleHook
from .results import LifecycleCompletion, Outcome

CONTINUE = "CONTINUE"
ABANDON = "ABANDON"


def complete_lifecycle_action(
    lifecycle: AutoScalingLifecycle, hook: LifecycleHook, result: str = CONTINUE
) -> LifecycleCompletion:
    """End the lifecycle action (CONTINUE: launch or terminate goes on; ABANDON: the launch is
    undone). Idempotent: an action already completed is fine."""
    if result not in (CONTINUE, ABANDON):
        raise ValueError(f"lifecycle action result must be CONTINUE or ABANDON, got {result!r}")
    completed = lifecycle.complete_lifecycle_action(hook, result)
    outcome = Outcome.REQUESTED if completed else Outcome.ALREADY_DONE
    return LifecycleCompletion(instance_id=hook.instance_id, outcome=outcome, result=result)


def record_heartbeat(
    lifecycle: AutoScalingLifecycle | None, hook: LifecycleHook | None
) -> bool | None:
    """Restart the hook's heartbeat timer when a hook is given.

    None without a hook (operator runs); False when Auto Scaling no longer has the action
    pending (it timed out or was completed), which the drain reports but survives: the
    instance terminates either way, and the remaining steps still clean the cluster up.
    """
    if lifecycle is None or hook is None:
        return None
    return lifecycle.record_lifecycle_action_heartbeat(hook)
