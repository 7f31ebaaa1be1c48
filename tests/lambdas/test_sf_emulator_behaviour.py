"""The emulator keeps to its sources: one test per behaviour that failover_manager.py,
upgrade_orchestration.py and cluster.py model (each cites the runtime source it follows),
driven over real HTTPS with sf_rest's client.

Every gateway request is one tick of the cluster's clock (routes.dispatch calls tick() before
the handler); the tick counts below follow from that and from the settings of
standard_cluster(): deactivation_ticks=2, upgrade_ticks=3, start_wait_ticks=1.
"""

from __future__ import annotations

import uuid

import pytest
import requests
from sf_rest import (
    ConfigurationUpgradeRefused,
    DeactivationIntent,
    DeactivationStatus,
    FabricError,
    NodeIsUpError,
    NodeNotFoundError,
    NodeStatus,
    UpgradeInProgressError,
    UpgradeState,
)
from sf_rest.cluster_config import for_registration, for_removal, node_names, nodes_to_be_removed

from tests.sf_emulator import SfEmulator, standard_cluster

pytestmark = pytest.mark.integration  # starts the HTTP(S) emulator

START = r"/\$/StartClusterConfigurationUpgrade"
CONFIG_UPGRADE_FAILED = "FABRIC_E_CONFIG_UPGRADE_FAILED"


# -- helpers --------------------------------------------------------------------------------


def _start(client, target) -> int:
    """Start an upgrade; 202, or 504 when the start outlived its wait (the upgrade goes on)."""
    try:
        client.start_cluster_configuration_upgrade(target)
    except FabricError as err:
        if (err.code, err.status) != ("FABRIC_E_TIMEOUT", 504):
            raise
        return 504
    return 202


def _refused(client, cluster, emulator, target, text: str) -> ConfigurationUpgradeRefused:
    """The start is refused as the UOS refuses: HTTP 500, FABRIC_E_CONFIG_UPGRADE_FAILED,
    "ValidationException: <text>"; sent once and nothing started."""
    version = cluster.upgrade_status()["ConfigVersion"]
    with pytest.raises(ConfigurationUpgradeRefused) as refused:
        client.start_cluster_configuration_upgrade(target)
    err = refused.value
    assert (err.code, err.status) == (CONFIG_UPGRADE_FAILED, 500)
    assert err.message.startswith("ValidationException: ")
    assert text in err.message
    assert not isinstance(err, UpgradeInProgressError)
    assert [r.status for r in emulator.requests_to("POST", START)] == [500]
    assert cluster.uos.pending is None and cluster.upgrades == []
    assert cluster.upgrade_status()["ConfigVersion"] == version
    return err


def _until(predicate, limit: int = 80):
    """Call predicate (each call makes requests, so ticks) until it returns something truthy."""
    for _ in range(limit):
        value = predicate()
        if value:
            return value
    raise AssertionError(f"not reached within {limit} tries")


def _setup(config, name: str, value: str):
    """Set a Setup parameter on a target (the client's helpers never write a stale one)."""
    [section] = [s for s in config["properties"]["fabricSettings"] if s["name"] == "Setup"]
    section["parameters"] = [p for p in section["parameters"] if p["name"] != name]
    section["parameters"].append({"name": name, "value": value})
    return config


# -- the Failover Manager: deactivation -------------------------------------------------------


def test_deactivation_takes_deactivation_ticks_ticks(sf_client, sf_cluster):
    sf_cluster.deactivation_ticks = 4
    sf_client.deactivate_node("scale-0", DeactivationIntent.REMOVE_NODE)

    seen = [sf_client.get_node_info("scale-0") for _ in range(4)]

    assert [n.status for n in seen] == ["Disabling"] * 3 + ["Disabled"]
    assert [n.deactivation_status for n in seen] == ["SafetyCheckInProgress"] * 3 + ["Completed"]


def test_ticks_of_the_clock_count_like_requests(sf_client, sf_cluster):
    sf_cluster.deactivation_ticks = 4
    sf_client.deactivate_node("scale-0", DeactivationIntent.REMOVE_NODE)

    sf_cluster.tick(2)
    assert sf_client.get_node_info("scale-0").status == NodeStatus.DISABLING  # third tick
    assert sf_client.get_node_info("scale-0").status == NodeStatus.DISABLED  # fourth


def test_a_stuck_safety_check_stays_in_progress(sf_client, sf_cluster):
    sf_cluster.set_stuck_in_safety_check("scale-0")
    sf_client.deactivate_node("scale-0", DeactivationIntent.REMOVE_NODE)

    seen = [sf_client.get_node_info("scale-0") for _ in range(5)]
    sf_cluster.tick(20)

    assert {(n.status, n.deactivation_status) for n in seen} == {
        ("Disabling", "SafetyCheckInProgress")
    }
    assert sf_client.get_node_info("scale-0").deactivation_status == "SafetyCheckInProgress"
    sf_cluster.set_stuck_in_safety_check("scale-0", stuck=False)  # the checks resume
    after = [sf_client.get_node_info("scale-0").status for _ in range(2)]
    assert after == [NodeStatus.DISABLING, NodeStatus.DISABLED]


