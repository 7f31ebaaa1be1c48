"""Scale-in steps against the HTTPS gateway emulator: a node goes from Up to out of the cluster,
in the order Microsoft documents for standalone clusters (deactivate, wait for Disabled, then the
removal upgrade while the machine runs); the host is stopped only to clean up after an upgrade
that left the node listed."""

from __future__ import annotations

import uuid

import pytest
from node_lifecycle import (
    AmbiguousNode,
    CommandStatus,
    ConfigurationUpgradeFailed,
    FabricHostStopFailed,
    InstanceInfo,
    LifecycleHook,
    NodeInWrongState,
    NodeReactivated,
    Outcome,
    SeedNodeRefused,
    WaitTimedOut,
    check_node_removed,
    deactivate_node,
    poll_configuration_upgrade,
    poll_deactivation,
    poll_node_down,
    refuse_seed_node,
    remove_node_state,
    resolve_node,
    start_configuration_removal,
    stop_fabric_host,
)
from node_lifecycle.fabric_host import SsmFabricHost
from node_lifecycle.instances import Ec2InstanceDirectory
from sf_rest.cluster_config import node_names, nodes_to_be_removed

from tests.sf_emulator import DOCUMENTED_INTENTS

pytestmark = pytest.mark.integration  # starts the HTTPS emulator

START = "/$/StartClusterConfigurationUpgrade"


def posts(emulator) -> list[str]:
    """Every write the gateway saw (all of them are POSTs)."""
    return [r.path for r in emulator.requests if r.method == "POST"]


def hook_for(instance_id: str) -> LifecycleHook:
    return LifecycleHook("sf-scaling", "drain-on-terminate", instance_id, str(uuid.uuid4()))


def tagged(instance_id: str, node: str, ip: str = "10.0.2.99") -> InstanceInfo:
    return InstanceInfo(instance_id, "running", ip, {"sf:nodename": node})


def drain(scale_in, client, machines, instances, lifecycle, instance_id: str, node: str, **kw):
    return scale_in(
        client,
        instances=instances(tagged(instance_id, node)),
        host=machines({instance_id: node}, **kw),
        lifecycle=lifecycle,
        hook=hook_for(instance_id),
    )


def assert_removed(client, cluster, name: str) -> None:
    """Out of the node list (204, not just Down), the configuration and the UOS's own list,
    and named alone in the NodesToBeRemoved of the upgrade that removed it."""
    config = client.get_cluster_configuration()
    assert client.get_node_info(name) is None
    assert name not in node_names(config)
    assert name not in cluster.uos_nodes
    assert nodes_to_be_removed(config) == [name]


def test_a_full_drain_removes_the_node_by_upgrade_while_its_machine_runs(
    sf_client, sf_cluster, sf_emulator, scale_in, machines, instances, launch, ec2, ssm,
    recording_lifecycle,
):
    instance = launch(node_name="scale-0")
    hook = hook_for(instance["InstanceId"])
    host = machines({instance["InstanceId"]: "scale-0"}, inner=SsmFabricHost(ssm))

    states = scale_in(
        sf_client,
        instances=Ec2InstanceDirectory(ec2),
        host=host,
        lifecycle=recording_lifecycle,
        hook=hook,
    )

    assert states["resolve"]["node_name"] == "scale-0"
    assert states["deactivate"]["intent"] == "RemoveNode"
    assert states["configuration"]["outcome"] == Outcome.REQUESTED
    assert states["removal"]["removed"] is True
    assert_removed(sf_client, sf_cluster, "scale-0")
    writes = posts(sf_emulator)
    assert writes == ["/Nodes/scale-0/$/Deactivate", START]  # no RemoveNodeState, no stop
    assert host.sent == [] and ssm.list_commands()["Commands"] == []
    [removal] = sf_cluster.upgrades
    assert removal.removing == ("scale-0",) and removal.log[-1] == "completed"
    # A heartbeat on every poll, then one CONTINUE.
    assert recording_lifecycle.heartbeats >= 3
    assert recording_lifecycle.results == ["CONTINUE"]
    assert {n.name: n.status for n in sf_client.get_node_info_list()} == {
        "scale-1": "Up",
        "seed-0": "Up",
        "seed-1": "Up",
        "seed-2": "Up",
    }


