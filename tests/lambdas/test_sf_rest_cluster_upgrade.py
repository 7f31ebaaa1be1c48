"""Cluster configuration and its upgrades, and whole membership changes, via the emulator."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sf_rest import (
    DeactivationIntent,
    FabricError,
    NodeStatus,
    UpgradeHealthPolicy,
    UpgradeInProgressError,
    UpgradeState,
)
from sf_rest.cluster_config import ConfigNode, add_node, nodes_to_be_removed, remove_node

pytestmark = pytest.mark.integration  # starts the HTTP(S) emulator

UPGRADE = r"/\$/StartClusterConfigurationUpgrade"


def _wait_for_upgrade(client, limit=10):
    for _ in range(limit):
        status = client.get_cluster_configuration_upgrade_status()
        if not status.is_running:
            return status
    raise AssertionError("upgrade still running")


def test_configuration_is_parsed_from_its_json_string(sf_client, sf_emulator):
    config = sf_client.get_cluster_configuration()

    assert config["clusterConfigurationVersion"] == "1.0.0"
    assert [n["nodeName"] for n in config["nodes"]][:3] == ["seed-0", "seed-1", "seed-2"]
    [request] = sf_emulator.requests
    assert request.query["ConfigurationApiVersion"] == "10-2017"
    assert request.query["api-version"] == "6.0"


def test_upgrade_sends_the_config_as_a_string_with_the_health_policy(
    sf_client, sf_cluster, sf_emulator
):

    config = remove_node(sf_client.get_cluster_configuration(), "scale-1")
    policy = UpgradeHealthPolicy(
        health_check_wait_duration=timedelta(seconds=30),
        upgrade_domain_timeout=timedelta(hours=1, minutes=2, seconds=3),
        max_percent_unhealthy_nodes=0,
    )

    sf_client.start_cluster_configuration_upgrade(config, policy)

    [request] = sf_emulator.requests_to("POST", UPGRADE)
    assert request.status == 202
    assert json.loads(request.body["ClusterConfig"]) == config
    assert {k: v for k, v in request.body.items() if k != "ClusterConfig"} == {
        "HealthCheckWaitDurationInSeconds": "PT0H0M30S",
        "UpgradeDomainTimeoutInSeconds": "PT1H2M3S",
        "MaxPercentUnhealthyNodes": 0,
    }


def test_upgrade_rolls_forward_then_completes(sf_client):
    config = remove_node(sf_client.get_cluster_configuration(), "scale-1")
    sf_client.start_cluster_configuration_upgrade(config)

    first = sf_client.get_cluster_configuration_upgrade_status()
    final = _wait_for_upgrade(sf_client)

    assert first.upgrade_state == UpgradeState.ROLLING_FORWARD_IN_PROGRESS and first.is_running
    assert final.is_completed and final.config_version == "1.0.1"
    assert sf_client.get_cluster_configuration()["clusterConfigurationVersion"] == "1.0.1"


def test_a_second_upgrade_while_one_runs_is_refused(sf_client):
    config = remove_node(sf_client.get_cluster_configuration(), "scale-1")
    sf_client.start_cluster_configuration_upgrade(config)

    with pytest.raises(UpgradeInProgressError) as refused:
        sf_client.start_cluster_configuration_upgrade(remove_node(config, "scale-0"))
    assert refused.value.code == "FABRIC_E_FABRIC_UPGRADE_IN_PROGRESS"


def test_an_upgrade_without_a_new_version_is_refused_once(sf_client, sf_emulator):
    config = sf_client.get_cluster_configuration()

    with pytest.raises(FabricError) as refused:
        sf_client.start_cluster_configuration_upgrade(config)

    assert refused.value.status == 400
    assert len(sf_emulator.requests_to("POST", UPGRADE)) == 1


def test_a_rolled_back_upgrade_reads_as_failed(sf_client, sf_cluster):
    sf_cluster.upgrade_outcome = UpgradeState.ROLLING_BACK_COMPLETED
    sf_client.start_cluster_configuration_upgrade(
        remove_node(sf_client.get_cluster_configuration(), "scale-1")
    )

    final = _wait_for_upgrade(sf_client)

    assert final.has_failed and not final.is_completed
    assert sf_client.get_cluster_configuration()["clusterConfigurationVersion"] == "1.0.0"


def test_scale_in_takes_a_node_from_up_to_gone(sf_client, sf_cluster):
    client, name = sf_client, "scale-0"
    client.deactivate_node(name, DeactivationIntent.REMOVE_NODE)
    while not client.get_node_info(name).is_deactivated:
        pass
    sf_cluster.stop_host(name)  # what the SSM command does on the instance
    assert client.get_node_info(name).status == NodeStatus.DOWN
    client.remove_node_state(name)

    client.start_cluster_configuration_upgrade(
        remove_node(client.get_cluster_configuration(), name)
    )
    assert _wait_for_upgrade(client).is_completed

    assert client.get_node_info(name) is None
    config = client.get_cluster_configuration()
    assert name not in [n["nodeName"] for n in config["nodes"]]
    assert nodes_to_be_removed(config) == [name]
    assert name not in {n.name for n in client.get_node_info_list(status_filter="all")}


def test_scale_out_adds_the_joined_node_to_the_configuration(sf_client, sf_cluster):
    sf_cluster.add_node("scale-7", ip="10.0.2.17")  # what AddNode.ps1 does
    joined = sf_client.get_node_info("scale-7")
    entry = ConfigNode(
        joined.name,
        joined.ip_address_or_fqdn,
        joined.node_type,
        joined.fault_domain,
        joined.upgrade_domain,
    )

    config = add_node(sf_client.get_cluster_configuration(), entry)
    sf_client.start_cluster_configuration_upgrade(config)

    assert _wait_for_upgrade(sf_client).is_completed
    assert "scale-7" in [n["nodeName"] for n in sf_client.get_cluster_configuration()["nodes"]]
    assert add_node(sf_client.get_cluster_configuration(), entry) == (
        sf_client.get_cluster_configuration()
    )  # nothing left to do