def test_a_lower_intent_after_a_higher_one_is_ignored(sf_client, sf_cluster, sf_emulator):
    sf_client.deactivate_node("scale-0", DeactivationIntent.REMOVE_NODE)
    sf_client.deactivate_node("scale-0", DeactivationIntent.PAUSE)  # 200, ignored

    node = sf_client.get_node_info("scale-0")

    assert node.deactivation_intent == "RemoveNode"
    assert node.is_deactivated  # the checks were not restarted: two ticks after the first
    assert [r.status for r in sf_emulator.requests_to("POST", r"/Nodes/scale-0/\$/Deactivate")] == [
        200,
        200,
    ]


def test_a_higher_intent_replaces_a_lower_one_and_restarts_the_checks(sf_client, sf_cluster):
    sf_client.deactivate_node("scale-0", DeactivationIntent.PAUSE)
    sf_cluster.tick()
    assert sf_client.get_node_info("scale-0").is_deactivated  # two ticks

    sf_client.deactivate_node("scale-0", DeactivationIntent.REMOVE_NODE)
    node = sf_client.get_node_info("scale-0")

    assert (node.deactivation_intent, node.status) == ("RemoveNode", "Disabling")
    assert node.deactivation_status == DeactivationStatus.SAFETY_CHECK_IN_PROGRESS


def test_deactivating_an_unknown_name_succeeds_and_the_node_stays_unlisted(
    sf_client, sf_emulator
):
    sf_client.deactivate_node("ghost", DeactivationIntent.REMOVE_NODE)  # no error
    sf_client.activate_node("never-seen")  # no error either

    assert sf_client.get_node_info("ghost") is None
    assert [r.status for r in sf_emulator.requests_to("GET", "/Nodes/ghost")] == [204]
    assert "ghost" not in {n.name for n in sf_client.get_node_info_list()}
    everything = {n.name: n.status for n in sf_client.get_node_info_list(status_filter="all")}
    assert everything["ghost"] == NodeStatus.UNKNOWN  # the FM's placeholder entry
    assert "never-seen" not in everything


def test_a_down_node_deactivated_stays_down(sf_client, sf_cluster):
    sf_cluster.stop_host("scale-0")
    sf_client.deactivate_node("scale-0", DeactivationIntent.REMOVE_NODE)

    seen = [sf_client.get_node_info("scale-0") for _ in range(3)]

    assert [n.status for n in seen] == ["Down"] * 3
    assert [n.deactivation_status for n in seen] == [
        "SafetyCheckInProgress",
        "Completed",
        "Completed",
    ]
    assert not seen[-1].is_deactivated  # Completed, but never Disabled


def test_down_time_is_reported_and_the_host_can_come_back(sf_cluster, sf_client):
    now = [100.0]
    sf_cluster.clock = lambda: now[0]
    sf_cluster.stop_host("scale-1")
    now[0] += 420

    assert sf_client.get_node_info("scale-1").node_down_time_in_seconds == 420
    sf_cluster.start_host("scale-1")
    assert sf_client.get_node_info("scale-1").status == NodeStatus.UP


# -- the Failover Manager: a restart (patching) and the seeds' quorum check -------------------


def test_a_restart_deactivation_closes_the_replicas_and_survives_the_reboot(sf_client, sf_cluster):
    sf_client.deactivate_node("seed-0", DeactivationIntent.RESTART)
    seen = [sf_client.get_node_info("seed-0") for _ in range(2)]
    assert [(n.status, n.deactivation_status) for n in seen] == [("Disabling", "SafetyCheckInProgress"), ("Disabled", "Completed")]
    assert sf_cluster.node("seed-0").replicas == 0

    sf_cluster.stop_host("seed-0")  # Windows reboots
    assert sf_client.get_node_info("seed-0").status == NodeStatus.DOWN
    sf_cluster.start_host("seed-0")
    back = sf_client.get_node_info("seed-0")
    assert (back.status, back.deactivation_intent) == ("Disabled", "Restart")  # still deactivated: no replicas yet

    sf_client.activate_node("seed-0")
    up = sf_client.get_node_info("seed-0")
    assert (up.status, up.deactivation_intent, sf_cluster.node("seed-0").replicas) == ("Up", "Invalid", 4)


def test_a_rebooting_node_is_down_not_stopped_and_comes_back_as_a_new_instance(sf_client, sf_cluster):
    # IsStopped is for the StopNode API alone (GetNodeListQuerySpecification.cpp): a reboot is
    # Down with IsStopped false; the new host is a new InstanceId with a new NodeUpAt.
    now = [1_700_000_000.0]
    sf_cluster.clock = lambda: now[0]
    before = sf_client.get_node_info("scale-1").raw
    now[0] += 60
    sf_cluster.stop_host("scale-1")
    down = sf_client.get_node_info("scale-1").raw
    now[0] += 60
    sf_cluster.start_host("scale-1")
    back = sf_client.get_node_info("scale-1").raw

    assert (down["NodeStatus"], down["IsStopped"], back["IsStopped"]) == ("Down", False, False)
    assert down["NodeDownAt"] == "2023-11-14T22:14:20.000Z" and before["NodeDownAt"] == "0001-01-01T00:00:00.000Z"
    assert int(back["InstanceId"]) > int(down["InstanceId"]) == int(before["InstanceId"])
    assert back["NodeUpAt"] == "2023-11-14T22:15:20.000Z" != before["NodeUpAt"]
    assert back["Id"] == before["Id"] and set(back["Id"]) == {"Id"} and int(back["Id"]["Id"], 16)
    assert (back["CodeVersion"], back["ConfigVersion"]) == ("11.4.268.1", "1")