def test_the_node_is_still_disabled_and_its_machine_running_when_the_upgrade_starts(
    sf_client, sf_cluster, scale_in, machines, instances, recording_lifecycle
):
    seen = {}
    start = sf_cluster.start_upgrade

    def watched(body):
        node = sf_cluster.node("scale-0")
        seen["at start"] = (node.status, node.host_running, node.machine_reachable)
        return start(body)

    sf_cluster.start_upgrade = watched
    drain(scale_in, sf_client, machines, instances, recording_lifecycle, "i-0aaa", "scale-0")

    assert seen["at start"] == ("Disabled", True, True)


def test_two_drains_in_a_row_both_complete_naming_only_their_own_node(
    sf_client, sf_cluster, scale_in, machines, instances, recording_lifecycle, recording
):
    drain(scale_in, sf_client, machines, instances, recording_lifecycle, "i-0aaa", "scale-0")
    second = recording()
    drain(scale_in, sf_client, machines, instances, second, "i-0bbb", "scale-1")

    assert_removed(sf_client, sf_cluster, "scale-1")
    assert "scale-0" not in sf_cluster.uos_nodes
    assert [u.removing for u in sf_cluster.upgrades] == [("scale-0",), ("scale-1",)]
    assert [u.log[-1] for u in sf_cluster.upgrades] == ["completed", "completed"]
    assert second.results == ["CONTINUE"]


def test_a_removal_is_not_done_while_the_uos_has_yet_to_upgrade_though_its_version_shows(
    sf_client, sf_cluster, sf_emulator, scale_in, machines, instances, recording_lifecycle
):
    """The UOS makes a removal's target version current at once; the status still shows the
    previous manifest upgrade, completed, until the UOS gets to its own."""
    sf_cluster.uos.lookup_ticks = 8

    states = drain(
        scale_in, sf_client, machines, instances, recording_lifecycle, "i-0aaa", "scale-0"
    )

    assert states["removal"]["removed"] is True and "stop_host" not in states
    assert posts(sf_emulator) == ["/Nodes/scale-0/$/Deactivate", START]
    assert_removed(sf_client, sf_cluster, "scale-0")


def test_a_drain_waits_out_an_upgrade_that_cannot_be_interrupted(
    sf_client, sf_cluster, sf_emulator, scale_in, machines, instances, recording_lifecycle
):
    sf_cluster.run_other_upgrade(ticks=20)

    states = drain(
        scale_in, sf_client, machines, instances, recording_lifecycle, "i-0aaa", "scale-0"
    )

    assert states["waited_for_other_upgrade"]["done"] is True
    assert_removed(sf_client, sf_cluster, "scale-0")
    # Ours was started once, after the other one ended.
    assert len(sf_emulator.requests_to("POST", r"/\$/StartClusterConfigurationUpgrade")) == 1
    assert [u.log[-1] for u in sf_cluster.upgrades] == ["RollingForwardCompleted", "completed"]


def test_a_start_refused_as_in_progress_waits_and_starts_again(
    sf_client, sf_cluster, sf_emulator
):
    deactivate_node(sf_client, "scale-0")
    sf_cluster.tick(3)
    sf_emulator.inject_error(
        500,
        "FABRIC_E_CONFIG_UPGRADE_FAILED",
        path="StartClusterConfigurationUpgrade",
        message="FabricException: Cluster configuration upgrade of type "
        "StandAloneSimpleClusterUpgradeState is already in progress and cannot be interrupted.",
    )

    first = start_configuration_removal(sf_client, "scale-0", now=0)
    second = start_configuration_removal(sf_client, "scale-0", now=1)

    assert first.outcome == Outcome.WAIT_FOR_UPGRADE and "already in progress" in first.detail
    assert second.outcome == Outcome.REQUESTED


