"""Joins and their registration upgrade, drains after joins, and lost machines, against the
HTTPS gateway emulator's model of the Upgrade Orchestration Service."""

from __future__ import annotations

import itertools
import json

import pytest
from node_lifecycle import (
    ConfigurationUpgradeFailed,
    NodeInWrongState,
    Outcome,
    deactivate_node,
    poll_configuration_upgrade,
    poll_deactivation,
    poll_running_upgrade,
    remove_node_state,
    start_configuration_registration,
    start_configuration_removal,
)
from sf_rest import ConfigurationUpgradeRefused
from sf_rest.cluster_config import for_removal, node_names, nodes_to_be_removed

pytestmark = pytest.mark.integration  # starts the HTTPS emulator

CLOCK = itertools.count()


def join(client, cluster, poll_loop, name: str, ip: str) -> dict:
    """AddNode.ps1 (the FM learns the node), then the registration upgrade, to completion."""
    cluster.add_node(name, ip=ip, fault_domain="fd:/aws/az1", upgrade_domain="UD1")
    change = start_configuration_registration(client, name, now=next(CLOCK)).to_dict()
    poll_loop(lambda: poll_configuration_upgrade(client, change, now=next(CLOCK)))
    return change


def drain(client, poll_loop, name: str) -> dict:
    deactivate_node(client, name)
    poll_loop(lambda: poll_deactivation(client, name))
    change = start_configuration_removal(client, name, now=next(CLOCK)).to_dict()
    poll_loop(lambda: poll_configuration_upgrade(client, change, now=next(CLOCK)))
    return change


def last_body(cluster) -> dict:
    return json.loads(cluster.upgrade_requests[-1]["ClusterConfig"])


def test_a_join_is_registered_by_one_upgrade_though_the_configuration_lists_it_already(
    sf_client, sf_cluster, poll_loop
):
    sf_cluster.add_node("scale-9", ip="10.0.2.19")
    assert "scale-9" in node_names(sf_client.get_cluster_configuration())  # from the FM's list
    assert "scale-9" not in sf_cluster.uos_nodes

    change = start_configuration_registration(sf_client, "scale-9", now=0)
    poll_loop(lambda: poll_configuration_upgrade(sf_client, change.to_dict(), now=1))

    assert (change.outcome, change.kind, change.target_version) == (
        Outcome.REQUESTED,
        "registration",
        "1.0.1",
    )
    assert "scale-9" in sf_cluster.uos_nodes
    assert sorted(node_names(last_body(sf_cluster))) == sorted(n.name for n in sf_client.get_node_info_list())
    assert sf_cluster.upgrades[-1].adding == ("scale-9",)


def test_a_removal_refused_for_an_unregistered_join_registers_first_then_removes(
    sf_client, sf_cluster, poll_loop
):
    """Until a node AddNode.ps1 joined is registered, the UOS refuses every upgrade whose nodes
    differ from the FM's, removals included (VerifyFMNodesMatchTargetNodes): the removal step
    registers the FM's nodes first and removes once that upgrade is done."""
    sf_cluster.add_node("scale-9", ip="10.0.2.19")  # AddNode.ps1 ran; no registration yet
    deactivate_node(sf_client, "scale-0")
    poll_loop(lambda: poll_deactivation(sf_client, "scale-0"))

    first = start_configuration_removal(sf_client, "scale-0", now=0)

    assert first.outcome == Outcome.WAIT_FOR_UPGRADE and "registration" in first.detail
    refused, registration = sf_cluster.upgrade_requests[-2:]
    assert nodes_to_be_removed(json.loads(refused["ClusterConfig"])) == ["scale-0"]
    assert nodes_to_be_removed(json.loads(registration["ClusterConfig"])) in (None, [])
    poll_loop(lambda: poll_running_upgrade(sf_client))
    assert "scale-9" in sf_cluster.uos_nodes and "scale-0" in sf_cluster.uos_nodes
    removal = start_configuration_removal(sf_client, "scale-0", now=3).to_dict()
    poll_loop(lambda: poll_configuration_upgrade(sf_client, removal, now=4))
    assert sf_client.get_node_info("scale-0") is None and "scale-9" in sf_cluster.uos_nodes