def test_a_host_back_before_the_failover_manager_saw_it_go_is_a_new_instance_never_down(sf_client, sf_cluster):
    # NodeCache::NodeUp with the earlier instance still up: NodeDownTime and NodeUpTime now.
    now = [1_700_000_000.0]
    sf_cluster.clock = lambda: now[0]
    sf_client.deactivate_node("scale-0", DeactivationIntent.RESTART)
    before = [sf_client.get_node_info("scale-0") for _ in range(2)][-1]  # Disabled, Completed
    now[0] += 90
    sf_cluster.restart_host("scale-0")
    back = sf_client.get_node_info("scale-0")

    assert (before.status, back.status, back.deactivation_intent) == ("Disabled", "Disabled", "Restart")
    assert int(back.raw["InstanceId"]) > int(before.raw["InstanceId"])
    assert back.raw["NodeUpAt"] == back.raw["NodeDownAt"] == "2023-11-14T22:14:50.000Z"


def test_a_seed_is_held_for_quorum_while_another_seed_is_away(sf_client, sf_cluster):
    sf_client.deactivate_node("seed-0", DeactivationIntent.RESTART)
    _until(lambda: sf_client.get_node_info("seed-0").is_deactivated)
    sf_client.deactivate_node("seed-1", DeactivationIntent.RESTART)

    held = [sf_client.get_node_info("seed-1") for _ in range(5)]

    assert {(n.status, n.deactivation_status) for n in held} == {("Disabling", "SafetyCheckInProgress")}
    assert held[-1].raw["NodeDeactivationInfo"]["PendingSafetyChecks"] == [{"SafetyCheck": {"Kind": "EnsureSeedNodeQuorum"}}]
    sf_client.activate_node("seed-0")  # seed-0 back in service: seed-1 may go
    assert _until(lambda: sf_client.get_node_info("seed-1").is_deactivated)


def test_a_seed_just_back_up_does_not_count_for_quorum_until_the_wait_passes(sf_client, sf_cluster):
    now = [1000.0]
    sf_cluster.clock = lambda: now[0]
    assert sf_cluster.seed_wait_seconds == 180  # (LeaseDuration 30 s + ArbitrationTimeout 30 s) x 3
    sf_cluster.stop_host("seed-0")
    sf_cluster.start_host("seed-0")  # Up again, but only just
    sf_client.deactivate_node("seed-1", DeactivationIntent.RESTART)

    now[0] += 179
    held = [sf_client.get_node_info("seed-1") for _ in range(5)]
    assert held[-1].raw["NodeDeactivationInfo"]["PendingSafetyChecks"] == [{"SafetyCheck": {"Kind": "EnsureSeedNodeQuorum"}}]
    now[0] += 2  # the FM lets it through by itself once seed-0 has been up for the wait
    assert _until(lambda: sf_client.get_node_info("seed-1").is_deactivated)


# -- health: what GetClusterHealth aggregates ---------------------------------------------------


def test_cluster_health_is_ok_with_every_node_up_or_deactivated(sf_client, sf_cluster):
    assert sf_client.get_cluster_health().aggregated_health_state == "Ok"
    sf_client.deactivate_node("scale-0", DeactivationIntent.RESTART)
    _until(lambda: sf_client.get_node_info("scale-0").is_deactivated)
    assert sf_client.get_cluster_health().is_ok  # a Disabled node is up: FM_NodeUp


def test_a_down_node_makes_the_cluster_error_and_a_warning_report_makes_it_warning(sf_client, sf_cluster):
    sf_cluster.stop_host("scale-1")
    health = sf_client.get_cluster_health()
    assert (health.aggregated_health_state, health.node_health_states["scale-1"]) == ("Error", "Error")
    assert "scale-1" in health.describe()
    sf_cluster.start_host("scale-1")
    sf_cluster.report_cluster_health("Warning", "replicas not ready")
    assert sf_client.get_cluster_health().describe() == "Warning: Watchdog reported Warning for Availability: replicas not ready"
    sf_cluster.report_cluster_health("Ok", "")
    assert sf_client.get_cluster_health().is_ok


# -- the Failover Manager: RemoveNodeState and what the node list shows -----------------------


@pytest.mark.parametrize("status", ["Up", "Disabling", "Disabled"])
def test_remove_node_state_of_a_node_that_is_not_down_is_node_is_up_400(
    sf_client, sf_cluster, sf_emulator, status
):
    if status != "Up":
        sf_client.deactivate_node("scale-0", DeactivationIntent.REMOVE_NODE)
        sf_cluster.tick(2 if status == "Disabled" else 0)
    assert sf_cluster.node("scale-0").status == status

    with pytest.raises(NodeIsUpError) as refused:
        sf_client.remove_node_state("scale-0")

    assert (refused.value.code, refused.value.status) == ("FABRIC_E_NODE_IS_UP", 400)
    assert sf_cluster.node("scale-0").status in (status, "Disabled")  # not Removed
    assert len(sf_emulator.requests_to("POST", r"/Nodes/scale-0/\$/RemoveNodeState")) == 1


def test_remove_node_state_of_an_unknown_name_is_node_not_found_404(sf_client, sf_emulator):
    with pytest.raises(NodeNotFoundError) as missing:
        sf_client.remove_node_state("ghost")

    assert (missing.value.code, missing.value.status) == ("FABRIC_E_NODE_NOT_FOUND", 404)
    assert len(sf_emulator.requests) == 1


