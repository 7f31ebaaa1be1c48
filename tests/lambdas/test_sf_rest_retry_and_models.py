"""Retry decisions, backoff, error parsing and typed results: pure, no server."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import requests
from sf_rest import (
    ClusterConfigurationUpgradeStatus,
    ConfigurationUpgradeRefused,
    FabricError,
    GatewayUnavailableError,
    InvalidArgumentError,
    NodeInfo,
    NodeIsUpError,
    NodeNotFoundError,
    RetryPolicy,
    ServiceFabricClient,
    Timeouts,
    UpgradeHealthPolicy,
    UpgradeInProgressError,
)
from sf_rest.errors import error_from_response, parse_error_body
from sf_rest.models import iso8601_duration
from sf_rest.retry import should_retry


def test_error_parsing_of_bodies_that_are_not_fabric_errors():
    assert parse_error_body('{"Error": {"Code": "FABRIC_E_TIMEOUT"}}') == ("FABRIC_E_TIMEOUT", "")
    assert parse_error_body("<html>bad gateway</html>") == (None, "<html>bad gateway</html>")
    assert parse_error_body('["not", "an", "error"]')[0] is None
    plain = error_from_response(502, "bad gateway", method="GET", path="/Nodes")
    assert isinstance(plain, GatewayUnavailableError) and plain.code == "HTTP_502"


@pytest.mark.parametrize(
    ("code", "status", "idempotent", "expected"),
    [
        ("FABRIC_E_NOT_READY", 503, False, True),
        ("FABRIC_E_TIMEOUT", 504, True, True),
        ("FABRIC_E_TIMEOUT", 504, False, False),
        ("FABRIC_E_NODE_IS_UP", 400, True, False),
        ("FABRIC_E_CONFIG_UPGRADE_FAILED", 500, False, False),  # a refusal is final
        ("FABRIC_E_CONFIG_UPGRADE_FAILED", 500, True, False),
        ("HTTP_500", 500, True, True),
        ("HTTP_500", 500, False, False),
        ("HTTP_502", 502, True, True),
        ("HTTP_502", 502, False, False),
        ("HTTP_501", 501, True, False),
        ("CONNECT_FAILED", None, False, True),
        ("CONNECTION_LOST", None, True, True),
        ("CONNECTION_LOST", None, False, False),
        ("READ_TIMEOUT", None, False, False),
        ("READ_TIMEOUT", None, True, True),
    ],
)
def test_retry_decisions(code, status, idempotent, expected):
    assert should_retry(FabricError(code, status=status), idempotent=idempotent) is expected


def test_backoff_doubles_up_to_its_cap_with_full_jitter():
    top = RetryPolicy(base_delay_seconds=0.5, max_delay_seconds=3.0, random=lambda: 1.0)
    bottom = RetryPolicy(base_delay_seconds=0.5, random=lambda: 0.0)

    assert [top.backoff(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert bottom.backoff(3) == 0.0


def test_endpoint_and_timeouts_are_validated():
    with pytest.raises(ValueError):
        ServiceFabricClient("10.0.0.1:19080", insecure=True)
    with pytest.raises(ValueError):
        Timeouts(read_seconds=0)
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)


def _error(status, code, message):
    body = json.dumps({"Error": {"Code": code, "Message": message}})
    return error_from_response(
        status, body, method="POST", path="/$/StartClusterConfigurationUpgrade"
    )


def test_fabric_codes_map_to_exception_classes():
    err = error_from_response(
        400,
        '{"Error": {"Code": "FABRIC_E_NODE_IS_UP", "Message": "up"}}',
        method="POST",
        path="/Nodes/n/$/RemoveNodeState",
    )
    assert isinstance(err, NodeIsUpError) and not err.is_transient
    assert (err.code, err.status, err.message) == ("FABRIC_E_NODE_IS_UP", 400, "up")
    assert type(_error(404, "FABRIC_E_NODE_NOT_FOUND", "")) is NodeNotFoundError
    assert type(_error(400, "E_INVALIDARG", "")) is InvalidArgumentError
    assert type(_error(409, "FABRIC_E_SOMETHING_ELSE", "")) is FabricError
    assert FabricError("FABRIC_E_NOT_READY").is_transient


def test_a_uos_refusal_is_configuration_upgrade_refused():
    err = _error(
        500,
        "FABRIC_E_CONFIG_UPGRADE_FAILED",
        "ValidationException: NodesToBeRemoved parameter contains inconsistent information.",
    )

    assert type(err) is ConfigurationUpgradeRefused and not err.is_transient
    assert (err.code, err.status) == ("FABRIC_E_CONFIG_UPGRADE_FAILED", 500)
    assert err.message.startswith("ValidationException: NodesToBeRemoved")


def test_the_uos_in_progress_refusal_is_upgrade_in_progress():
    err = _error(
        500,
        "FABRIC_E_CONFIG_UPGRADE_FAILED",
        "FabricException: Cluster configuration upgrade of type StandAloneAutoScaleClusterUpgrade"
        "State is already in progress and cannot be interrupted.",
    )
    cluster_manager = _error(400, "FABRIC_E_FABRIC_UPGRADE_IN_PROGRESS", "")

    assert isinstance(err, UpgradeInProgressError) and isinstance(err, ConfigurationUpgradeRefused)
    assert err.code == "FABRIC_E_CONFIG_UPGRADE_FAILED" and not err.is_transient
    assert isinstance(cluster_manager, UpgradeInProgressError)
    # The text must match: other codes saying the same are not taken for it.
    assert type(_error(500, "FABRIC_E_SOMETHING", err.message)) is FabricError


def test_node_info_tolerates_missing_fields():
    node = NodeInfo.from_json({"Name": "n", "NodeStatus": "Down", "NodeDownTimeInSeconds": "x"})

    assert (node.name, node.status, node.deactivation_status) == ("n", "Down", "None")
    assert node.node_down_time_in_seconds == 0 and not node.is_seed_node


@pytest.mark.parametrize(
    ("state", "running", "completed", "failed"),
    [
        ("RollingForwardInProgress", True, False, False),
        ("RollingForwardPending", True, False, False),
        ("RollingBackInProgress", True, False, False),
        ("RollingForwardCompleted", False, True, False),
        ("RollingBackCompleted", False, False, True),
        ("Failed", False, False, True),
    ],
)
def test_upgrade_states_read_as_running_completed_or_failed(state, running, completed, failed):
    status = ClusterConfigurationUpgradeStatus.from_json({"UpgradeState": state})

    assert (status.is_running, status.is_completed, status.has_failed) == (
        running,
        completed,
        failed,
    )


def test_health_policy_serialises_durations_and_checks_percentages():
    assert iso8601_duration(timedelta(hours=25, seconds=61)) == "PT25H1M1S"
    assert UpgradeHealthPolicy().to_body() == {}
    assert UpgradeHealthPolicy(upgrade_timeout=timedelta(minutes=90)).to_body() == {
        "UpgradeTimeoutInSeconds": "PT1H30M0S"
    }
    with pytest.raises(ValueError):
        UpgradeHealthPolicy(max_percent_unhealthy_nodes=101).to_body()
    with pytest.raises(ValueError):
        iso8601_duration(timedelta(seconds=-1))


class _SameTokenSession(requests.Session):
    """A gateway that keeps answering with the same continuation token."""

    def request(self, method, url, **kwargs):
        answer = requests.Response()
        answer.status_code = 200
        answer._content = json.dumps(
            {"ContinuationToken": "n1", "Items": [{"Name": "n1"}]}
        ).encode()
        return answer


def test_node_list_stops_when_the_gateway_repeats_a_token():
    client = ServiceFabricClient("http://127.0.0.1:1", session=_SameTokenSession())

    with pytest.raises(FabricError) as raised:
        client.get_node_info_list()
    assert raised.value.code == "REPEATED_CONTINUATION_TOKEN"
