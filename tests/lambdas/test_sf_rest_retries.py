"""Error parsing, retries and their bounds, over real HTTP to the emulator."""

from __future__ import annotations

import socket

import pytest
from sf_rest import (
    NO_RETRY,
    FabricError,
    GatewayUnavailableError,
    RetryPolicy,
    Timeouts,
)

pytestmark = pytest.mark.integration  # starts the HTTP(S) emulator

NODE = "/Nodes/seed-0"
QUICK_READ_TIMEOUT = Timeouts(connect_seconds=5.0, read_seconds=0.3, server_seconds=1)


def test_fabric_error_body_becomes_an_exception_naming_the_code(sf_client, sf_emulator):
    sf_emulator.inject_error(409, "FABRIC_E_SOMETHING_ODD", message="it went odd")

    with pytest.raises(FabricError) as raised:
        sf_client.get_node_info("seed-0")

    err = raised.value
    assert (err.code, err.status, err.message) == ("FABRIC_E_SOMETHING_ODD", 409, "it went odd")
    assert str(err) == "FABRIC_E_SOMETHING_ODD HTTP 409 on GET /Nodes/seed-0: it went odd"
    assert len(sf_emulator.requests) == 1


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (503, "FABRIC_E_NOT_READY"),
        (504, "FABRIC_E_TIMEOUT"),
        (504, "FABRIC_E_COMMUNICATION_ERROR"),
        (503, None),  # a bare 503 without a Fabric body
    ],
)
def test_transient_failures_are_retried_until_success(
    sf_client, sf_emulator, fake_time, status, code
):
    sf_emulator.inject_error(status, code, times=2, path=NODE)

    node = sf_client.get_node_info("seed-0")

    assert node.name == "seed-0"
    assert [r.status for r in sf_emulator.requests] == [status, status, 200]
    assert fake_time.sleeps == [0.5, 1.0]  # exponential, jitter pinned to its cap


def test_read_timeout_is_retried(make_client, sf_emulator):
    sf_emulator.inject_hang(10.0, path=NODE)
    client = make_client(timeouts=QUICK_READ_TIMEOUT)

    assert client.get_node_info("seed-0").name == "seed-0"
    assert [r.fault for r in sf_emulator.requests] == ["hang", None]


def test_dropped_connection_is_retried(sf_client, sf_emulator):
    sf_emulator.inject_drop(times=2, path=NODE)

    assert sf_client.get_node_info("seed-0").name == "seed-0"
    assert [r.fault for r in sf_emulator.requests] == ["drop", "drop", None]


def test_gives_up_after_max_attempts_naming_the_code(sf_client, sf_emulator, fake_time):
    sf_emulator.inject_error(503, "FABRIC_E_NOT_READY", times=10)

    with pytest.raises(FabricError) as raised:
        sf_client.get_node_info_list()

    assert raised.value.code == "FABRIC_E_NOT_READY" and raised.value.attempts == 4
    assert "FABRIC_E_NOT_READY" in str(raised.value) and "after 4 attempts" in str(raised.value)
    assert len(sf_emulator.requests) == 4
    assert fake_time.sleeps == [0.5, 1.0, 2.0]


def test_gives_up_when_the_next_wait_would_pass_the_time_bound(make_client, sf_emulator, fake_time):
    retry = RetryPolicy(
        max_attempts=10,
        max_elapsed_seconds=1.2,
        base_delay_seconds=0.5,
        sleep=fake_time.sleep,
        clock=fake_time.clock,
        random=lambda: 1.0,
    )
    sf_emulator.inject_error(503, "FABRIC_E_NOT_READY", times=10)

    with pytest.raises(FabricError) as raised:
        make_client(retry=retry).get_node_info("seed-0")

    assert raised.value.attempts == 2  # 0.5 s slept; waiting 1.0 s more would pass 1.2 s
    assert fake_time.sleeps == [0.5]


def test_connection_refused_gives_up_as_gateway_unavailable(make_client, fake_time):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    client = make_client(endpoint=f"https://127.0.0.1:{port}")
    with pytest.raises(GatewayUnavailableError) as raised:
        client.get_node_info("seed-0")

    assert raised.value.code == "CONNECT_FAILED" and raised.value.attempts == 4


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, "E_INVALIDARG"),
        (404, "FABRIC_E_NODE_NOT_FOUND"),
        (409, "FABRIC_E_NAME_ALREADY_EXISTS"),
        (400, None),
    ],
)
def test_client_errors_are_not_retried(sf_client, sf_emulator, fake_time, status, code):
    sf_emulator.inject_error(status, code, times=3)

    with pytest.raises(FabricError) as raised:
        sf_client.get_node_info("seed-0")

    assert raised.value.status == status and raised.value.attempts == 1
    assert len(sf_emulator.requests) == 1 and fake_time.sleeps == []


def test_upgrade_start_is_resent_only_when_the_gateway_surely_did_not_act(make_client, sf_emulator):
    sf_client = make_client(timeouts=QUICK_READ_TIMEOUT)
    config = sf_client.get_cluster_configuration()
    config["clusterConfigurationVersion"] = "1.0.1"
    upgrade = r"/\$/StartClusterConfigurationUpgrade"

    sf_emulator.inject_error(503, "FABRIC_E_NOT_READY", path=upgrade)  # refused before acting
    sf_client.start_cluster_configuration_upgrade(config)
    assert [r.status for r in sf_emulator.requests_to("POST", upgrade)] == [503, 202]

    sf_emulator.clear_log()
    sf_emulator.inject_hang(10.0, path=upgrade)  # outcome unknown: may have started
    with pytest.raises(GatewayUnavailableError) as raised:
        sf_client.start_cluster_configuration_upgrade(
            {**config, "clusterConfigurationVersion": "1.0.2"}
        )
    assert raised.value.code == "READ_TIMEOUT"
    assert len(sf_emulator.requests_to("POST", upgrade)) == 1


def test_no_retry_policy_tries_once(make_client, sf_emulator):
    sf_emulator.inject_error(503, "FABRIC_E_NOT_READY")

    with pytest.raises(FabricError):
        make_client(retry=NO_RETRY).get_node_info("seed-0")
    assert len(sf_emulator.requests) == 1