def test_remove_node_state_of_a_down_node_removes_it(sf_client, sf_cluster):
    sf_cluster.add_node("scale-7", ip="10.0.2.17")  # by AddNode.ps1: the UOS does not know it
    sf_cluster.stop_host("scale-7")

    sf_client.remove_node_state("scale-7")
    sf_client.remove_node_state("scale-7")  # a repeat succeeds

    assert sf_client.get_node_info("scale-7") is None  # HTTP 204
    assert "scale-7" not in node_names(sf_client.get_cluster_configuration())
    assert "scale-7" not in {n.name for n in sf_client.get_node_info_list()}
    everything = {n.name: n.status for n in sf_client.get_node_info_list(status_filter="all")}
    assert everything["scale-7"] == NodeStatus.REMOVED


def test_a_removed_node_the_uos_still_lists_answers_200_invalid(sf_client, sf_cluster):
    sf_cluster.stop_host("scale-0")
    sf_client.remove_node_state("scale-0")
    assert "scale-0" in sf_cluster.uos_nodes  # still in the cluster manifest

    node = sf_client.get_node_info("scale-0")

    assert node is not None and node.status == NodeStatus.INVALID
    listed = {n.name: n.status for n in sf_client.get_node_info_list()}
    assert listed["scale-0"] == NodeStatus.INVALID  # the manifest's row
    everything = {n.name: n.status for n in sf_client.get_node_info_list(status_filter="all")}
    assert everything["scale-0"] == NodeStatus.REMOVED  # the FM's own row, no Invalid twin


def test_cluster_configuration_lists_a_joined_node_and_leaves_out_invalid_rows(
    sf_client, sf_cluster
):
    sf_cluster.add_node("scale-7", ip="10.0.2.17")  # FM only (in_config=False)
    sf_cluster.stop_host("scale-0")
    sf_client.remove_node_state("scale-0")  # its row turns Invalid

    config = sf_client.get_cluster_configuration()

    assert node_names(config) == ["scale-1", "scale-7", "seed-0", "seed-1", "seed-2"]
    [entry] = [n for n in config["nodes"] if n["nodeName"] == "scale-7"]
    assert entry == {
        "nodeName": "scale-7",
        "iPAddress": "10.0.2.17",
        "nodeTypeRef": "ScalingNodeType",
        "faultDomain": "fd:/aws/az0",
        "upgradeDomain": "UD0",
    }
    assert "scale-7" not in sf_cluster.uos_nodes and "scale-0" in sf_cluster.uos_nodes


def test_the_upgrade_status_shows_the_current_version(sf_client):
    status = sf_client.get_cluster_configuration_upgrade_status()

    assert status.config_version == "1.0.0"
    assert (status.upgrade_state, status.progress_status) == ("RollingForwardCompleted", 1)
    assert status.details == "" and status.is_completed


# -- the UOS: validation of a start -----------------------------------------------------------


def test_a_target_with_the_same_version_is_refused(sf_client, sf_cluster, sf_emulator):
    target = sf_client.get_cluster_configuration()

    _refused(
        sf_client,
        sf_cluster,
        sf_emulator,
        target,
        "ValidationException: UpgradeWithIdenticalConfigVersionNotAllowed",
    )


@pytest.mark.parametrize(
    ("dropped", "listed"),
    [
        ("scale-0", "old-node,scale-0"),  # the name from the last removal carried on (#1469)
        ("scale-0", "scale-0,scale-1"),  # also names a node the target keeps
        (None, ""),  # an empty value is one empty name
        (None, "scale-0"),
    ],
)
def test_a_stale_nodes_to_be_removed_name_is_refused(
    sf_client, sf_cluster, sf_emulator, dropped, listed
):
    config = sf_client.get_cluster_configuration()
    target = for_removal(config, dropped) if dropped else for_registration(config)
    _setup(target, "NodesToBeRemoved", listed)

    _refused(
        sf_client,
        sf_cluster,
        sf_emulator,
        target,
        "NodesToBeRemoved parameter contains inconsistent information.",
    )


@pytest.mark.parametrize("listed", [None, "scale-0"])
def test_a_dropped_node_not_in_nodes_to_be_removed_is_refused(
    sf_client, sf_cluster, sf_emulator, listed
):
    target = for_registration(sf_client.get_cluster_configuration())
    target["nodes"] = [n for n in target["nodes"] if n["nodeName"] not in ("scale-0", "scale-1")]
    if listed is not None:
        _setup(target, "NodesToBeRemoved", listed)  # one of the two dropped nodes

    _refused(
        sf_client,
        sf_cluster,
        sf_emulator,
        target,
        "Nodes have been removed from the JSON config but NodesToBeRemoved parameter does not "
        "contain NodeName for all removed nodes.",
    )


def test_adding_and_removing_in_one_upgrade_is_refused(sf_client, sf_cluster, sf_emulator):
    target = for_removal(sf_client.get_cluster_configuration(), "scale-0")
    target["nodes"].append({**target["nodes"][-1], "nodeName": "scale-7", "iPAddress": "10.0.2.17"})

    _refused(
        sf_client,
        sf_cluster,
        sf_emulator,
        target,
        "Nodes cannot be added and removed in the same upgrade.",
    )


def test_a_new_node_not_joined_first_is_refused(sf_client, sf_cluster, sf_emulator):
    target = for_registration(sf_client.get_cluster_configuration())
    target["nodes"].append({**target["nodes"][-1], "nodeName": "scale-7", "iPAddress": "10.0.2.17"})

    _refused(
        sf_client,
        sf_cluster,
        sf_emulator,
        target,
        "Please ensure all newly added nodes are first added using AddNode API",
    )


