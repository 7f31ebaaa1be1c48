"""What the state machines see of a failed step: TransientError (retried) or PermanentError
(caught at once), named exactly as the definitions' Retry matches them."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError
from node_lifecycle import WaitTimedOut
from node_lifecycle.errors import NodeJoinFailed
from node_lifecycle.settings import SettingsError
from node_lifecycle.step_errors import PermanentError, TransientError, as_step_error
from sf_rest.errors import error_from_response
from sf_rest import FabricError, TlsError


def aws_error(code: str, status: int, operation: str = "PutItem") -> ClientError:
    """As botocore raises it from a parsed error response."""
    return ClientError({"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, operation)


def gateway(status: int, body: str) -> FabricError:
    """As the REST client raises it from the gateway's answer."""
    return error_from_response(status, body, method="POST", path="/$/StartClusterConfigurationUpgrade")


def fabric(code: str, message: str = "") -> str:
    return f'{{"Error": {{"Code": "{code}", "Message": "{message}"}}}}'


TRANSIENT = {
    "gateway 503 without a Fabric body": gateway(503, "Service Unavailable"),
    "gateway not ready": gateway(503, fabric("FABRIC_E_NOT_READY")),
    "gateway timeout": gateway(504, fabric("FABRIC_E_TIMEOUT")),
    "another upgrade running": gateway(500, fabric("FABRIC_E_CONFIG_UPGRADE_FAILED", "Upgrade is already in progress and cannot be interrupted")),
    "no gateway answered": FabricError("CONNECT_FAILED", "no gateway answered"),
    # A busy or closing service, as the gateway answers it (HttpUtil.cpp, ErrorCodeToHttpStatus).
    "service too busy": gateway(503, fabric("FABRIC_E_SERVICE_TOO_BUSY")),
    "object closed": gateway(503, fabric("FABRIC_E_OBJECT_CLOSED")),
    "connection closed by the remote end": gateway(503, fabric("FABRIC_E_CONNECTION_CLOSED_BY_REMOTE_END")),
    "replication queue full": gateway(503, fabric("FABRIC_E_REPLICATION_QUEUE_FULL")),
    "gateway not reachable": gateway(502, fabric("FABRIC_E_GATEWAY_NOT_REACHABLE")),
    "DynamoDB throttled": aws_error("ProvisionedThroughputExceededException", 400),
    "SSM throttled": aws_error("ThrottlingException", 400, "SendCommand"),
    "Auto Scaling throttled": aws_error("Throttling", 400, "RecordLifecycleActionHeartbeat"),
    "AWS 503": aws_error("ServiceUnavailable", 503),
    "AWS 500": aws_error("InternalFailure", 500),
    "endpoint unreachable": EndpointConnectionError(endpoint_url="https://dynamodb.eu-west-1.amazonaws.com"),
    "AWS read timeout": ReadTimeoutError(endpoint_url="https://ssm.eu-west-1.amazonaws.com"),
}
PERMANENT = {
    "the UOS refuses the removal": gateway(500, fabric("FABRIC_E_CONFIG_UPGRADE_FAILED", "ValidationException: ports unreachable")),
    "a 400 with a code we do not know": gateway(400, fabric("FABRIC_E_INVALID_CONFIGURATION")),
    "node not found": gateway(400, fabric("FABRIC_E_NODE_NOT_FOUND")),
    "invalid argument": gateway(400, fabric("E_INVALIDARG")),
    "TLS refused": TlsError("TLS_FAILED", "certificate verify failed"),
    "AWS access denied": aws_error("AccessDeniedException", 400),
    "AWS validation": aws_error("ValidationError", 400, "CompleteLifecycleAction"),
    "AddNode failed": NodeJoinFailed("AddNode.ps1 ended Failed"),
    "a deadline passed": WaitTimedOut("gave up after 3600 s"),
    "bad settings": SettingsError("environment variable LOCK_TABLE_NAME is not set"),
    "a bug": KeyError("node"),
}


@pytest.mark.parametrize("error", TRANSIENT.values(), ids=TRANSIENT.keys())
def test_what_may_heal_by_waiting_is_transient(error):
    raised = as_step_error(error)
    assert type(raised) is TransientError and str(raised).startswith(f"{type(error).__name__}: ")


@pytest.mark.parametrize("error", PERMANENT.values(), ids=PERMANENT.keys())
def test_what_another_try_would_repeat_is_permanent(error):
    assert type(as_step_error(error)) is PermanentError


def test_the_handlers_raise_only_the_two_kinds_with_the_cause_in_the_message(monkeypatch):
    import node_lifecycle.handlers as handlers

    monkeypatch.setattr(handlers, "_runtime", None)
    monkeypatch.delenv("LOCK_TABLE_NAME", raising=False)
    with pytest.raises(PermanentError, match="^SettingsError: environment variable .* is not set$"):
        handlers.scale_in({"step": "begin", "state": {}}, None)


def test_a_lifecycle_action_auto_scaling_no_longer_has_is_its_own_error_name():
    """The scale-out state machine routes it to the end that touches no node; under any other name
    a duplicate execution's failure path would clean up the node another execution joined."""
    from node_lifecycle.errors import ActionNoLongerPending
    from node_lifecycle.step_errors import ActionGone

    error = as_step_error(ActionNoLongerPending("Auto Scaling has no pending launch action for instance i-1"))

    assert type(error) is ActionGone and type(error).__name__ == "ActionGone"
    assert str(error).startswith("ActionNoLongerPending: ")
