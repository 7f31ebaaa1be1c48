"""AWS-RunPatchBaseline as Run Command runs it on a node's Windows machine, answered on botocore's
wire (aws_wire.py): SendCommand, GetCommandInvocation and DescribeInstancePatchStates for the
commands of that document. moto records commands but runs nothing, and has no patch states.

What the document does, and the sources:
- Parameters (AWS Systems Manager User Guide, "SSM Command document for patching:
  AWS-RunPatchBaseline", "Parameter name" sections): Operation (Scan | Install, required),
  SnapshotId, InstallOverrideList, BaselineOverride, RebootOption (RebootIfNeeded | NoReboot).
  Anything else is refused as SendCommand refuses parameters a document does not define
  (SSM API Reference, SendCommand, Errors: InvalidParameters).
- Scan installs nothing and never reboots ("Reboots aren't attempted for Patch Manager Scan
  operations": InstancePatchState, RebootOption); it reports the node's counts, which
  DescribeInstancePatchStates returns (Operation Scan, MissingCount, ...).
- Install with RebootIfNeeded installs what is missing and reboots when it installed anything
  (same page). The reboot is asked of SSM Agent by exit code 3010 (amazon-ssm-agent:
  agent/appconfig/constants_windows.go RebootExitCode; agent/plugins/pluginutil/
  pluginutil_windows.go GetStatus maps it to SuccessAndReboot), the agent reboots the machine
  (agent/framework/processor/processor.go, RequestPendingReboot) and runs the step again once it
  is back (agent/framework/runpluginutil/runpluginutil.go resets SuccessAndReboot to
  InProgress). So the command is InProgress through the reboot, and the rerun, finding nothing
  missing, exits 0: Success, ResponseCode 0.
- A failed install ends Failed with a non-zero ResponseCode and its error in
  StandardErrorContent, and the failed updates counted in FailedCount; a command that outlives
  its execution timeout ends TimedOut (SSM API Reference, GetCommandInvocation, Status).
- ListCommandInvocations (SSM API Reference, ListCommandInvocations: InstanceId, Filters with
  key DocumentName; CommandInvocation: CommandId, InstanceId, DocumentName, Comment, Status,
  StatusDetails, RequestedDateTime) lists the invocations on the instance, newest first, whatever
  their status; a command goes on running on the instance until it reaches a terminal status
  (CommandInvocationStatus, botocore's ssm model: Success, Failed, TimedOut, Cancelled), whether
  anyone looks at it or not.
- Not documented, so chosen here (a risk): how many looks each phase takes (one look per phase),
  the output's wording, and that FabricHostSvc starts again with Windows after the reboot (its
  service start type is automatic on a node AddNode.ps1 or the cluster's creation installed).

Time: each GetCommandInvocation of a running command moves it one phase on, and each
ListCommandInvocations every running command of that instance (time passes for a command no run
looks at any more), the way the
emulator's ticks move the cluster on; the state machine looks once per poll interval.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from botocore.awsrequest import AWSResponse

from tests.sf_emulator import EmulatedCluster

DOCUMENT = "AWS-RunPatchBaseline"
PARAMETERS = {"Operation": ("Scan", "Install"), "RebootOption": ("RebootIfNeeded", "NoReboot"),
              "SnapshotId": None, "InstallOverrideList": None, "BaselineOverride": None}  # fmt: skip
# SnapshotId: the document hands it to GetDeployablePatchSnapshotForInstance, whose SnapshotId is a
# GUID (botocore's ssm model: length 36 and this pattern); a run with another fails there (the
# stand-in refuses it at SendCommand, where a test sees it).
SNAPSHOT_ID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
REBOOT_EXIT_CODE = 3010
BASELINE_ID = "arn:aws:ssm:eu-west-1:123456789012:patchbaseline/pb-0123456789abcdef0"  # AWS-DefaultPatchBaseline's shape


def _json(url: str, status: int, document: dict[str, Any]) -> AWSResponse:
    from .aws_wire import _answer

    return _answer(url, status, json.dumps(document), "application/x-amz-json-1.1")


@dataclass
class Machine:
    """One node's Windows machine as Patch Manager sees it."""

    node_name: str
    missing: int = 0  # updates the baseline approves that are not installed
    install_fails: bool = False  # the install ends Failed (Windows Update refused an update)
    install_times_out: bool = False  # the command outlives its execution timeout
    fabric_returns: bool = True  # FabricHostSvc starts again after the reboot
    # A reboot the FM does not see: the machine is back before the node's lease expired, and the
    # FM hears from the new instance this many gateway requests after the reboot, showing the
    # last instance (Disabled) until then; SSM Agent may report the command's end before that.
    # How long a Windows reboot takes against the lease (30 s) is not documented (a risk).
    reboot_unseen_for: int = 0
    reboots: int = 0
    install_hold: int = 0  # looks an Install stays InProgress before it installs (a long Windows Update)
    patch_state: dict[str, Any] | None = None
    # DescribeInstancePatchStates answers the state before the newest for this many reads after
    # an operation reports (the agent's upload is read eventually; how long is not documented: a
    # risk).
    report_lag: int = 0
    reported_before: dict[str, Any] | None = None
    lagging_reads: int = 0


