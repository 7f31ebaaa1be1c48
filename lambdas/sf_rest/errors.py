"""Errors raised by the Service Fabric REST client.

Every failure is a `FabricError` carrying the Fabric error code, so callers branch on
`err.code` (or catch a subclass) instead of parsing messages. Failures that never got a
Fabric answer (connection refused, timeouts, TLS) use codes outside the FABRIC_E_ space.
"""

from __future__ import annotations

import json
from typing import Any

NODE_NOT_FOUND = "FABRIC_E_NODE_NOT_FOUND"
NODE_IS_UP = "FABRIC_E_NODE_IS_UP"
NOT_READY = "FABRIC_E_NOT_READY"
TIMEOUT = "FABRIC_E_TIMEOUT"
COMMUNICATION_ERROR = "FABRIC_E_COMMUNICATION_ERROR"
INVALID_ARGUMENT = "E_INVALIDARG"
UPGRADE_IN_PROGRESS = "FABRIC_E_FABRIC_UPGRADE_IN_PROGRESS"
# Every refusal of the standalone Upgrade Orchestration Service, whatever the reason: the
# reason is in the message ("<ExceptionType>: <text>", ConvertToComException in
# FabricUOS/exe/UpgradeOrchestrationMessageProcessor.cs).
CONFIG_UPGRADE_FAILED = "FABRIC_E_CONFIG_UPGRADE_FAILED"
# How the UOS words a refusal because another configuration upgrade runs
# (ProcessStartClusterConfigurationUpgradeAsync).
UPGRADE_RUNNING_TEXT = "is already in progress and cannot be interrupted"
# How the UOS refuses any upgrade whose nodes differ from the Failover Manager's while a node
# joined by AddNode.ps1 is not yet registered (StandaloneSettingsValidator.
# VerifyFMNodesMatchTargetNodes, StringResources Error_SFNodesFromFMDontMatch).
UNREGISTERED_NODES_TEXT = "Nodes present in the cluster must exactly match the nodes in JSON config"

# The gateway refused the request before acting on it: safe to resend any request.
REJECTED_BEFORE_ACTING = frozenset(
    {
        NOT_READY,
        "FABRIC_E_NOT_PRIMARY",
        "FABRIC_E_NO_WRITE_QUORUM",
        "FABRIC_E_RECONFIGURATION_PENDING",
        "FABRIC_E_SERVICE_OFFLINE",
    }
)
# Busy or passing answers the gateway gives as 503, or 502 for GATEWAY_NOT_REACHABLE
# (Management/HttpTransport/HttpUtil.cpp, ErrorCodeToHttpStatus), which Microsoft's own client
# retries (System.Fabric.Common FabricClientRetryErrors: GatewayNotReachable and ServiceTooBusy
# always, ObjectClosed for every operation). No source says whether the request was carried out
# before them, so they are outcomes unknown: a read or a repeatable request is resent, a start of
# a configuration upgrade is not (its caller reads the upgrade status instead).
BUSY_OR_CLOSING = frozenset(
    {
        "FABRIC_E_SERVICE_TOO_BUSY",
        "FABRIC_E_OBJECT_CLOSED",
        "FABRIC_E_CONNECTION_CLOSED_BY_REMOTE_END",
        "FABRIC_E_REPLICATION_QUEUE_FULL",
        "FABRIC_E_GATEWAY_NOT_REACHABLE",
    }
)
# The outcome is unknown (the operation may have been carried out): resend only
# requests whose repetition is harmless.
OUTCOME_UNKNOWN = frozenset(
    {TIMEOUT, COMMUNICATION_ERROR, "FABRIC_E_OPERATION_NOT_COMPLETE", "E_ABORT"}
) | BUSY_OR_CLOSING
TRANSIENT_CODES = REJECTED_BEFORE_ACTING | OUTCOME_UNKNOWN

# Codes for failures that got no Fabric answer at all.
CONNECT_FAILED = "CONNECT_FAILED"
CONNECTION_LOST = "CONNECTION_LOST"
READ_TIMEOUT = "READ_TIMEOUT"
TLS_FAILED = "TLS_FAILED"


class FabricError(Exception):
    """A Service Fabric REST call failed; `code` names why."""

    def __init__(
        self,
        code: str,
        message: str = "",
        *,
        status: int | None = None,
        method: str = "",
        path: str = "",
        attempts: int = 1,
    ) -> None:
        self.code = code
        self.message = message
        self.status = status
        self.method = method
        self.path = path
        self.attempts = attempts
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.method} {self.path}".strip()
        status = f" HTTP {self.status}" if self.status is not None else ""
        tries = f" after {self.attempts} attempts" if self.attempts > 1 else ""
        text = f"{self.code}{status}"
        if where:
            text += f" on {where}"
        if self.message:
            text += f": {self.message}"
        return text + tries

    @property
    def is_transient(self) -> bool:
        return self.code in TRANSIENT_CODES


class NodeNotFoundError(FabricError):
    """FABRIC_E_NODE_NOT_FOUND: the cluster does not know the node."""


class NodeIsUpError(FabricError):
    """FABRIC_E_NODE_IS_UP: RemoveNodeState refused because the node is not Down."""


class InvalidArgumentError(FabricError):
    """E_INVALIDARG: the gateway rejected a parameter (e.g. an unsupported intent)."""


class ConfigurationUpgradeRefused(FabricError):
    """FABRIC_E_CONFIG_UPGRADE_FAILED: the UOS refused the configuration upgrade; the message
    says why (a validation rule, or another upgrade running)."""


class UpgradeInProgressError(ConfigurationUpgradeRefused):
    """An upgrade is already running; membership changes must wait for it. The UOS says so
    with FABRIC_E_CONFIG_UPGRADE_FAILED and "... is already in progress and cannot be
    interrupted"; FABRIC_E_FABRIC_UPGRADE_IN_PROGRESS is the cluster manager's own code."""


class GatewayUnavailableError(FabricError):
    """No usable answer from the HTTP gateway: connection, timeout or 5xx exhausted."""


class TlsError(FabricError):
    """The TLS handshake failed: wrong CA, wrong thumbprint, or client cert refused."""


_BY_CODE: dict[str, type[FabricError]] = {
    NODE_NOT_FOUND: NodeNotFoundError,
    NODE_IS_UP: NodeIsUpError,
    INVALID_ARGUMENT: InvalidArgumentError,
    UPGRADE_IN_PROGRESS: UpgradeInProgressError,
    CONFIG_UPGRADE_FAILED: ConfigurationUpgradeRefused,
}


def error_class_for(code: str) -> type[FabricError]:
    return _BY_CODE.get(code, FabricError)


def parse_error_body(text: str) -> tuple[str | None, str]:
    """Return (code, message) from a FabricError body, or (None, text) if it is not one."""
    try:
        document: Any = json.loads(text)
    except ValueError:
        return None, text.strip()[:500]
    error = document.get("Error") if isinstance(document, dict) else None
    if isinstance(error, dict) and isinstance(error.get("Code"), str):
        return error["Code"], str(error.get("Message") or "")
    return None, text.strip()[:500]


def error_from_response(status: int, text: str, *, method: str, path: str) -> FabricError:
    code, message = parse_error_body(text)
    if code is None:
        cls: type[FabricError] = GatewayUnavailableError if status >= 500 else FabricError
        return cls(f"HTTP_{status}", message, status=status, method=method, path=path)
    cls = error_class_for(code)
    if code == CONFIG_UPGRADE_FAILED and UPGRADE_RUNNING_TEXT in message:
        cls = UpgradeInProgressError
    return cls(code, message, status=status, method=method, path=path)