@pytest.mark.parametrize("start_wait_ticks", [1, 50], ids=["start-times-out", "start-answers"])
def test_a_removal_completes_whether_or_not_the_start_outlives_the_gateway_timeout(
    sf_client, sf_cluster, sf_emulator, scale_in, machines, instances, recording_lifecycle,
    start_wait_ticks,
):
    sf_cluster.start_wait_ticks = start_wait_ticks

    states = drain(
        scale_in, sf_client, machines, instances, recording_lifecycle, "i-0aaa", "scale-0"
    )

    assert states["configuration"]["confirmed"] is (start_wait_ticks == 50)
    assert_removed(sf_client, sf_cluster, "scale-0")
    starts = [r.status for r in sf_emulator.requests_to("POST", r"/\$/StartClusterConfigurationUpgrade")]
    assert starts == ([504] if start_wait_ticks == 1 else [202])  # never resent


def test_a_deactivation_stuck_in_safety_checks_times_out_with_nothing_removed(
    sf_client, sf_cluster, sf_emulator, scale_in, machines, instances, recording_lifecycle
):
    sf_cluster.set_stuck_in_safety_check("scale-0")

    with pytest.raises(WaitTimedOut):
        drain(scale_in, sf_client, machines, instances, recording_lifecycle, "i-0aaa", "scale-0")

    node = sf_client.get_node_info("scale-0")
    assert (node.status, node.deactivation_status) == ("Disabling", "SafetyCheckInProgress")
    assert posts(sf_emulator) == ["/Nodes/scale-0/$/Deactivate"]
    assert "scale-0" in sf_cluster.uos_nodes and "scale-0" in node_names(sf_cluster.config)
    assert recording_lifecycle.results == []  # left to an operator, not completed
    with pytest.raises(NodeInWrongState, match="wait for Disabled first"):
        start_configuration_removal(sf_client, "scale-0", now=0)


def test_the_clean_up_removes_the_state_of_a_node_the_upgrade_left_down(
    sf_client, sf_cluster, sf_emulator, scale_in, machines, instances, recording_lifecycle
):
    sf_cluster.removes_node_state = False  # the UOS's own RemoveNodeState is best effort

    states = drain(
        scale_in, sf_client, machines, instances, recording_lifecycle, "i-0aaa", "scale-0"
    )

    assert states["removal"] == {
        "node_name": "scale-0",
        "removed": False,
        "status": "Down (Completed, intent RemoveNode)",
        "down": True,
    }
    assert states["remove_state"]["outcome"] == Outcome.REQUESTED
    assert posts(sf_emulator).count("/Nodes/scale-0/$/RemoveNodeState") == 1
    assert "stop_host" not in states  # its machine had uninstalled Fabric already
    assert_removed(sf_client, sf_cluster, "scale-0")


def test_a_node_whose_host_is_down_is_refused_before_any_upgrade(
    sf_client, sf_cluster, sf_emulator, scale_in, machines, instances, recording_lifecycle
):
    sf_cluster.stop_host("scale-1")

    with pytest.raises(NodeInWrongState, match="Down"):
        drain(scale_in, sf_client, machines, instances, recording_lifecycle, "i-0bbb", "scale-1")

    assert sf_cluster.upgrade_requests == []
    assert "scale-1" in sf_cluster.uos_nodes