@pytest.mark.parametrize(
    ("edit", "text"),
    [
        # A removal while a joined node is not yet registered: one node short.
        (
            lambda config: for_removal(config, "scale-0"),
            "Nodes present in the cluster must exactly match the nodes in JSON config",
        ),
        # The joined node left out of the registration.
        (
            lambda config: {
                **for_registration(config),
                "nodes": [n for n in config["nodes"] if n["nodeName"] != "scale-7"],
            },
            "Nodes present in the cluster must exactly match the nodes in JSON config",
        ),
        # As many nodes as listed, but one the cluster does not list.
        (
            lambda config: {
                **for_registration(config),
                "nodes": [
                    {**n, "nodeName": "scale-8"} if n["nodeName"] == "scale-7" else n
                    for n in config["nodes"]
                ],
            },
            "The new JSON config contains some newly added nodes which are not part of the "
            "cluster.",
        ),
    ],
    ids=["removal", "joined-node-left-out", "unknown-node"],
)
def test_with_a_joined_node_the_target_must_list_exactly_the_listed_nodes(
    sf_client, sf_cluster, sf_emulator, edit, text
):
    sf_cluster.add_node("scale-7", ip="10.0.2.17")  # AddNode.ps1: FM only

    _refused(sf_client, sf_cluster, sf_emulator, edit(sf_client.get_cluster_configuration()), text)


def test_removing_a_node_whose_machine_is_unreachable_is_refused(
    sf_client, sf_cluster, sf_emulator
):
    sf_cluster.terminate_machine("scale-0")

    _refused(
        sf_client,
        sf_cluster,
        sf_emulator,
        for_removal(sf_client.get_cluster_configuration(), "scale-0"),
        "Required ports on the node to be removed are not reacheable.",
    )


def test_removing_a_down_node_whose_machine_answers_is_accepted(sf_client, sf_cluster):
    sf_cluster.stop_host("scale-0")  # Fabric stopped; the machine still answers on 445

    assert _start(sf_client, for_removal(sf_client.get_cluster_configuration(), "scale-0")) == 504
    assert sf_cluster.uos.pending is not None


@pytest.mark.parametrize(("field", "value"), [("iPAddress", "10.0.2.99"), ("nodeTypeRef", "X")])
def test_changing_an_existing_nodes_address_or_type_is_refused(
    sf_client, sf_cluster, sf_emulator, field, value
):
    target = for_registration(sf_client.get_cluster_configuration())
    [entry] = [n for n in target["nodes"] if n["nodeName"] == "scale-0"]
    entry[field] = value

    _refused(
        sf_client,
        sf_cluster,
        sf_emulator,
        target,
        "ValidationException: NodeIPNodeTypeRefCantBeChanged: scale-0",
    )


def test_changing_the_cluster_name_is_refused(sf_client, sf_cluster, sf_emulator):
    target = {**for_registration(sf_client.get_cluster_configuration()), "name": "other"}

    _refused(
        sf_client, sf_cluster, sf_emulator, target, "ValidationException: ClusterNameCantBeChanged"
    )


def test_a_start_during_an_uninterruptible_upgrade_is_already_in_progress(
    sf_client, sf_cluster, sf_emulator
):
    sf_cluster.run_other_upgrade(ticks=5)
    target = for_removal(sf_client.get_cluster_configuration(), "scale-0")  # tick 1

    with pytest.raises(UpgradeInProgressError) as refused:  # tick 2
        sf_client.start_cluster_configuration_upgrade(target)

    err = refused.value
    assert isinstance(err, ConfigurationUpgradeRefused)
    assert (err.code, err.status) == (CONFIG_UPGRADE_FAILED, 500)
    assert err.message == (
        "FabricException: Cluster configuration upgrade of type "
        "StandAloneSimpleClusterUpgradeState is already in progress and cannot be interrupted."
    )
    assert len(sf_emulator.requests_to("POST", START)) == 1  # not resent
    status = sf_client.get_cluster_configuration_upgrade_status()  # tick 3
    assert status.is_running and status.config_version == "1.0.0"
    sf_cluster.tick(2)  # the other upgrade ends at its fifth tick
    assert _start(sf_client, target) == 504  # accepted now


# -- the UOS: the start waits for the orchestration -------------------------------------------


@pytest.mark.parametrize(
    ("start_wait_ticks", "answer"),
    [(1, 504), (5, 504), (6, 202), (50, 202)],
    # A removal needs 6 ticks: deactivate, 2 of safety checks (the second starts the manifest
    # upgrade), 3 of manifest upgrade.
)
def test_the_start_answers_only_when_the_orchestration_ends_within_its_wait(
    sf_client, sf_cluster, sf_emulator, start_wait_ticks, answer
):
    sf_cluster.start_wait_ticks = start_wait_ticks
    target = for_removal(sf_client.get_cluster_configuration(), "scale-0")

    assert _start(sf_client, target) == answer

    [post] = sf_emulator.requests_to("POST", START)  # the 504 is not resent
    assert post.status == answer
    if answer == 202:
        [removal] = sf_cluster.upgrades
        assert removal.log[-1] == "completed"
        assert sf_client.get_node_info("scale-0") is None
    else:
        assert sf_cluster.upgrades == [] and sf_cluster.uos.pending is not None
        _until(lambda: sf_client.get_node_info("scale-0") is None)  # it goes on without us
        [removal] = sf_cluster.upgrades
        assert removal.log == ["wait_disabled", "upgrade", "completed"]
        assert len(sf_emulator.requests_to("POST", START)) == 1


