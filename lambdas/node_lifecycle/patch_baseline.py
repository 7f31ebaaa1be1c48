"""Windows updates on a node's machine through Systems Manager Patch Manager: the AWS-owned
Run Command document AWS-RunPatchBaseline, and the patch state it reports.

What the document takes and does (AWS Systems Manager User Guide, "SSM Command document for
patching: AWS-RunPatchBaseline", and "InstancePatchState" in the SSM API Reference):
- `Operation`: `Scan` assesses the node against its patch baseline and reports compliance,
  installing nothing and never rebooting; `Install` installs what the baseline approves and finds
  missing.
- `RebootOption`: `RebootIfNeeded` reboots the node when it installed anything, or finds patches
  InstalledPendingReboot; `NoReboot` leaves them InstalledPendingReboot. Reboots are not attempted
  for Scan.
- The counts of the last operation (MissingCount, FailedCount, InstalledPendingRebootCount, ...)
  are read with DescribeInstancePatchStates; the command's own output is a report for people.
- A reboot is asked of SSM Agent by the document's script exiting 3010 on Windows
  (amazon-ssm-agent: agent/appconfig/constants_windows.go RebootExitCode,
  agent/plugins/pluginutil/pluginutil_windows.go GetStatus -> SuccessAndReboot); the agent reboots
  the machine (agent/framework/processor/processor.go, RequestPendingReboot) and runs the step
  again after it (agent/framework/runpluginutil/runpluginutil.go resets SuccessAndReboot to
  InProgress), so the command stays InProgress across the reboot and ends Success, Failed or
  TimedOut once the machine is back.
- A command keeps running on the instance until its invocation reaches a terminal status:
  Success, Failed, TimedOut or Cancelled (CommandInvocationStatus in botocore's ssm model;
  StatusDetails then says DeliveryTimedOut, ExecutionTimedOut, Undeliverable or Terminated where
  it applies). Cancelling is not one: the agent may still be installing, and may still reboot.
  ListCommandInvocations (SSM API Reference: InstanceId, Filters with key DocumentName) finds the
  document's invocations on one instance, so a run can wait for one an earlier run left running.
- `SnapshotId` (a GUID; the document passes it to GetDeployablePatchSnapshotForInstance, whose
  SnapshotId is 36 characters of that pattern in botocore's ssm model): the patch baseline snapshot
  the operation uses. Outside a maintenance window AWS recommends one per patching run, the same on
  every node, so every node installs the same approved set though the baseline's approvals move on
  (User Guide, AWS-RunPatchBaseline, "Parameter name: SnapshotId"). InstancePatchState reports the
  snapshot its counts were taken with (SSM API Reference, InstancePatchState: SnapshotId).
- Each command's Comment names the run's snapshot and the operation, so a run finds its own
  Install among the invocations ListCommandInvocations lists (they carry the Comment, not the
  parameters).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from botocore.exceptions import ClientError

PATCH_DOCUMENT = "AWS-RunPatchBaseline"
SCAN, INSTALL = "Scan", "Install"
REBOOT_IF_NEEDED, NO_REBOOT = "RebootIfNeeded", "NoReboot"
# CommandInvocationStatus values after which nothing more runs on the instance.
TERMINAL = ("Success", "Failed", "Cancelled", "TimedOut")
# Still running, or about to (Delayed: the agent retries later; Cancelling: not stopped yet).
RUNNING = ("Pending", "InProgress", "Delayed", "Cancelling")
# SendCommand's Comment is at most 100 characters (botocore's ssm model, Comment: max 100).
COMMENT_LIMIT = 100


def comment_prefix(operation: str, snapshot_id: str) -> str:
    """How a command's Comment begins: the run (its snapshot) and the operation, within the
    first 74 characters, so a long node name cut at COMMENT_LIMIT never cuts them."""
    return f"Service Fabric patching, run {snapshot_id}: {operation}"


# How long Run Command keeps trying to deliver the command to an agent that does not answer.
DELIVERY_TIMEOUT_SECONDS = 600


@dataclass(frozen=True)
class PatchCommand:
    command_id: str
    status: str  # Pending, InProgress, Delayed, Success, Failed, Cancelled, TimedOut, ...
    response_code: int  # the script's exit code; -1 while it runs
    detail: str = ""  # StatusDetails, and the end of stderr when it failed

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PatchState:
    """InstancePatchState: the counts of the node's last patch operation."""

    operation: str  # Scan | Install ('' when the node was never scanned)
    operation_end_time: float  # epoch seconds
    missing: int
    failed: int
    installed_pending_reboot: int
    snapshot_id: str = ""  # the patch baseline snapshot the counts were taken with

    @property
    def to_install(self) -> int:
        """What an Install would act on: missing, failed earlier, or waiting for a reboot."""
        return self.missing + self.failed + self.installed_pending_reboot

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class SsmPatchBaseline:
    """Sends AWS-RunPatchBaseline to one instance and reads how it went; create once per container."""

    def __init__(self, ssm_client: Any, *, document: str = PATCH_DOCUMENT) -> None:
        self._client = ssm_client
        self._document = document

    def send(self, instance_id: str, operation: str, *, node_name: str, snapshot_id: str) -> str:
        parameters = {"Operation": [operation], "RebootOption": [REBOOT_IF_NEEDED if operation == INSTALL else NO_REBOOT],
                      "SnapshotId": [snapshot_id]}  # fmt: skip
        answer = self._client.send_command(
            InstanceIds=[instance_id],
            DocumentName=self._document,
            Comment=f"{comment_prefix(operation, snapshot_id)} on {node_name}"[:COMMENT_LIMIT],
            TimeoutSeconds=DELIVERY_TIMEOUT_SECONDS,
            Parameters=parameters,
        )
        return str(answer["Command"]["CommandId"])

    def command(self, command_id: str, instance_id: str) -> PatchCommand:
        try:
            answer = self._client.get_command_invocation(CommandId=command_id, InstanceId=instance_id)
        except ClientError as err:
            # Run Command is eventually consistent: the invocation may not be visible yet.
            if err.response.get("Error", {}).get("Code") == "InvocationDoesNotExist":
                return PatchCommand(command_id, "Pending", -1, "invocation not visible yet")
            raise
        status = str(answer.get("Status", ""))
        detail = str(answer.get("StatusDetails") or "")
        error = (answer.get("StandardErrorContent") or "").strip()
        if error and status != "Success":
            detail = f"{detail}: {error.splitlines()[-1]}"
        return PatchCommand(command_id, status, int(answer.get("ResponseCode", -1)), detail[:500])

    def running_of(self, instance_id: str, operation: str, snapshot_id: str) -> str:
        """The command id of this run's `operation` still running on the instance ('' if none): a
        resent step finds the command its first attempt sent."""
        found = [c for c in self.running(instance_id) if c.detail.startswith(comment_prefix(operation, snapshot_id))]
        return found[0].command_id if found else ""

    def running(self, instance_id: str) -> list[PatchCommand]:
        """The document's invocations on the instance that have not reached a terminal status
        (any operation: an Install may still reboot the machine, and a second Windows Update
        session must never start beside it)."""
        found: list[PatchCommand] = []
        request: dict[str, Any] = {"InstanceId": instance_id, "MaxResults": 50,
                                   "Filters": [{"key": "DocumentName", "value": self._document}]}  # fmt: skip
        while True:
            answer = self._client.list_command_invocations(**request)
            for invocation in answer.get("CommandInvocations") or []:
                status = str(invocation.get("Status", ""))
                if status in RUNNING:
                    found.append(PatchCommand(str(invocation.get("CommandId", "")), status, -1,
                                              str(invocation.get("Comment") or "")))  # fmt: skip
            if not answer.get("NextToken"):
                return found
            request["NextToken"] = answer["NextToken"]

    def state(self, instance_id: str) -> PatchState:
        states = self._client.describe_instance_patch_states(InstanceIds=[instance_id]).get("InstancePatchStates") or []
        if not states:
            return PatchState("", 0.0, 0, 0, 0)
        found = states[0]
        end = found.get("OperationEndTime")
        return PatchState(
            operation=str(found.get("Operation", "")),
            operation_end_time=end.timestamp() if hasattr(end, "timestamp") else float(end or 0),
            missing=int(found.get("MissingCount") or 0),
            failed=int(found.get("FailedCount") or 0),
            installed_pending_reboot=int(found.get("InstalledPendingRebootCount") or 0),
            snapshot_id=str(found.get("SnapshotId") or ""),
        )
