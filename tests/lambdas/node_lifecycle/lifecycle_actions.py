"""Auto Scaling lifecycle actions as the service keeps them, for the two API operations moto 5.2
does not implement (CompleteLifecycleAction, RecordLifecycleActionHeartbeat). aws_wire.py answers
those requests from here; botocore builds and parses them with the real API model.

Each behaviour and its source (Amazon EC2 Auto Scaling User Guide, "Amazon EC2 Auto Scaling
lifecycle hooks" and "Configure a notification target / EventBridge events"; API reference):
- An action waits until it is completed, or until its heartbeat timeout passes without a
  heartbeat; then the hook's DefaultResult applies. RecordLifecycleActionHeartbeat restarts the
  heartbeat timer. No action lasts longer than 48 hours or 100 times the heartbeat timeout,
  whichever is smaller (the global timeout).
- For a terminate hook, CONTINUE lets the instance terminate; so does ABANDON, unless the group's
  instance lifecycle policy says `RetentionTriggers.TerminateHookAbandon = retain`: then an
  ABANDON, explicit or the default result of a timeout, leaves the instance Terminating:Retained,
  running, until TerminateInstanceInAutoScalingGroup (User Guide, "Control instance retention with
  instance lifecycle policies", "Configure instance retention", "Manage retained instances"). What
  the terminate hook does when a retained instance is then terminated, no page says: not modelled.
- An action addressed by token, or by instance id when no token is given.
- Once completed or timed out, both calls answer `ValidationError` "No active Lifecycle Action
  found with token <token>" (or "... with instance ID <id>"). The API reference does not give
  the text; it is what open-source clients match on (giantswarm's drainer, lifecycled), which
  is the risk here: AWS may word it otherwise.
- The EventBridge event carries `LifecycleActionToken`, `AutoScalingGroupName`,
  `LifecycleHookName`, `EC2InstanceId`, `LifecycleTransition` (User Guide, event examples).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

GLOBAL_TIMEOUT_CAP_SECONDS = 48 * 3600
TRANSITIONS = {"launch": "autoscaling:EC2_INSTANCE_LAUNCHING", "terminate": "autoscaling:EC2_INSTANCE_TERMINATING"}
DETAIL_TYPES = {"launch": "EC2 Instance-launch Lifecycle Action", "terminate": "EC2 Instance-terminate Lifecycle Action"}


class NoActiveAction(Exception):
    pass


@dataclass
class LifecycleAction:
    group: str
    hook: str
    instance_id: str
    transition: str  # launch | terminate
    heartbeat_timeout: int
    default_result: str
    started_at: float
    retains: bool = False  # the group retains an instance whose terminate action is ABANDONed
    token: str = field(default_factory=lambda: str(uuid.uuid4()))
    heartbeats: list[float] = field(default_factory=list)
    result: str | None = None  # CONTINUE or ABANDON once ended
    ended_at: float | None = None
    ended_by: str = ""  # "completed" or "timed out"

    @property
    def deadline(self) -> float:
        last = self.heartbeats[-1] if self.heartbeats else self.started_at
        global_timeout = min(GLOBAL_TIMEOUT_CAP_SECONDS, 100 * self.heartbeat_timeout)
        return min(last + self.heartbeat_timeout, self.started_at + global_timeout)

    def expire(self, now: float) -> None:
        if self.ended_at is None and now > self.deadline:
            self.result, self.ended_at, self.ended_by = self.default_result, self.deadline, "timed out"

    @property
    def pending(self) -> bool:
        return self.ended_at is None

    @property
    def retained(self) -> bool:
        """Ended, and its instance kept running in Terminating:Retained."""
        return self.transition == "terminate" and self.result == "ABANDON" and self.retains

    def event(self, account: str, region: str) -> dict[str, Any]:
        return {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": DETAIL_TYPES[self.transition],
            "source": "aws.autoscaling",
            "account": account,
            "time": "2026-11-24T12:00:00Z",
            "region": region,
            "resources": [f"arn:aws:autoscaling:{region}:{account}:autoScalingGroup:{uuid.uuid4()}:autoScalingGroupName/{self.group}"],
            "detail": {
                "LifecycleActionToken": self.token,
                "AutoScalingGroupName": self.group,
                "LifecycleHookName": self.hook,
                "EC2InstanceId": self.instance_id,
                "LifecycleTransition": TRANSITIONS[self.transition],
                "Origin": "AutoScalingGroup" if self.transition == "terminate" else "EC2",
                "Destination": "EC2" if self.transition == "terminate" else "AutoScalingGroup",
            },
        }


class LifecycleActions:
    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.actions: list[LifecycleAction] = []
        self._lock = threading.Lock()

    def begin(self, *, group: str, hook: str, instance_id: str, transition: str, heartbeat_timeout: int, default_result: str,
              retains: bool = False) -> LifecycleAction:  # fmt: skip
        action = LifecycleAction(group, hook, instance_id, transition, heartbeat_timeout, default_result, self.clock(), retains)
        with self._lock:
            self.actions.append(action)
        return action

    def _active(self, group: str, hook: str, token: str, instance_id: str) -> LifecycleAction:
        now = self.clock()
        for action in self.actions:
            action.expire(now)
            if (action.group, action.hook) != (group, hook) or not action.pending:
                continue
            if (token and action.token == token) or (not token and action.instance_id == instance_id):
                return action
        said = f"token {token}" if token else f"instance ID {instance_id}"
        raise NoActiveAction(f"No active Lifecycle Action found with {said}")

    def complete(self, *, group: str, hook: str, token: str, instance_id: str, result: str) -> None:
        with self._lock:
            action = self._active(group, hook, token, instance_id)
            action.result, action.ended_at, action.ended_by = result, self.clock(), "completed"

    def heartbeat(self, *, group: str, hook: str, token: str, instance_id: str) -> None:
        with self._lock:
            self._active(group, hook, token, instance_id).heartbeats.append(self.clock())

    def pending(self, group: str) -> list[LifecycleAction]:
        """The group's actions still pending now."""
        self.settle()
        with self._lock:
            return [a for a in self.actions if a.group == group and a.pending]

    def ended(self, group: str) -> list[LifecycleAction]:
        """The group's actions that have ended, completed or timed out."""
        self.settle()
        with self._lock:
            return [a for a in self.actions if a.group == group and not a.pending]

    def retained(self, group: str) -> list[LifecycleAction]:
        """The group's instances kept in Terminating:Retained (none is ever terminated here)."""
        self.settle()
        with self._lock:
            return [a for a in self.actions if a.group == group and a.retained]

    def settle(self) -> None:
        """Let the clock's present decide actions whose timer ran out."""
        with self._lock:
            for action in self.actions:
                action.expire(self.clock())