# -- the UOS: removal and registration timelines ----------------------------------------------


def test_removal_timeline(sf_client, sf_cluster):
    target = for_removal(sf_client.get_cluster_configuration(), "scale-1")

    assert _start(sf_client, target) == 504  # its wait tick deactivated the node
    first = sf_client.get_cluster_configuration_upgrade_status()
    node = sf_client.get_node_info("scale-1")  # this tick finds it Disabled: manifest upgrade
    during = []
    while not during or during[-1].is_running:
        during.append(sf_client.get_cluster_configuration_upgrade_status())
        assert len(during) < 20

    # The target is Current at once, while the node is still listed and the Cluster Manager
    # still reports the last manifest upgrade.
    assert first.config_version == "1.0.1"
    assert (first.upgrade_state, first.progress_status) == ("RollingForwardCompleted", 1)
    assert node is not None and node.status == NodeStatus.DISABLED
    assert node.deactivation_intent == "RemoveNode"
    # The manifest upgrade: ProgressStatus one higher, for upgrade_ticks ticks.
    assert [(s.upgrade_state, s.progress_status) for s in during] == [
        ("RollingForwardInProgress", 2),
        ("RollingForwardInProgress", 2),
        ("RollingForwardCompleted", 2),
    ]
    assert {s.config_version for s in during} == {"1.0.1"} and during[-1].details == ""
    # Completed: the machine uninstalled Fabric and the UOS removed the node's state.
    assert sf_client.get_node_info("scale-1") is None  # 204
    everything = {n.name: n.status for n in sf_client.get_node_info_list(status_filter="all")}
    assert everything["scale-1"] == NodeStatus.REMOVED
    config = sf_client.get_cluster_configuration()
    assert "scale-1" not in node_names(config) and "scale-1" not in sf_cluster.uos_nodes
    assert nodes_to_be_removed(config) == ["scale-1"]  # echoed from the last upgrade
    assert not sf_cluster.node("scale-1").host_running


def test_a_removal_without_the_uos_remove_node_state_leaves_the_node_down(
    sf_client, sf_cluster
):
    sf_cluster.removes_node_state = False  # UO.RemoveNodeStateAsync failed (best effort)
    sf_cluster.start_wait_ticks = 50

    assert _start(sf_client, for_removal(sf_client.get_cluster_configuration(), "scale-1")) == 202

    node = sf_client.get_node_info("scale-1")
    assert node is not None and node.status == NodeStatus.DOWN  # out of the manifest, not removed
    assert "scale-1" not in sf_cluster.uos_nodes
    sf_client.remove_node_state("scale-1")  # the clean-up left to us
    assert sf_client.get_node_info("scale-1") is None


def test_a_down_node_never_deactivates_and_the_removal_stops_silently(sf_client, sf_cluster):
    sf_cluster.uos.deactivation_timeout_ticks = 5
    sf_cluster.stop_host("scale-0")

    assert _start(sf_client, for_removal(sf_client.get_cluster_configuration(), "scale-0")) == 504
    sf_cluster.tick(5)
    status = sf_client.get_cluster_configuration_upgrade_status()

    [removal] = sf_cluster.upgrades
    assert removal.log == ["wait_disabled", "timed out waiting for nodes to be deactivated"]
    assert (status.upgrade_state, status.progress_status, status.details) == (
        "RollingForwardCompleted",
        1,  # no manifest upgrade ran
        "",  # and nothing says why
    )
    assert status.config_version == "1.0.1"  # yet the target is Current
    assert "scale-0" in sf_cluster.uos_nodes
    assert sf_client.get_node_info("scale-0").status == NodeStatus.DOWN


def test_a_removal_whose_node_cannot_be_found_ends_silently(sf_client, sf_cluster):
    sf_cluster.start_wait_ticks = 0  # answer before the orchestration's first step
    assert _start(sf_client, for_removal(sf_client.get_cluster_configuration(), "scale-0")) == 504
    # Model the UOS's lookup (GetNodeListAsync(name)) finding nothing: hide the node from the
    # FM's list and the manifest's row from the query for one tick, then put both back. The UOS
    # topology itself is left alone.
    node = sf_cluster.nodes.pop("scale-0")
    manifest_nodes = sf_cluster.fm.manifest_nodes
    sf_cluster.fm.manifest_nodes = lambda: {
        name: entry for name, entry in sf_cluster.uos.topology.items() if name != "scale-0"
    }
    try:
        sf_cluster.tick()
    finally:
        sf_cluster.nodes["scale-0"] = node
        sf_cluster.fm.manifest_nodes = manifest_nodes

    status = sf_client.get_cluster_configuration_upgrade_status()

    [removal] = sf_cluster.upgrades
    assert removal.log == [
        "Remove node operations were not performed succesfully. Aborting upgrade."
    ]
    assert sf_cluster.uos.pending is None
    assert (status.upgrade_state, status.progress_status, status.details) == (
        "RollingForwardCompleted",
        1,
        "",
    )
    assert "scale-0" in sf_cluster.uos_nodes  # nothing removed
    scale_0 = sf_client.get_node_info("scale-0")
    assert (scale_0.status, scale_0.deactivation_intent) == ("Up", "Invalid")  # not deactivated