@dataclass
class Command:
    command_id: str
    instance_id: str
    operation: str
    reboot_option: str
    phase: int = 0
    status: str = "Pending"
    response_code: int = -1
    stdout: str = ""
    stderr: str = ""
    comment: str = ""
    requested: float = 0.0
    snapshot_id: str = ""


@dataclass
class PatchBaselineStandIn:
    cluster: EmulatedCluster
    clock: Callable[[], float]
    machines: dict[str, Machine] = field(default_factory=dict)  # instance id -> machine
    commands: dict[str, Command] = field(default_factory=dict)
    sent: list[tuple[str, str, str]] = field(default_factory=list)  # (node, operation, reboot option)
    # (node, operation sent, command already running there): two Windows Update sessions at once.
    overlaps: list[tuple[str, str, str]] = field(default_factory=list)
    # Called after each change a command makes to a machine (tests check invariants there).
    on_change: Callable[[], None] = lambda: None

    def send_command(self, url: str, body: dict[str, Any]) -> AWSResponse:
        parameters = {name: values[0] for name, values in (body.get("Parameters") or {}).items()}
        unknown = sorted(set(parameters) - set(PARAMETERS))
        invalid = [f"{name}={value}" for name, value in parameters.items()
                   if PARAMETERS.get(name) and value not in PARAMETERS[name]]  # fmt: skip
        if "SnapshotId" in parameters and not SNAPSHOT_ID.match(parameters["SnapshotId"]):
            invalid.append(f"SnapshotId={parameters['SnapshotId']}")
        if unknown or invalid or "Operation" not in parameters:
            from .aws_wire import _json_error

            return _json_error(url, 400, "InvalidParameters", f"{DOCUMENT}: unknown {unknown}, invalid {invalid}")
        (instance_id,) = body["InstanceIds"]
        command = Command(str(uuid.uuid4()), instance_id, parameters["Operation"], parameters.get("RebootOption", "RebootIfNeeded"),
                          comment=str(body.get("Comment", "")), requested=self.clock(),
                          snapshot_id=parameters.get("SnapshotId", ""))  # fmt: skip
        for other in self.commands.values():
            if other.instance_id == instance_id and other.status in ("Pending", "InProgress"):
                self.overlaps.append((self.machines[instance_id].node_name, command.operation, other.operation))
        self.commands[command.command_id] = command
        self.sent.append((self.machines[instance_id].node_name, command.operation, command.reboot_option))
        return _json(url, 200, {"Command": {
            "CommandId": command.command_id, "DocumentName": DOCUMENT, "DocumentVersion": "$DEFAULT",
            "Comment": body.get("Comment", ""), "Parameters": body.get("Parameters") or {}, "InstanceIds": [instance_id],
            "Status": "Pending", "TargetCount": 1, "CompletedCount": 0, "ErrorCount": 0,
        }})  # fmt: skip

    def owns(self, command_id: str) -> bool:
        return command_id in self.commands

    def command_invocation(self, url: str, body: dict[str, Any]) -> AWSResponse:
        command = self.commands[body["CommandId"]]
        self._advance(command)
        return _json(url, 200, {
            "CommandId": command.command_id, "InstanceId": command.instance_id, "DocumentName": DOCUMENT,
            "Status": command.status, "StatusDetails": command.status, "ResponseCode": command.response_code,
            "StandardOutputContent": command.stdout, "StandardErrorContent": command.stderr,
        })  # fmt: skip

    def command_invocations(self, url: str, body: dict[str, Any]) -> AWSResponse:
        filters = {f["key"]: f["value"] for f in body.get("Filters") or []}
        found = [c for c in self.commands.values() if c.instance_id == body.get("InstanceId", c.instance_id)
                 and filters.get("DocumentName", DOCUMENT) == DOCUMENT]  # fmt: skip
        for command in found:
            self._advance(command)
        return _json(url, 200, {"CommandInvocations": [{
            "CommandId": c.command_id, "InstanceId": c.instance_id, "DocumentName": DOCUMENT, "DocumentVersion": "$DEFAULT",
            "Comment": c.comment, "Status": c.status, "StatusDetails": c.status, "RequestedDateTime": c.requested,
        } for c in sorted(found, key=lambda c: -c.requested)]})  # fmt: skip

    def patch_states(self, url: str, body: dict[str, Any]) -> AWSResponse:
        states = []
        for machine in (self.machines[i] for i in body["InstanceIds"]):
            lagging = machine.lagging_reads > 0
            machine.lagging_reads -= 1 if lagging else 0
            state = machine.reported_before if lagging else machine.patch_state
            if state:
                states.append(state)
        return _json(url, 200, {"InstancePatchStates": states})

    # -- what the document does on the machine, one phase per look ---------------------------------

    def _advance(self, command: Command) -> None:
        if command.status not in ("Pending", "InProgress"):
            return
        machine = self.machines[command.instance_id]
        command.phase += 1
        if command.operation == "Scan":
            self._report(command, machine, "Scan")
            self._end(command, 0, f"Scan: {machine.missing} missing update(s)")
        elif command.phase == 1:
            command.status = "InProgress"  # downloading and installing
        elif machine.install_hold > 0:
            machine.install_hold, command.phase = machine.install_hold - 1, command.phase - 1
        elif machine.install_times_out:
            command.status, command.response_code = "TimedOut", -1
        elif machine.install_fails:
            self._report(command, machine, "Install", failed=machine.missing)
            command.stderr = "Install: 1 or more updates failed to install (Windows Update result code 4, Failed)"
            self._end(command, 1, "Install: failed")
        elif command.phase == 2 and machine.missing and command.reboot_option == "RebootIfNeeded":
            # Installed: the script exits 3010, SSM Agent reboots the machine; the command stays InProgress.
            machine.missing, machine.reboots = 0, machine.reboots + 1
            command.response_code = REBOOT_EXIT_CODE
            if machine.reboot_unseen_for:
                self.cluster.restart_host(machine.node_name, after_ticks=machine.reboot_unseen_for)
            else:
                self.cluster.stop_host(machine.node_name)
            self.on_change()
        elif command.phase == 2 and machine.missing:  # NoReboot: pending a reboot
            self._report(command, machine, "Install", pending=machine.missing)
            machine.missing = 0
            self._end(command, 0, "Install: installed, pending reboot")
        else:
            # Back from the reboot (if there was one): the agent runs the step again, nothing is
            # missing, exit 0.
            if machine.reboots and machine.fabric_returns and not self.cluster.node(machine.node_name).host_running:
                self.cluster.start_host(machine.node_name)
                self.on_change()
            self._report(command, machine, "Install")
            self._end(command, 0, "Install: nothing missing")

    def _report(self, command: Command, machine: Machine, operation: str, *, failed: int = 0, pending: int = 0) -> None:
        now = self.clock()
        machine.reported_before, machine.lagging_reads = machine.patch_state, machine.report_lag
        machine.patch_state = {
            "InstanceId": command.instance_id, "PatchGroup": "", "BaselineId": BASELINE_ID,
            "Operation": operation, "OperationStartTime": now - 60, "OperationEndTime": now,
            "MissingCount": machine.missing if operation == "Scan" else 0, "FailedCount": failed,
            "InstalledPendingRebootCount": pending, "InstalledCount": 20, "NotApplicableCount": 100,
            **({"SnapshotId": command.snapshot_id} if command.snapshot_id else {}),
        }  # fmt: skip

    @staticmethod
    def _end(command: Command, code: int, output: str) -> None:
        command.status = "Success" if code == 0 else "Failed"
        command.response_code, command.stdout = code, output
