"""The cluster code (runtime) upgrade through the REST client, against the HTTPS emulator's
Cluster Manager (tests/sf_emulator/cluster_manager.py, each rule citing microsoft/service-fabric)."""

from __future__ import annotations

import pytest
from sf_rest import FabricError
from sf_rest.client import PROVISION_SECONDS
from sf_rest.code_upgrade import MonitoredCodeUpgrade

pytestmark = pytest.mark.integration  # starts the HTTPS emulator

CAB = "MicrosoftServiceFabric.11.5.0.1.cab"


def _error(call) -> tuple[int, str]:
    with pytest.raises(FabricError) as raised:
        call()
    return raised.value.status, raised.value.code


def test_provision_then_a_monitored_upgrade_rolls_forward_domain_by_domain(sf_client, sf_cluster, sf_emulator):
    sf_cluster.cm.put_in_image_store(CAB)
    sf_client.provision_cluster(CAB)
    # The gateway is given PROVISION_SECONDS for it (Image Builder opens the whole package), the
    # socket a little more; other calls keep their 30 s.
    (provision,) = sf_emulator.requests_to("POST", r"/\$/Provision")
    assert provision.query["timeout"] == str(PROVISION_SECONDS)
    sf_client.start_cluster_upgrade(MonitoredCodeUpgrade("11.5.0.1"))
    assert sf_emulator.requests_to("POST", r"/\$/Upgrade")[0].query["timeout"] != str(PROVISION_SECONDS)
    sent = sf_emulator.requests_to("POST", r"/\$/Upgrade")[0].body
    assert sent["RollingUpgradeMode"] == "Monitored" and sent["UpgradeKind"] == "Rolling"
    assert sent["MonitoringPolicy"]["FailureAction"] == "Rollback"
    assert sent["ClusterHealthPolicy"]["MaxPercentUnhealthyNodes"] == 0
    states = []
    for _ in range(20):
        progress = sf_client.get_cluster_upgrade_progress()
        states.append((progress.state, sum(s == "Completed" for _, s in progress.domains)))
        if not progress.running:
            break
    assert states[0][0] == "RollingForwardInProgress"
    assert progress.state == "RollingForwardCompleted" and progress.code_version == "11.5.0.1"
    assert [done for state, done in states if state == "RollingForwardInProgress"] == sorted(
        done for state, done in states if state == "RollingForwardInProgress")  # domain after domain


def test_the_cluster_managers_refusals(sf_client, sf_cluster):
    sf_cluster.cm.put_in_image_store(CAB)
    # Not provisioned -> FabricVersionNotFound (404); not in the image store -> Image Builder's
    # FileNotFound (404).
    assert _error(lambda: sf_client.start_cluster_upgrade(MonitoredCodeUpgrade("11.5.0.1"))) == (
        404, "FABRIC_E_FABRIC_VERSION_NOT_FOUND")
    assert _error(lambda: sf_client.provision_cluster("MicrosoftServiceFabric.11.6.0.1.cab")) == (
        404, "FABRIC_E_FILE_NOT_FOUND")
    assert sf_client.get_provisioned_code_versions("11.5.0.1") == []
    sf_client.provision_cluster(CAB)
    assert sf_client.get_provisioned_code_versions("11.5.0.1") == ["11.5.0.1"]
    assert sf_client.get_provisioned_code_versions() == ["11.4.268.1", "11.5.0.1"]
    assert _error(lambda: sf_client.provision_cluster(CAB)) == (409, "FABRIC_E_FABRIC_VERSION_ALREADY_EXISTS")
    # The version it runs -> FabricAlreadyInTargetVersion; a second start -> FabricUpgradeInProgress.
    assert _error(lambda: sf_client.start_cluster_upgrade(MonitoredCodeUpgrade("11.4.268.1"))) == (
        409, "FABRIC_E_FABRIC_ALREADY_IN_TARGET_VERSION")
    sf_client.start_cluster_upgrade(MonitoredCodeUpgrade("11.5.0.1"))
    assert _error(lambda: sf_client.start_cluster_upgrade(MonitoredCodeUpgrade("11.5.0.1"))) == (
        409, "FABRIC_E_FABRIC_UPGRADE_IN_PROGRESS")


def test_a_health_failure_rolls_back_to_the_version_it_ran(sf_client, sf_cluster):
    sf_cluster.cm.put_in_image_store(CAB)
    sf_cluster.cm.outcome = "RollingBackCompleted"
    sf_client.provision_cluster(CAB)
    sf_client.start_cluster_upgrade(MonitoredCodeUpgrade("11.5.0.1"))
    seen = set()
    for _ in range(30):
        progress = sf_client.get_cluster_upgrade_progress()
        seen.add(progress.state)
        if not progress.running:
            break
    assert "RollingBackInProgress" in seen
    assert (progress.state, progress.code_version, progress.failure_reason) == (
        "RollingBackCompleted", "11.4.268.1", "HealthCheck")


def test_an_upgrade_description_without_a_rolling_mode_is_refused_not_defaulted(sf_cluster):
    """The REST reference documents UnmonitoredAuto as the default, but the runtime's
    FabricUpgradeDescriptionWrapper starts with the mode Invalid and the Cluster Manager refuses
    that (Invalid_Upgrade_Mode2, InvalidArgument: 400). Our client always sends Monitored."""
    from tests.sf_emulator.failover_manager import EmulatedFabricError

    sf_cluster.cm.put_in_image_store(CAB)
    sf_cluster.cm.provision({"CodeFilePath": CAB})

    with pytest.raises(EmulatedFabricError) as refused:
        sf_cluster.cm.start_upgrade({"CodeVersion": "11.5.0.1", "UpgradeKind": "Rolling"}, ["UD0", "UD1", "UD2"])

    assert (refused.value.status, refused.value.code) == (400, "E_INVALIDARG") and "RollingUpgradeMode" in refused.value.message
