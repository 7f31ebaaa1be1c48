"""The configuration upgrade that ends a drain, against the HTTPS gateway emulator."""

from __future__ import annotations

import pytest
from node_lifecycle import (
    ConfigurationUpgradeFailed,
    Outcome,
    deactivate_node,
    poll_configuration_upgrade,
    remove_node_state,
    start_configuration_removal,
)
from sf_rest import FabricError, GatewayUnavailableError
from sf_rest.cluster_config import ConfigNode, add_node, node_names, nodes_to_be_removed
from sf_rest.errors import READ_TIMEOUT

pytestmark = pytest.mark.integration  # starts the HTTPS emulator


@pytest.fixture
def state_removed(sf_client, sf_cluster):
    """scale-0 deactivated, its host stopped and its state removed: ready for the upgrade."""
    deactivate_node(sf_client, "scale-0")
    sf_cluster.stop_host("scale-0")
    remove_node_state(sf_client, "scale-0")
    return "scale-0"


def test_the_upgrade_drops_the_node_and_lists_it_for_removal(
    sf_client, sf_cluster, state_removed, poll_loop
):
    start = start_configuration_removal(sf_client, state_removed)
    done = poll_loop(
        lambda: poll_configuration_upgrade(sf_client, target_version=start.target_version)
    )

    assert (start.outcome, start.target_version) == (Outcome.REQUESTED, "1.0.1")
    assert (done.status, done.detail) == (
        "RollingForwardCompleted",
        "RollingForwardCompleted to version 1.0.1",
    )
    body = sf_cluster.upgrade_requests[0]
    assert set(body) == {"ClusterConfig"}  # no health policy given: the cluster's defaults
    config = sf_client.get_cluster_configuration()
    assert "scale-0" not in node_names(config)
    assert nodes_to_be_removed(config) == ["scale-0"]
    assert node_names(config) == ["seed-0", "seed-1", "seed-2", "scale-1"]


def test_a_running_upgrade_makes_the_start_wait_its_turn(
    sf_client, sf_cluster, state_removed, poll_loop
):
    joining = ConfigNode("scale-9", "10.0.2.19", "ScalingNodeType", "fd:/aws/az0", "UD0")
    sf_client.start_cluster_configuration_upgrade(
        add_node(sf_client.get_cluster_configuration(), joining)
    )  # a scale-out's upgrade, started before ours

    first = start_configuration_removal(sf_client, state_removed)
    poll_loop(lambda: poll_configuration_upgrade(sf_client))
    second = start_configuration_removal(sf_client, state_removed)

    assert first.outcome == Outcome.WAIT_FOR_UPGRADE
    assert "RollingForwardInProgress" in first.detail
    assert (second.outcome, second.target_version) == (Outcome.REQUESTED, "1.0.2")
    assert len(sf_cluster.upgrade_requests) == 2  # ours was not sent while the other ran


def test_a_start_whose_answer_was_lost_is_not_sent_twice(
    sf_client, sf_cluster, state_removed, poll_loop
):
    sf_cluster.upgrade_polls = 4

    class AnswerLost:
        """The gateway starts the upgrade, but its answer never arrives."""

        def __getattr__(self, name):
            return getattr(sf_client, name)

        def start_cluster_configuration_upgrade(self, config, policy=None):
            sf_client.start_cluster_configuration_upgrade(config, policy)
            raise GatewayUnavailableError(READ_TIMEOUT, "read timed out")

    flaky = AnswerLost()

    start = start_configuration_removal(flaky, state_removed)
    again = start_configuration_removal(flaky, state_removed)  # a retried state
    poll_loop(lambda: poll_configuration_upgrade(sf_client))
    last = start_configuration_removal(flaky, state_removed)

    assert start.outcome == Outcome.REQUESTED
    assert "READ_TIMEOUT" in start.detail
    assert again.outcome == Outcome.WAIT_FOR_UPGRADE  # our own upgrade, still running
    assert last.outcome == Outcome.ALREADY_DONE
    assert len(sf_cluster.upgrade_requests) == 1


def test_a_start_that_timed_out_without_starting_is_raised_and_can_be_retried(
    sf_client, sf_cluster, sf_emulator, state_removed
):
    sf_emulator.inject_error(504, "FABRIC_E_TIMEOUT", path="StartClusterConfigurationUpgrade")

    with pytest.raises(FabricError) as raised:
        start_configuration_removal(sf_client, state_removed)
    retried = start_configuration_removal(sf_client, state_removed)

    assert raised.value.code == "FABRIC_E_TIMEOUT"
    assert retried.outcome == Outcome.REQUESTED
    assert len(sf_cluster.upgrade_requests) == 1


@pytest.mark.parametrize("outcome", ["RollingBackCompleted", "Failed"])
def test_an_upgrade_that_does_not_roll_forward_fails_loudly(
    sf_client, sf_cluster, state_removed, poll_loop, outcome
):
    sf_cluster.upgrade_outcome = outcome
    start = start_configuration_removal(sf_client, state_removed)

    with pytest.raises(ConfigurationUpgradeFailed, match=outcome):
        poll_loop(
            lambda: poll_configuration_upgrade(sf_client, target_version=start.target_version)
        )
    assert "scale-0" in node_names(sf_client.get_cluster_configuration())


def test_the_poll_waits_for_our_version_not_an_earlier_completed_upgrade(
    sf_client, sf_cluster, state_removed
):
    # Right after a start a real gateway may still report the previous upgrade.
    early = poll_configuration_upgrade(sf_client, target_version="1.0.1")

    assert (early.done, early.status) == (False, "RollingForwardCompleted")
    assert early.detail == "RollingForwardCompleted to version 1.0.0, waiting for 1.0.1"


def test_a_node_already_out_of_the_configuration_needs_no_upgrade(
    sf_client, sf_cluster, state_removed, poll_loop
):
    start_configuration_removal(sf_client, state_removed)
    poll_loop(lambda: poll_configuration_upgrade(sf_client))

    again = start_configuration_removal(sf_client, state_removed)

    assert (again.outcome, again.changed) == (Outcome.ALREADY_DONE, False)
    assert len(sf_cluster.upgrade_requests) == 1