def test_a_removal_the_uos_ends_without_upgrading_fails_loudly(
    sf_client, sf_cluster, sf_emulator
):
    """The UOS aborts without a word when its node lookup finds nothing (here: the node's FM
    entry vanishes between our start and its lookup, and the manifest no longer lists it)."""
    sf_cluster.start_wait_ticks = 50
    deactivate_node(sf_client, "scale-0")
    sf_cluster.tick(3)
    original = sf_cluster.uos.start

    def start_then_lose_the_node(body):
        run = original(body)
        del sf_cluster.nodes["scale-0"]
        sf_cluster.uos.topology.pop("scale-0")
        return run

    sf_cluster.uos.start = start_then_lose_the_node
    change = start_configuration_removal(sf_client, "scale-0", now=0)

    assert change.confirmed and "Aborting upgrade" in sf_cluster.upgrades[-1].log[-1]
    with pytest.raises(ConfigurationUpgradeFailed, match="ended without upgrading"):
        poll_configuration_upgrade(sf_client, change.to_dict(), now=1)


def test_a_rolled_back_removal_fails_with_the_state(sf_client, sf_cluster):
    sf_cluster.upgrade_outcome = "RollingBackCompleted"
    sf_cluster.start_wait_ticks = 50
    deactivate_node(sf_client, "scale-0")
    sf_cluster.tick(3)

    change = start_configuration_removal(sf_client, "scale-0", now=0)

    with pytest.raises(ConfigurationUpgradeFailed, match="ended RollingBackCompleted"):
        poll_configuration_upgrade(sf_client, change.to_dict(), now=1)


def test_an_unconfirmed_start_with_no_trace_fails_after_the_grace_period(sf_client, sf_cluster):
    deactivate_node(sf_client, "scale-0")
    sf_cluster.tick(3)
    status = sf_client.get_cluster_configuration_upgrade_status()
    lost = {  # a start whose answer we never got, and that the cluster never acted on
        "target_version": "9.9.9", "kind": "removal", "confirmed": False, "started_at": 0,
        "manifest_before": status.progress_status,
    }

    waiting = poll_configuration_upgrade(sf_client, lost, now=10, grace_seconds=60)
    assert waiting.done is False and "10/60 s" in waiting.detail
    with pytest.raises(ConfigurationUpgradeFailed, match="without upgrading"):
        poll_configuration_upgrade(sf_client, lost, now=61, grace_seconds=60)


def test_a_removal_step_run_again_watches_the_first_start_instead_of_starting_another(
    sf_client, sf_cluster, sf_emulator, poll_loop
):
    deactivate_node(sf_client, "scale-0")
    sf_cluster.tick(3)
    first = start_configuration_removal(sf_client, "scale-0", now=0)  # answer lost (504)

    again = start_configuration_removal(sf_client, "scale-0", now=1)  # the step is retried
    poll_loop(lambda: poll_configuration_upgrade(sf_client, again.to_dict(), now=2))

    assert first.confirmed is False
    assert again.outcome == Outcome.REQUESTED and "not starting another" in again.detail
    assert len(sf_cluster.upgrade_requests) == 1
    assert check_node_removed(sf_client, "scale-0").removed is True


CRASH_POINTS = {
    "after-deactivate": lambda client, cluster: deactivate_node(client, "scale-0"),
    "after-disabled": lambda client, cluster: (
        deactivate_node(client, "scale-0"), cluster.tick(3)
    ),
    "after-start": lambda client, cluster: (
        deactivate_node(client, "scale-0"),
        cluster.tick(3),
        start_configuration_removal(client, "scale-0", now=0),
    ),
    "after-upgrade": lambda client, cluster: (
        deactivate_node(client, "scale-0"),
        cluster.tick(3),
        start_configuration_removal(client, "scale-0", now=0),
        cluster.tick(10),
    ),
}


