"""Cluster configuration and its upgrades, and whole membership changes, via the emulator."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sf_rest import (
    ConfigurationUpgradeRefused,
    DeactivationIntent,
    FabricError,
    NodeStatus,
    UpgradeHealthPolicy,
    UpgradeInProgressError,
    UpgradeState,
)
from sf_rest.cluster_config import (
    for_registration,
    for_removal,
    node_names,
    nodes_to_be_removed,
)

pytestmark = pytest.mark.integration  # starts the HTTP(S) emulator

UPGRADE = r"/\$/StartClusterConfigurationUpgrade"


def _start(client, config) -> int:
    """Start an upgrade; 202, or 504 when the gateway's wait ran out (the upgrade goes on,
    as on a real cluster, where the start usually times out)."""
    try:
        client.start_cluster_configuration_upgrade(config)
    except FabricError as err:
        if (err.code, err.status) != ("FABRIC_E_TIMEOUT", 504):
            raise
        return 504
    return 202


def _until(predicate, limit=30):
    for _ in range(limit):
        value = predicate()
        if value:
            return value
    raise AssertionError("not reached")


def _with_setting(config, section, name, value):
    """A configuration-only change: one fabric setting."""
    config["properties"]["fabricSettings"].append(
        {"name": section, "parameters": [{"name": name, "value": value}]}
    )
    return config


def test_configuration_is_parsed_from_its_json_string(sf_client, sf_emulator):
    config = sf_client.get_cluster_configuration()

    assert config["clusterConfigurationVersion"] == "1.0.0"
    assert sorted(node_names(config)) == ["scale-0", "scale-1", "seed-0", "seed-1", "seed-2"]
    [request] = sf_emulator.requests
    assert request.query["ConfigurationApiVersion"] == "10-2017"
    assert request.query["api-version"] == "6.0"


def test_upgrade_sends_the_config_as_a_string_with_the_health_policy(
    sf_client, sf_cluster, sf_emulator
):
    sf_cluster.start_wait_ticks = 50  # the start answers once the upgrade is done
    config = for_removal(sf_client.get_cluster_configuration(), "scale-1")
    policy = UpgradeHealthPolicy(
        health_check_wait_duration=timedelta(seconds=30),
        upgrade_domain_timeout=timedelta(hours=1, minutes=2, seconds=3),
        max_percent_unhealthy_nodes=0,
    )

    sf_client.start_cluster_configuration_upgrade(config, policy)

    [request] = sf_emulator.requests_to("POST", UPGRADE)
    assert request.status == 202
    assert isinstance(request.body["ClusterConfig"], str)
    assert json.loads(request.body["ClusterConfig"]) == config
    assert {k: v for k, v in request.body.items() if k != "ClusterConfig"} == {
        "HealthCheckWaitDurationInSeconds": "PT0H0M30S",
        "UpgradeDomainTimeoutInSeconds": "PT1H2M3S",
        "MaxPercentUnhealthyNodes": 0,
    }
    assert sf_cluster.upgrade_requests == [request.body]


def test_upgrade_rolls_forward_then_completes(sf_client):
    config = for_registration(sf_client.get_cluster_configuration())
    _with_setting(config, "Diagnostics", "MaxDiskQuotaInMB", "2048")

    assert _start(sf_client, config) == 504  # the usual answer: the upgrade outlives the wait
    first = sf_client.get_cluster_configuration_upgrade_status()
    final = _until(
        lambda: (s := sf_client.get_cluster_configuration_upgrade_status()).is_completed and s
    )

    assert first.upgrade_state == UpgradeState.ROLLING_FORWARD_IN_PROGRESS and first.is_running
    assert first.config_version == "1.0.0"  # a configuration change is Current when done
    assert final.is_completed and final.config_version == "1.0.1"
    upgraded = sf_client.get_cluster_configuration()
    assert upgraded["clusterConfigurationVersion"] == "1.0.1"
    assert {"name": "MaxDiskQuotaInMB", "value": "2048"} in [
        p
        for s in upgraded["properties"]["fabricSettings"]
        if s["name"] == "Diagnostics"
        for p in s["parameters"]
    ]


def test_a_second_upgrade_while_one_runs_is_refused(sf_client, sf_cluster, sf_emulator):
    sf_cluster.run_other_upgrade(ticks=10)  # e.g. a code upgrade, which cannot be interrupted
    config = for_removal(sf_client.get_cluster_configuration(), "scale-1")

    with pytest.raises(UpgradeInProgressError) as refused:
        sf_client.start_cluster_configuration_upgrade(config)

    assert isinstance(refused.value, ConfigurationUpgradeRefused)
    assert refused.value.code == "FABRIC_E_CONFIG_UPGRADE_FAILED"
    assert "is already in progress and cannot be interrupted" in refused.value.message
    assert len(sf_emulator.requests_to("POST", UPGRADE)) == 1  # final, not resent


def test_an_upgrade_without_a_new_version_is_refused_once(sf_client, sf_emulator, fake_time):
    config = sf_client.get_cluster_configuration()

    with pytest.raises(ConfigurationUpgradeRefused) as refused:
        sf_client.start_cluster_configuration_upgrade(config)

    assert (refused.value.code, refused.value.status) == ("FABRIC_E_CONFIG_UPGRADE_FAILED", 500)
    assert "UpgradeWithIdenticalConfigVersionNotAllowed" in refused.value.message
    assert not isinstance(refused.value, UpgradeInProgressError)
    assert len(sf_emulator.requests_to("POST", UPGRADE)) == 1 and fake_time.sleeps == []


def test_a_rolled_back_upgrade_reads_as_failed(sf_client, sf_cluster):
    sf_cluster.upgrade_outcome = UpgradeState.ROLLING_BACK_COMPLETED
    config = for_registration(sf_client.get_cluster_configuration())
    _with_setting(config, "Diagnostics", "MaxDiskQuotaInMB", "2048")

    _start(sf_client, config)
    final = _until(
        lambda: (s := sf_client.get_cluster_configuration_upgrade_status()).has_failed and s
    )

    assert final.has_failed and not final.is_completed and not final.is_running
    assert final.config_version == "1.0.0"
    assert sf_client.get_cluster_configuration()["clusterConfigurationVersion"] == "1.0.0"


def test_scale_in_takes_a_node_from_up_to_gone(sf_client, sf_cluster, sf_emulator):
    client, name = sf_client, "scale-0"
    client.deactivate_node(name, DeactivationIntent.REMOVE_NODE)
    _until(lambda: client.get_node_info(name).is_deactivated)

    target = for_removal(client.get_cluster_configuration(), name)
    assert _start(client, target) == 504
    _until(lambda: client.get_node_info(name) is None)  # the UOS uninstalled and removed it

    assert client.get_cluster_configuration_upgrade_status().config_version == "1.0.1"
    config = client.get_cluster_configuration()
    assert name not in node_names(config) and name not in sf_cluster.uos_nodes
    assert nodes_to_be_removed(config) == [name]
    assert {n.name: n.status for n in client.get_node_info_list(status_filter="all")}[name] == (
        NodeStatus.REMOVED
    )
    posts = [r.path for r in sf_emulator.requests if r.method == "POST"]
    assert posts == [f"/Nodes/{name}/$/Deactivate", "/$/StartClusterConfigurationUpgrade"]


def test_a_second_removal_names_only_its_own_node(sf_client, sf_cluster):
    sf_cluster.start_wait_ticks = 50
    _start(sf_client, for_removal(sf_client.get_cluster_configuration(), "scale-0"))
    echoed = sf_client.get_cluster_configuration()
    assert nodes_to_be_removed(echoed) == ["scale-0"]  # left over from the first removal

    assert _start(sf_client, for_removal(echoed, "scale-1")) == 202

    [first, second] = sf_cluster.upgrades
    assert (first.removing, second.removing) == (("scale-0",), ("scale-1",))
    assert second.log[-1] == "completed"
    assert sf_client.get_node_info("scale-1") is None
    assert nodes_to_be_removed(sf_client.get_cluster_configuration()) == ["scale-1"]


def test_a_registration_after_a_removal_is_accepted(sf_client, sf_cluster):
    # The configuration echoes the removal's NodesToBeRemoved; the registration must drop it
    # (a stale name, or an empty value, is refused by the UOS).
    sf_cluster.start_wait_ticks = 50
    _start(sf_client, for_removal(sf_client.get_cluster_configuration(), "scale-0"))
    sf_cluster.add_node("scale-7", ip="10.0.2.17")

    assert _start(sf_client, for_registration(sf_client.get_cluster_configuration())) == 202

    [removal, registration] = sf_cluster.upgrades
    assert registration.adding == ("scale-7",) and registration.log[-1] == "completed"
    assert "scale-7" in sf_cluster.uos_nodes and "scale-0" not in sf_cluster.uos_nodes


def test_scale_out_registers_the_joined_node(sf_client, sf_cluster):
    sf_cluster.add_node("scale-7", ip="10.0.2.17")  # what AddNode.ps1 does
    config = sf_client.get_cluster_configuration()
    assert "scale-7" in node_names(config)  # listed at once, from the node list
    assert "scale-7" not in sf_cluster.uos_nodes

    _start(sf_client, for_registration(config))
    final = _until(
        lambda: (s := sf_client.get_cluster_configuration_upgrade_status()).config_version
        == "1.0.1"
        and s
    )

    assert final.is_completed
    assert "scale-7" in sf_cluster.uos_nodes
    assert "scale-7" in node_names(sf_client.get_cluster_configuration())
    assert sf_client.get_node_info("scale-7").status == NodeStatus.UP