def test_a_join_followed_by_a_drain_of_the_new_node(sf_client, sf_cluster, poll_loop):
    join(sf_client, sf_cluster, poll_loop, "scale-9", "10.0.2.19")

    drain(sf_client, poll_loop, "scale-9")

    assert sf_client.get_node_info("scale-9") is None
    assert "scale-9" not in sf_cluster.uos_nodes
    assert nodes_to_be_removed(last_body(sf_cluster)) == ["scale-9"]


def test_a_second_join_after_a_removal_drops_the_stale_nodes_to_be_removed(
    sf_client, sf_cluster, poll_loop
):
    drain(sf_client, poll_loop, "scale-0")
    echoed = sf_client.get_cluster_configuration()
    assert nodes_to_be_removed(echoed) == ["scale-0"]  # GetClusterConfiguration echoes it

    join(sf_client, sf_cluster, poll_loop, "scale-9", "10.0.2.19")
    join(sf_client, sf_cluster, poll_loop, "scale-10", "10.0.2.20")

    assert {"scale-9", "scale-10"} <= set(sf_cluster.uos_nodes)
    assert [u.log[-1] for u in sf_cluster.upgrades] == ["completed"] * 3
    assert nodes_to_be_removed(last_body(sf_cluster)) == []


def test_the_uos_refuses_a_stale_name_in_nodes_to_be_removed(sf_client, sf_cluster, poll_loop):
    """What the edits above avoid (service-fabric-issues #1469)."""
    drain(sf_client, poll_loop, "scale-0")
    deactivate_node(sf_client, "scale-1")
    poll_loop(lambda: poll_deactivation(sf_client, "scale-1"))
    carried = for_removal(sf_client.get_cluster_configuration(), "scale-1")
    carried["properties"]["fabricSettings"][0]["parameters"][-1]["value"] = "scale-0,scale-1"

    with pytest.raises(ConfigurationUpgradeRefused, match="inconsistent information"):
        sf_client.start_cluster_configuration_upgrade(carried)


def test_a_registration_waits_while_another_upgrade_runs(sf_client, sf_cluster):
    sf_cluster.add_node("scale-9", ip="10.0.2.19")
    sf_cluster.run_other_upgrade(ticks=10)

    change = start_configuration_registration(sf_client, "scale-9", now=0)

    assert change.outcome == Outcome.WAIT_FOR_UPGRADE
    assert sf_cluster.upgrade_requests == []  # the status said so: nothing was sent


def test_a_node_that_is_not_up_is_not_registered(sf_client, sf_cluster):
    sf_cluster.add_node("scale-9", ip="10.0.2.19")
    sf_cluster.stop_host("scale-9")

    with pytest.raises(NodeInWrongState, match="not Up"):
        start_configuration_registration(sf_client, "scale-9", now=0)
    assert sf_cluster.upgrade_requests == []


def test_a_node_whose_machine_is_gone_cannot_be_removed_by_upgrade(sf_client, sf_cluster):
    sf_cluster.terminate_machine("scale-1")
    config = sf_client.get_cluster_configuration()
    assert "scale-1" in node_names(config)  # Down, still listed

    with pytest.raises(NodeInWrongState, match="Down"):
        start_configuration_removal(sf_client, "scale-1", now=0)
    with pytest.raises(ConfigurationUpgradeRefused, match="not reacheable"):
        sf_client.start_cluster_configuration_upgrade(for_removal(config, "scale-1"))


def test_removing_the_state_of_a_lost_node_would_block_every_later_join(
    sf_client, sf_cluster, poll_loop
):
    """Why the reaper never calls RemoveNodeState: the UOS keeps listing the node (the node list
    shows it as Invalid), so the next registration no longer matches the node list."""
    sf_cluster.terminate_machine("scale-1")
    remove_node_state(sf_client, "scale-1")
    assert sf_client.get_node_info("scale-1").status == "Invalid"
    sf_cluster.add_node("scale-9", ip="10.0.2.19")

    with pytest.raises(ConfigurationUpgradeFailed, match="must exactly match"):
        start_configuration_registration(sf_client, "scale-9", now=0)


def test_a_lost_node_left_down_lets_later_joins_and_drains_pass(sf_client, sf_cluster, poll_loop):
    sf_cluster.terminate_machine("scale-1")

    join(sf_client, sf_cluster, poll_loop, "scale-9", "10.0.2.19")
    drain(sf_client, poll_loop, "scale-0")

    assert "scale-9" in sf_cluster.uos_nodes and "scale-0" not in sf_cluster.uos_nodes
    assert sf_client.get_node_info("scale-1").status == "Down"