def test_a_rolled_back_removal_leaves_the_status_rolling_back_completed(sf_client, sf_cluster):
    sf_cluster.upgrade_outcome = UpgradeState.ROLLING_BACK_COMPLETED

    assert _start(sf_client, for_removal(sf_client.get_cluster_configuration(), "scale-1")) == 504
    def ended():
        status = sf_client.get_cluster_configuration_upgrade_status()
        return status if sf_cluster.upgrades else None

    final = _until(ended)

    assert final.upgrade_state == UpgradeState.ROLLING_BACK_COMPLETED and final.has_failed
    assert final.details == "" and final.progress_status == 2
    assert sf_cluster.upgrades[-1].log[-1] == "RollingBackCompleted"
    node = sf_client.get_node_info("scale-1")
    assert node is not None and node.status == NodeStatus.DISABLED  # not uninstalled
    again = sf_client.get_cluster_configuration_upgrade_status()
    assert again.upgrade_state == UpgradeState.ROLLING_BACK_COMPLETED  # and it stays so


def test_registration_timeline(sf_client, sf_cluster):
    sf_cluster.add_node("scale-7", ip="10.0.2.17")  # AddNode.ps1
    target = for_registration(sf_client.get_cluster_configuration())

    assert _start(sf_client, target) == 504
    assert "scale-7" in sf_cluster.uos_nodes  # the topology is the target's at once
    during = []
    while not during or during[-1].is_running:
        during.append(sf_client.get_cluster_configuration_upgrade_status())
        assert len(during) < 20

    assert [(s.upgrade_state, s.progress_status, s.config_version) for s in during] == [
        ("RollingForwardInProgress", 2, "1.0.0"),  # Current only at completion
        ("RollingForwardCompleted", 2, "1.0.1"),
    ]
    [registration] = sf_cluster.upgrades
    assert registration.adding == ("scale-7",) and registration.log == ["upgrade", "completed"]
    assert sf_client.get_node_info("scale-7").status == NodeStatus.UP


# -- the image store: upload sessions (image_store.py) and the provision that reads them ------

CAB = "MicrosoftServiceFabric.11.5.0.1.cab"
SESSION = "6f0c1a52-8d3e-4c1b-9a57-2b1d4e0f9c11"


@pytest.fixture
def plain():
    """The gateway over plain HTTP, for requests the client never sends (bad headers, no session)."""
    with SfEmulator(standard_cluster()) as emulator:
        yield emulator


def _put(emulator, data: bytes, content_range: str | None, *, path: str = CAB, session: str | None = SESSION):
    query = {"api-version": "6.0", **({"session-id": session} if session is not None else {})}
    headers = {"Content-Range": content_range} if content_range is not None else {}
    return requests.put(f"{emulator.endpoint}/ImageStore/{path}/$/UploadChunk", params=query, data=data,
                        headers=headers, timeout=5)


def _code(answer) -> tuple[int, str]:
    return answer.status_code, answer.json()["Error"]["Code"] if answer.content else ""


def _session(emulator, session: str = SESSION):
    answer = requests.get(f"{emulator.endpoint}/ImageStore/$/GetUploadSession",
                          params={"api-version": "6.0", "session-id": session}, timeout=5)
    return answer.status_code, (answer.json() if answer.content else None)


def _commit(emulator, session: str = SESSION):
    return requests.post(f"{emulator.endpoint}/ImageStore/$/CommitUploadSession",
                         params={"api-version": "6.0", "session-id": session}, timeout=5)


def test_chunks_in_any_order_make_the_file_at_commit_and_the_session_lists_what_is_missing(plain):
    assert _put(plain, b"56789", "bytes 5-9/10").status_code == 200  # out of order is fine
    status, document = _session(plain)
    assert status == 200 and document["UploadSessions"][0] == {
        "StoreRelativePath": CAB, "SessionId": SESSION, "ModifiedDate": document["UploadSessions"][0]["ModifiedDate"],
        "FileSize": "10", "ExpectedRanges": [{"StartPosition": "0", "EndPosition": "4"}]}
    assert _code(_commit(plain)) == (400, "E_INVALIDARG")  # NIS: "Incompleted session"
    assert _put(plain, b"01234", "bytes 0-4/10").status_code == 200
    assert _session(plain)[1]["UploadSessions"][0]["ExpectedRanges"] == []
    assert _commit(plain).status_code == 200
    assert _commit(plain).status_code == 200  # committed already: success again
    assert plain.cluster.image_store.file(CAB) == b"0123456789"


def test_a_chunk_sent_twice_or_overlapping_is_range_not_satisfiable(plain):
    assert _put(plain, b"01234", "bytes 0-4/10").status_code == 200
    assert _code(_put(plain, b"01234", "bytes 0-4/10")) == (400, "FABRIC_E_UPLOAD_SESSION_RANGE_NOT_SATISFIABLE")
    assert _code(_put(plain, b"456", "bytes 4-6/10")) == (400, "FABRIC_E_UPLOAD_SESSION_RANGE_NOT_SATISFIABLE")
    assert _session(plain)[1]["UploadSessions"][0]["ExpectedRanges"] == [{"StartPosition": "5", "EndPosition": "9"}]


@pytest.mark.parametrize("content_range", ["bytes 0-4", "bytes 0-4/ten", "bytes a-4/10", "bytes 5-4/10", "bytes 0-11/10"])
def test_a_content_range_the_gateway_cannot_read_is_range_not_satisfiable(plain, content_range):
    assert _code(_put(plain, b"01234", content_range)) == (400, "FABRIC_E_UPLOAD_SESSION_RANGE_NOT_SATISFIABLE")
    assert _session(plain) == (204, None)  # nothing was created