@pytest.mark.parametrize("crash", CRASH_POINTS)
def test_a_drain_run_again_from_the_start_picks_up_where_the_node_is(
    sf_client, sf_cluster, sf_emulator, scale_in, machines, instances, recording_lifecycle, crash
):
    CRASH_POINTS[crash](sf_client, sf_cluster)

    states = drain(
        scale_in, sf_client, machines, instances, recording_lifecycle, "i-0aaa", "scale-0"
    )

    assert_removed(sf_client, sf_cluster, "scale-0") if crash != "after-upgrade" else None
    assert sf_client.get_node_info("scale-0") is None
    assert len(sf_cluster.upgrade_requests) == 1  # the first start was the only one
    assert posts(sf_emulator).count("/Nodes/scale-0/$/Deactivate") == 1
    assert recording_lifecycle.results == ["CONTINUE"]
    assert states["complete"]["outcome"] == Outcome.REQUESTED


def test_a_seed_node_is_refused_and_nothing_is_written(
    sf_client, sf_emulator, scale_in, machines, instances, recording_lifecycle
):
    host = machines({"i-0seed": "seed-0"})
    states = scale_in(
        sf_client,
        instances=instances(tagged("i-0seed", "seed-0")),
        host=host,
        lifecycle=recording_lifecycle,
        hook=hook_for("i-0seed"),
    )

    assert states["seed"]["refused"] is True
    assert states["hold"] == {"heartbeat": True}  # held for an operator, not completed
    for step in (
        lambda: deactivate_node(sf_client, "seed-0"),
        lambda: stop_fabric_host(sf_client, host, "seed-0", "i-0seed"),
        lambda: remove_node_state(sf_client, "seed-0"),
    ):
        with pytest.raises(SeedNodeRefused):
            step()
    assert posts(sf_emulator) == []
    assert host.sent == []
    assert recording_lifecycle.calls == [("heartbeat", "i-0seed")]


def test_a_gateway_that_refuses_remove_node_gets_remove_data(
    sf_client, sf_cluster, sf_emulator, scale_in, machines, instances, recording_lifecycle
):
    sf_cluster.accepted_intents = DOCUMENTED_INTENTS

    first = deactivate_node(sf_client, "scale-1")
    states = scale_in(
        sf_client,
        instances=instances(tagged("i-0bbb", "scale-1")),
        host=machines({"i-0bbb": "scale-1"}),
        lifecycle=recording_lifecycle,
        hook=hook_for("i-0bbb"),
    )

    assert first.intent == "RemoveData"
    asked = [
        r.body["DeactivationIntent"] for r in sf_emulator.requests_to("POST", r".*/Deactivate")
    ]
    assert asked == ["RemoveNode", "RemoveData"]  # and not again on the re-run
    assert states["deactivate"]["outcome"] == Outcome.ALREADY_DONE
    assert_removed(sf_client, sf_cluster, "scale-1")


def test_an_instance_that_never_joined_completes_at_once(
    sf_client, sf_emulator, scale_in, machines, instances, recording_lifecycle
):
    never_joined = InstanceInfo("i-0new", "running", "10.0.3.77", {})

    states = scale_in(
        sf_client,
        instances=instances(never_joined),
        host=machines({}),
        lifecycle=recording_lifecycle,
        hook=hook_for("i-0new"),
    )

    assert states["resolve"] == {
        "instance_id": "i-0new",
        "node_name": "",
        "found_by": "",
        "is_member": False,
        "reason": "untagged instance, no node at 10.0.3.77",
    }
    assert recording_lifecycle.calls == [("complete", "CONTINUE")]
    assert posts(sf_emulator) == []


def test_an_instance_ec2_no_longer_knows_is_not_a_member(sf_client, sf_emulator, instances):
    resolution = resolve_node(sf_client, instances(), "i-0gone")

    assert (resolution.is_member, resolution.reason) == (False, "EC2 does not know it")
    assert sf_emulator.requests == []


def test_an_untagged_instance_is_found_by_its_private_ip(sf_client, sf_cluster, launch, ec2):
    instance = launch()  # scale-out tags after the join; this one was never tagged
    sf_cluster.add_node("scale-7", ip=instance["PrivateIpAddress"], in_config=True)

    resolution = resolve_node(sf_client, Ec2InstanceDirectory(ec2), instance["InstanceId"])

    assert (resolution.node_name, resolution.found_by, resolution.is_member) == (
        "scale-7",
        "ip",
        True,
    )


