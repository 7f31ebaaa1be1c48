"""AutoScalingLifecycle over boto3's Auto Scaling client."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from .interfaces import WAITING_STATES, LifecycleHook, WaitingInstance

# What Auto Scaling answers once the action is completed, abandoned or timed out:
# ValidationError "No active Lifecycle Action found with token ..." (or "with instance ID").
_NO_ACTIVE_ACTION = "No active Lifecycle Action"


def _no_active_action(err: ClientError) -> bool:
    error = err.response.get("Error", {})
    return error.get("Code") == "ValidationError" and _NO_ACTIVE_ACTION in str(
        error.get("Message", "")
    )


class AutoScalingLifecycleHooks:
    """Completes and heartbeats lifecycle actions; create once per Lambda container."""

    def __init__(self, autoscaling_client: Any) -> None:
        self._client = autoscaling_client

    def _address(self, hook: LifecycleHook) -> dict[str, str]:
        # The token names exactly this action; the instance id is the fallback for
        # callers that lost it (an operator completing by hand).
        target = {"LifecycleHookName": hook.hook_name, "AutoScalingGroupName": hook.group_name}
        if hook.token:
            target["LifecycleActionToken"] = hook.token
        else:
            target["InstanceId"] = hook.instance_id
        return target

    def complete_lifecycle_action(self, hook: LifecycleHook, result: str) -> bool:
        try:
            self._client.complete_lifecycle_action(
                **self._address(hook), LifecycleActionResult=result
            )
        except ClientError as err:
            if _no_active_action(err):
                return False
            raise
        return True

    def record_lifecycle_action_heartbeat(self, hook: LifecycleHook) -> bool:
        try:
            self._client.record_lifecycle_action_heartbeat(**self._address(hook))
        except ClientError as err:
            if _no_active_action(err):
                return False
            raise
        return True

    def waiting_instances(self, group_name: str) -> list[WaitingInstance]:
        """The group's instances a lifecycle hook holds now (their LifecycleState)."""
        return [WaitingInstance(instance_id, WAITING_STATES[state]) for instance_id, state in self._states(group_name)
                if state in WAITING_STATES]  # fmt: skip

    def instance_state(self, group_name: str, instance_id: str) -> str:
        """The instance's LifecycleState in the group; '' when the group does not list it (gone)."""
        return dict(self._states(group_name)).get(instance_id, "")

    def _states(self, group_name: str) -> list[tuple[str, str]]:
        pages = self._client.get_paginator("describe_auto_scaling_groups").paginate(AutoScalingGroupNames=[group_name])
        return [(instance["InstanceId"], instance.get("LifecycleState", "")) for page in pages
                for group in page["AutoScalingGroups"] for instance in group.get("Instances", [])]  # fmt: skip