def test_without_content_range_the_chunk_is_0_0_of_0_bytes(plain):
    # ISH leaves start, end and size at 0: a new session of 0 bytes, which never commits.
    assert _put(plain, b"x", None).status_code == 200
    assert _session(plain)[1]["UploadSessions"][0]["FileSize"] == "0"
    assert _code(_commit(plain)) == (400, "E_INVALIDARG")
    # ... and against a session of another size, "Session file size mismatch".
    other = "0e8e8d4c-6b9b-4a55-a1b3-5f6e2c3d4b5a"
    assert _put(plain, b"01234", "bytes 0-4/10", session=other).status_code == 200
    assert _code(_put(plain, b"5", None, session=other)) == (400, "E_INVALIDARG")


def test_the_session_id_must_be_a_guid_and_belongs_to_one_path(plain):
    assert _code(_put(plain, b"0", "bytes 0-0/1", session=None)) == (400, "FABRIC_E_INVALID_UPLOAD_SESSION_ID")
    assert _code(_put(plain, b"0", "bytes 0-0/1", session="nope")) == (400, "FABRIC_E_INVALID_UPLOAD_SESSION_ID")
    assert _code(_put(plain, b"0", "bytes 0-0/1", session=str(uuid.UUID(int=0)))) == (
        400, "FABRIC_E_INVALID_UPLOAD_SESSION_ID")
    assert _code(_commit(plain, "nope")) == (400, "E_INVALIDARG")
    assert _put(plain, b"01234", "bytes 0-4/10").status_code == 200
    assert _code(_put(plain, b"56789", "bytes 5-9/10", path="other.cab")) == (409, "FABRIC_E_UPLOAD_SESSION_ID_CONFLICT")


def test_a_chunk_of_the_wrong_length_is_taken_and_the_commit_refuses_the_merged_size(plain):
    assert _put(plain, b"0123", "bytes 0-4/10").status_code == 200  # 4 bytes for a range of 5
    assert _put(plain, b"56789", "bytes 5-9/10").status_code == 200
    assert _code(_commit(plain)) == (400, "E_INVALIDARG")
    assert plain.cluster.image_store.file(CAB) is None


def test_a_commit_replaces_a_file_at_the_path(plain):
    plain.cluster.image_store.put(CAB, b"old")
    assert _put(plain, b"new", "bytes 0-2/3").status_code == 200
    assert _commit(plain).status_code == 200
    assert plain.cluster.image_store.file(CAB) == b"new"


def test_a_session_is_dropped_30_minutes_after_its_last_chunk_and_a_delete_drops_it_at_once(plain):
    now = [1000.0]
    plain.cluster.clock = lambda: now[0]
    assert _put(plain, b"01234", "bytes 0-4/10").status_code == 200
    now[0] += 29 * 60
    assert _put(plain, b"56", "bytes 5-6/10").status_code == 200  # the last chunk restarts the 30 minutes
    now[0] += 29 * 60
    assert _session(plain)[0] == 200
    now[0] += 60
    assert _session(plain) == (204, None)
    assert _put(plain, b"01234", "bytes 0-4/10").status_code == 200  # the same id starts afresh
    delete = f"{plain.endpoint}/ImageStore/$/DeleteUploadSession"
    assert requests.delete(delete, params={"api-version": "6.0", "session-id": SESSION}, timeout=5).status_code == 200
    assert _session(plain) == (204, None)
    assert _code(requests.delete(delete, params={"api-version": "6.0", "session-id": SESSION}, timeout=5)) == (
        404, "NotFound")


def test_provision_reads_the_package_from_the_image_store(plain):
    def provision():
        return requests.post(f"{plain.endpoint}/$/Provision", params={"api-version": "6.0"},
                             json={"CodeFilePath": CAB}, timeout=5)

    def provisioned(**filters):
        return requests.get(f"{plain.endpoint}/$/GetProvisionedCodeVersions", params={"api-version": "6.0", **filters},
                            timeout=5).json()

    assert _code(provision()) == (404, "FABRIC_E_FILE_NOT_FOUND")  # Image Builder's answer for a missing file
    assert provisioned() == [{"CodeVersion": "11.4.268.1"}]
    plain.cluster.image_store.put(CAB, b"MSCF")
    assert provision().status_code == 200
    assert provisioned() == [{"CodeVersion": "11.4.268.1"}, {"CodeVersion": "11.5.0.1"}]
    assert provisioned(CodeVersion="11.5.0.1") == [{"CodeVersion": "11.5.0.1"}]
    assert provisioned(CodeVersion="11.5.0.2") == []


# -- the gateway ------------------------------------------------------------------------------


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


def test_a_url_the_nodes_handler_does_not_list_is_a_bad_request_as_the_gateway_answers_it():
    """Restart is a real node URL the emulator does not model (loud, above); Reboot is no URL at all:
    the handler's URI parse fails into InvalidArgument, 400 E_INVALIDARG (RequestHandlerBase
    HandlerAsyncOperation::OnStart; HttpUtil::ErrorCodeToHttpStatus)."""
    with SfEmulator(standard_cluster()) as emulator:
        answer = requests.post(emulator.endpoint + "/Nodes/seed-0/$/Reboot?api-version=6.0", timeout=5)

    assert answer.status_code == 400
    assert answer.json()["Error"]["Code"] == "E_INVALIDARG"
