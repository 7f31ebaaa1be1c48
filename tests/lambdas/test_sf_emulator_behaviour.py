"""The emulator keeps to the gateway's rules that later tests rely on."""

from __future__ import annotations

import pytest
import requests
from sf_rest import DeactivationIntent, NodeStatus

from tests.sf_emulator import SfEmulator, standard_cluster

pytestmark = pytest.mark.integration  # starts the HTTP(S) emulator


def test_a_deactivation_can_stick_in_safety_checks(sf_client, sf_cluster):
    sf_cluster.set_stuck_in_safety_check("scale-0")
    sf_client.deactivate_node("scale-0", DeactivationIntent.REMOVE_NODE)

    states = {sf_client.get_node_info("scale-0").deactivation_status for _ in range(5)}

    assert states == {"SafetyCheckInProgress"}
    sf_cluster.set_stuck_in_safety_check("scale-0", stuck=False)  # checks resume
    after = [sf_client.get_node_info("scale-0").status for _ in range(2)]
    assert after == [NodeStatus.DISABLING, NodeStatus.DISABLED]


def test_deactivation_takes_the_configured_number_of_polls(sf_client, sf_cluster):
    sf_cluster.deactivation_polls = 4
    sf_client.deactivate_node("scale-0", DeactivationIntent.REMOVE_NODE)

    statuses = [sf_client.get_node_info("scale-0").status for _ in range(4)]

    assert statuses == ["Disabling"] * 3 + ["Disabled"]


def test_down_time_is_reported_and_the_host_can_come_back(sf_cluster, sf_client):
    now = [100.0]
    sf_cluster.clock = lambda: now[0]
    sf_cluster.stop_host("scale-1")
    now[0] += 420

    assert sf_client.get_node_info("scale-1").node_down_time_in_seconds == 420
    sf_cluster.start_host("scale-1")
    assert sf_client.get_node_info("scale-1").status == NodeStatus.UP


@pytest.mark.parametrize(
    "url",
    ["/Nodes/seed-0", "/Nodes?api-version=6.0", "/$/GetClusterConfiguration?api-version=6.0"],
)
def test_plain_http_emulator_checks_required_parameters(url):
    with SfEmulator(standard_cluster()) as emulator:
        answer = requests.get(emulator.endpoint + url, timeout=5)

    assert answer.status_code == 400
    assert answer.json()["Error"]["Code"] == "E_INVALIDARG"


def test_unknown_routes_are_loud():
    with SfEmulator(standard_cluster()) as emulator:
        answer = requests.post(
            emulator.endpoint + "/Nodes/seed-0/$/Restart?api-version=6.0", timeout=5
        )

    assert answer.status_code == 404
    assert answer.json()["Error"]["Code"] == "EMULATOR_UNKNOWN_ROUTE"
    assert emulator.server_errors == []
