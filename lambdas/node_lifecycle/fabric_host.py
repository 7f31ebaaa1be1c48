"""FabricHost over SSM Run Command: the stack's stop-host document (stop_fabric_host.ps1 embedded,
nothing else to run) to stop a node's host, and its add-node document (AddNode.ps1) to join one.
Neither can run arbitrary PowerShell, as AWS-RunPowerShellScript could (issue 33)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from .interfaces import CommandStatus

STOP_SCRIPT = Path(__file__).with_name("stop_fabric_host.ps1")  # embedded by stacks/constructs/node_scripts.py
# The version the stack deployed last, as the operator tools send: an update's NewVersion is not
# always made the default (cloudformation-coverage-roadmap#2539), and the default would run the
# old script without a word.
LATEST = "$LATEST"


class SsmFabricHost:
    """Sends the stop script to an instance and reads how it went; create once per container."""

    def __init__(
        self,
        ssm_client: Any,
        *,
        add_node_document: str = "",
        stop_host_document: str = "",
        execution_timeout_seconds: int = 600,
        delivery_timeout_seconds: int = 600,
    ) -> None:
        self._client = ssm_client
        self._add_node_document = add_node_document
        self._stop_host_document = stop_host_document
        self._execution_timeout = execution_timeout_seconds
        self._delivery_timeout = delivery_timeout_seconds

    def check_access(self, instance_id: str) -> None:
        """A read-only call that fails now, before a drain changes anything, when the
        credentials or permissions for Run Command are missing."""
        self._client.list_commands(InstanceId=instance_id, MaxResults=1)

    def send_stop_command(self, instance_id: str) -> str:
        if not self._stop_host_document:
            raise ValueError("no stop-host document was configured")
        answer = self._client.send_command(
            InstanceIds=[instance_id],
            DocumentName=self._stop_host_document,
            DocumentVersion=LATEST,
            Comment="Service Fabric scale-in: stop FabricHostSvc",
            TimeoutSeconds=self._delivery_timeout,
            Parameters={"executionTimeout": [str(self._execution_timeout)]},
        )
        return str(answer["Command"]["CommandId"])

    def send_add_node_command(self, instance_id: str, parameters: Mapping[str, str]) -> str | None:
        if not self._add_node_document:
            raise ValueError("no add-node document was configured")
        try:
            answer = self._client.send_command(
                InstanceIds=[instance_id],
                DocumentName=self._add_node_document,
                DocumentVersion=LATEST,
                Comment="Service Fabric scale-out: AddNode.ps1",
                TimeoutSeconds=self._delivery_timeout,
                Parameters={name: [value] for name, value in parameters.items()},
            )
        except ClientError as err:
            # A new instance's SSM agent registers a minute or two after boot.
            if err.response.get("Error", {}).get("Code") == "InvalidInstanceId":
                return None
            raise
        return str(answer["Command"]["CommandId"])

    def command_status(self, command_id: str, instance_id: str) -> CommandStatus:
        try:
            answer = self._client.get_command_invocation(
                CommandId=command_id, InstanceId=instance_id
            )
        except ClientError as err:
            # Run Command is eventually consistent: right after send_command the
            # invocation may not be visible yet.
            if err.response.get("Error", {}).get("Code") == "InvocationDoesNotExist":
                return CommandStatus(command_id, "Pending", "invocation not visible yet")
            raise
        detail = (answer.get("StandardErrorContent") or answer.get("StatusDetails") or "").strip()
        return CommandStatus(command_id, str(answer.get("Status", "")), detail[:500])
