"""Error parsing, retries and their bounds, over real HTTP to the emulator."""

from __future__ import annotations

import socket

import pytest
from sf_rest import (
    NO_RETRY,
    ConfigurationUpgradeRefused,
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
        # What the gateway answers a busy or closing service with (HttpUtil.cpp,
        # ErrorCodeToHttpStatus), and Microsoft's client retries (FabricClientRetryErrors).
        (503, "FABRIC_E_SERVICE_TOO_BUSY"),
        (503, "FABRIC_E_OBJECT_CLOSED"),
        (503, "FABRIC_E_CONNECTION_CLOSED_BY_REMOTE_END"),
        (503, "FABRIC_E_REPLICATION_QUEUE_FULL"),
        (502, "FABRIC_E_GATEWAY_NOT_REACHABLE"),
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


UPGRADE = r"/\$/StartClusterConfigurationUpgrade"


def _settings_upgrade(client, version):
    config = client.get_cluster_configuration()
    config["clusterConfigurationVersion"] = version
    return config


def test_upgrade_start_is_resent_when_the_gateway_surely_did_not_act(
    sf_client, sf_cluster, sf_emulator, fake_time
):
    sf_cluster.start_wait_ticks = 50  # the start answers 202 once the upgrade is done
    config = _settings_upgrade(sf_client, "1.0.1")

    sf_emulator.inject_error(503, "FABRIC_E_NOT_READY", path=UPGRADE)  # refused before acting
    sf_client.start_cluster_configuration_upgrade(config)

    assert [r.status for r in sf_emulator.requests_to("POST", UPGRADE)] == [503, 202]
    assert fake_time.sleeps == [0.5]
    assert len(sf_cluster.upgrade_requests) == 1  # only the second reached the UOS


def test_upgrade_start_is_not_resent_after_a_read_timeout(make_client, sf_emulator):
    sf_client = make_client(timeouts=QUICK_READ_TIMEOUT)
    config = _settings_upgrade(sf_client, "1.0.1")
    sf_emulator.inject_hang(10.0, path=UPGRADE)  # outcome unknown: it may have started

    with pytest.raises(GatewayUnavailableError) as raised:
        sf_client.start_cluster_configuration_upgrade(config)

    assert raised.value.code == "READ_TIMEOUT" and raised.value.attempts == 1
    assert len(sf_emulator.requests_to("POST", UPGRADE)) == 1


def test_upgrade_start_is_not_resent_after_the_gateway_timeout(
    sf_client, sf_cluster, sf_emulator, fake_time
):
    # start_wait_ticks=1: the orchestration outlives the start's wait, as it usually does on a
    # real cluster; the gateway answers 504 FABRIC_E_TIMEOUT while the upgrade goes on.
    config = _settings_upgrade(sf_client, "1.0.1")

    with pytest.raises(FabricError) as raised:
        sf_client.start_cluster_configuration_upgrade(config)

    assert (raised.value.code, raised.value.status) == ("FABRIC_E_TIMEOUT", 504)
    assert raised.value.attempts == 1 and fake_time.sleeps == []
    assert [r.status for r in sf_emulator.requests_to("POST", UPGRADE)] == [504]
    assert sf_cluster.uos.pending is not None  # it started all the same
    for _ in range(10):
        status = sf_client.get_cluster_configuration_upgrade_status()
        if status.config_version == "1.0.1":
            break
    assert status.is_completed and status.config_version == "1.0.1"


@pytest.mark.parametrize("status, code", [(503, "FABRIC_E_SERVICE_TOO_BUSY"), (502, "FABRIC_E_GATEWAY_NOT_REACHABLE")])
def test_upgrade_start_is_not_resent_after_a_busy_answer(sf_client, sf_emulator, fake_time, status, code):
    """No source says the gateway did not act before a busy answer: the start is not sent twice
    (a second start of the same version would be refused, or start another upgrade)."""
    config = _settings_upgrade(sf_client, "1.0.1")
    sf_emulator.inject_error(status, code, path=UPGRADE)
    with pytest.raises(FabricError) as raised:
        sf_client.start_cluster_configuration_upgrade(config)
    assert (raised.value.code, raised.value.status, raised.value.attempts) == (code, status, 1)
    assert len(sf_emulator.requests_to("POST", UPGRADE)) == 1


def test_a_refused_upgrade_start_is_final(sf_client, sf_emulator, fake_time):
    config = sf_client.get_cluster_configuration()  # same version: the UOS refuses it

    with pytest.raises(ConfigurationUpgradeRefused) as raised:
        sf_client.start_cluster_configuration_upgrade(config)

    assert (raised.value.code, raised.value.status) == ("FABRIC_E_CONFIG_UPGRADE_FAILED", 500)
    assert raised.value.attempts == 1 and fake_time.sleeps == []
    assert len(sf_emulator.requests_to("POST", UPGRADE)) == 1


@pytest.mark.parametrize(
    "message",
    [
        "ValidationException: UpgradeWithIdenticalConfigVersionNotAllowed",
        "FabricException: Cluster configuration upgrade of type StandAloneSimpleClusterUpgrade"
        "State is already in progress and cannot be interrupted.",
    ],
)
def test_a_config_upgrade_failure_is_not_retried_even_on_an_idempotent_call(
    sf_client, sf_emulator, fake_time, message
):
    sf_emulator.inject_error(500, "FABRIC_E_CONFIG_UPGRADE_FAILED", message=message, times=3)

    with pytest.raises(ConfigurationUpgradeRefused) as raised:
        sf_client.get_cluster_configuration_upgrade_status()

    assert raised.value.attempts == 1 and fake_time.sleeps == []
    assert len(sf_emulator.requests) == 1


def test_no_retry_policy_tries_once(make_client, sf_emulator):
    sf_emulator.inject_error(503, "FABRIC_E_NOT_READY")

    with pytest.raises(FabricError):
        make_client(retry=NO_RETRY).get_node_info("seed-0")
    assert len(sf_emulator.requests) == 1