def test_an_address_match_prefers_the_live_node_and_never_guesses(sf_client, sf_cluster):
    sf_cluster.add_node("scale-old", ip="10.0.2.50").status = "Removed"  # a reused address
    sf_cluster.add_node("scale-new", ip="10.0.2.50")
    directory_one = {"i-1": InstanceInfo("i-1", "running", "10.0.2.50")}

    class Directory:
        def describe_instance(self, instance_id):
            return directory_one.get(instance_id)

    assert resolve_node(sf_client, Directory(), "i-1").node_name == "scale-new"
    sf_cluster.add_node("scale-twin", ip="10.0.2.50")
    with pytest.raises(AmbiguousNode, match="scale-new, scale-twin"):
        resolve_node(sf_client, Directory(), "i-1")


def test_a_node_activated_again_mid_drain_ends_the_wait_loudly(sf_client):
    deactivate_node(sf_client, "scale-0")
    sf_client.activate_node("scale-0")  # an operator changed their mind

    with pytest.raises(NodeReactivated, match="activated"):
        poll_deactivation(sf_client, "scale-0")


def test_a_failed_stop_command_ends_the_wait_for_down(sf_client, poll_loop):
    class BrokenHost:
        def send_stop_command(self, instance_id):
            return "cmd-1"

        def command_status(self, command_id, instance_id):
            return CommandStatus(command_id, "Failed", "Access is denied.")

    deactivate_node(sf_client, "scale-0")
    poll_loop(lambda: poll_deactivation(sf_client, "scale-0"))
    stop = stop_fabric_host(sf_client, BrokenHost(), "scale-0", "i-0aaa")

    with pytest.raises(FabricHostStopFailed, match="ended Failed: Access is denied"):
        poll_node_down(
            sf_client,
            "scale-0",
            host=BrokenHost(),
            instance_id="i-0aaa",
            command_id=stop.command_id,
        )


def test_steps_run_too_early_refuse_without_writing(sf_client, sf_cluster, sf_emulator, machines):
    host = machines({"i-0aaa": "scale-0"})

    with pytest.raises(NodeInWrongState, match="state of scale-0: it is Up"):
        remove_node_state(sf_client, "scale-0")
    with pytest.raises(NodeInWrongState, match="deactivate it"):
        start_configuration_removal(sf_client, "scale-0", now=0)
    with pytest.raises(NodeInWrongState):
        stop_fabric_host(sf_client, host, "scale-0", "i-0aaa")

    assert posts(sf_emulator) == []
    assert sf_cluster.upgrade_requests == []
    assert refuse_seed_node(sf_client, "scale-0").refused is False


def test_transient_gateway_errors_are_retried_through_a_drain(
    sf_client, sf_cluster, sf_emulator, scale_in, machines, instances, fake_time,
    recording_lifecycle,
):
    sf_emulator.inject_error(503, "FABRIC_E_NOT_READY", times=2, path=r"^/Nodes/scale-0$")
    sf_emulator.inject_error(503, "FABRIC_E_NOT_READY", method="POST", path="Deactivate")
    sf_emulator.inject_error(
        503, "FABRIC_E_NOT_READY", path="StartClusterConfigurationUpgrade"
    )  # refused before acting: safe to resend even this one
    sf_emulator.inject_error(503, "FABRIC_E_COMMUNICATION_ERROR", path="GetClusterConfiguration")

    drain(scale_in, sf_client, machines, instances, recording_lifecycle, "i-0aaa", "scale-0")

    assert_removed(sf_client, sf_cluster, "scale-0")
    assert sf_emulator.faults.pending == 0
    assert len(fake_time.sleeps) == 5  # every fault was waited out, none was fatal
    assert len(sf_cluster.upgrade_requests) == 1
