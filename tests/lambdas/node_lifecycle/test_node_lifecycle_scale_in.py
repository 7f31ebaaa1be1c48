"""Scale-in steps against the HTTPS gateway emulator: a node goes from Up to out of the cluster."""

from __future__ import annotations

import uuid

import boto3
import pytest
from botocore.stub import Stubber
from node_lifecycle import (
    AmbiguousNode,
    CommandStatus,
    FabricHostStopFailed,
    InstanceInfo,
    LifecycleHook,
    NodeInWrongState,
    NodeReactivated,
    Outcome,
    SeedNodeRefused,
    complete_lifecycle_action,
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
from node_lifecycle.lifecycle_hooks import AutoScalingLifecycleHooks
from sf_rest.cluster_config import node_names, nodes_to_be_removed

from tests.sf_emulator import DOCUMENTED_INTENTS

pytestmark = pytest.mark.integration  # starts the HTTPS emulator


def posts(emulator) -> list[str]:
    """Every write the gateway saw (all of them are POSTs)."""
    return [r.path for r in emulator.requests if r.method == "POST"]


def hook_for(instance_id: str) -> LifecycleHook:
    return LifecycleHook("sf-scaling", "drain-on-terminate", instance_id, str(uuid.uuid4()))


def tagged(instance_id: str, node: str, ip: str = "10.0.2.99") -> InstanceInfo:
    return InstanceInfo(instance_id, "running", ip, {"sf:nodename": node})


def assert_removed(client, cluster, name: str) -> None:
    config = client.get_cluster_configuration()
    assert client.get_node_info(name) is None  # gone from the node list, not just Down
    assert name not in node_names(config)
    assert name in nodes_to_be_removed(config)
    assert name not in cluster.nodes


def test_a_full_drain_takes_a_scaling_node_out_with_heartbeats_on_every_poll(
    sf_client, sf_cluster, sf_emulator, scale_in, machines, launch, ec2, ssm, region
):
    sf_cluster.deactivation_polls, sf_cluster.upgrade_polls = 2, 2
    instance = launch(node_name="scale-0")
    hook = hook_for(instance["InstanceId"])
    host = machines({instance["InstanceId"]: "scale-0"}, inner=SsmFabricHost(ssm))
    autoscaling = boto3.client("autoscaling", region_name=region)
    stubber = Stubber(autoscaling)  # validates each call against the real API model
    address = {
        "LifecycleHookName": hook.hook_name,
        "AutoScalingGroupName": hook.group_name,
        "LifecycleActionToken": hook.token,
    }
    # 2 polls to Disabled + 1 to Down + 2 for the upgrade: one heartbeat each.
    for _ in range(5):
        stubber.add_response("record_lifecycle_action_heartbeat", {}, address)
    stubber.add_response(
        "complete_lifecycle_action", {}, {**address, "LifecycleActionResult": "CONTINUE"}
    )

    with stubber:
        states = scale_in(
            sf_client,
            instances=Ec2InstanceDirectory(ec2),
            host=host,
            lifecycle=AutoScalingLifecycleHooks(autoscaling),
            hook=hook,
        )
        stubber.assert_no_pending_responses()

    assert states["resolve"]["node_name"] == "scale-0"
    assert states["resolve"]["found_by"] == "tag"
    assert states["deactivate"]["intent"] == "RemoveNode"
    assert states["configuration"]["outcome"] == Outcome.REQUESTED
    assert states["complete"]["outcome"] == Outcome.REQUESTED
    assert_removed(sf_client, sf_cluster, "scale-0")
    assert len(sf_cluster.upgrade_requests) == 1
    commands = ssm.list_commands(InstanceId=instance["InstanceId"])["Commands"]
    assert [c["DocumentName"] for c in commands] == ["AWS-RunPowerShellScript"]
    assert any("Stop-Service" in line for line in commands[0]["Parameters"]["commands"])
    # The rest of the cluster is as it was.
    assert {n.name: n.status for n in sf_client.get_node_info_list()} == {
        "scale-1": "Up",
        "seed-0": "Up",
        "seed-1": "Up",
        "seed-2": "Up",
    }


def test_every_step_run_again_after_the_drain_changes_nothing(
    sf_client, sf_emulator, scale_in, machines, instances, recording_lifecycle
):
    hook = hook_for("i-0aaa")
    host = machines({"i-0aaa": "scale-0"})
    directory = instances(tagged("i-0aaa", "scale-0"))
    scale_in(sf_client, instances=directory, host=host, lifecycle=recording_lifecycle, hook=hook)
    sf_emulator.clear_log()

    again = [
        deactivate_node(sf_client, "scale-0"),
        stop_fabric_host(sf_client, host, "scale-0", "i-0aaa"),
        remove_node_state(sf_client, "scale-0"),
        start_configuration_removal(sf_client, "scale-0"),
        complete_lifecycle_action(recording_lifecycle, hook),
    ]
    polls = [
        poll_deactivation(sf_client, "scale-0"),
        poll_node_down(sf_client, "scale-0", host=host, instance_id="i-0aaa", command_id="cmd-0"),
        poll_configuration_upgrade(sf_client),
    ]
    replay = scale_in(
        sf_client, instances=directory, host=host, lifecycle=recording_lifecycle, hook=hook
    )

    assert [r.changed for r in again] == [False] * 5
    assert [r.outcome for r in again] == [
        Outcome.NOT_A_MEMBER,
        Outcome.NOT_A_MEMBER,
        Outcome.NOT_A_MEMBER,
        Outcome.ALREADY_DONE,
        Outcome.ALREADY_DONE,
    ]
    assert all(p.done for p in polls)
    assert replay["resolve"]["is_member"] is False  # a duplicated event completes at once
    assert replay["complete"]["outcome"] == Outcome.ALREADY_DONE
    assert posts(sf_emulator) == []
    assert host.sent == ["i-0aaa"]  # the host was stopped once, by the first drain


def _deactivated(client, cluster, poll_loop, host):
    deactivate_node(client, "scale-0")
    poll_loop(lambda: poll_deactivation(client, "scale-0"))


def _down(client, cluster, poll_loop, host):
    _deactivated(client, cluster, poll_loop, host)
    stop_fabric_host(client, host, "scale-0", "i-0aaa")


def _state_removed(client, cluster, poll_loop, host):
    _down(client, cluster, poll_loop, host)
    remove_node_state(client, "scale-0")


def _upgrade_started(client, cluster, poll_loop, host):
    _state_removed(client, cluster, poll_loop, host)
    start_configuration_removal(client, "scale-0")


@pytest.mark.parametrize(
    "first_run_reached", [_deactivated, _down, _state_removed, _upgrade_started]
)
def test_a_drain_run_again_from_the_start_picks_up_where_the_node_is(
    sf_client,
    sf_cluster,
    sf_emulator,
    scale_in,
    machines,
    instances,
    poll_loop,
    recording_lifecycle,
    first_run_reached,
):
    host = machines({"i-0aaa": "scale-0"})
    first_run_reached(sf_client, sf_cluster, poll_loop, host)  # then the Lambda "crashed"

    states = scale_in(
        sf_client,
        instances=instances(tagged("i-0aaa", "scale-0")),
        host=host,
        lifecycle=recording_lifecycle,
        hook=hook_for("i-0aaa"),
    )

    assert_removed(sf_client, sf_cluster, "scale-0")
    writes = posts(sf_emulator)
    assert writes.count("/Nodes/scale-0/$/Deactivate") == 1
    assert writes.count("/Nodes/scale-0/$/RemoveNodeState") == 1
    assert writes.count("/$/StartClusterConfigurationUpgrade") == 1
    assert host.sent == ["i-0aaa"]
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


def test_a_deactivation_stuck_in_safety_checks_is_never_done(
    sf_client, sf_cluster, sf_emulator, machines, recording_lifecycle
):
    sf_cluster.set_stuck_in_safety_check("scale-0")
    host = machines({"i-0aaa": "scale-0"})
    hook = hook_for("i-0aaa")

    deactivate_node(sf_client, "scale-0")
    polls = [
        poll_deactivation(sf_client, "scale-0", lifecycle=recording_lifecycle, hook=hook)
        for _ in range(6)
    ]

    assert [p.done for p in polls] == [False] * 6
    assert {p.status for p in polls} == {"Disabling"}
    assert "SafetyCheckInProgress" in polls[-1].detail
    assert recording_lifecycle.heartbeats == 6
    with pytest.raises(NodeInWrongState, match="not Disabled/Completed"):
        stop_fabric_host(sf_client, host, "scale-0", "i-0aaa")
    assert host.sent == []  # the host keeps running while replicas are still moving


def test_transient_gateway_errors_are_retried_through_a_drain(
    sf_client,
    sf_cluster,
    sf_emulator,
    scale_in,
    machines,
    instances,
    fake_time,
    recording_lifecycle,
):
    sf_emulator.inject_error(503, "FABRIC_E_NOT_READY", times=2, path=r"^/Nodes/scale-0$")
    sf_emulator.inject_error(503, "FABRIC_E_NOT_READY", method="POST", path="Deactivate")
    sf_emulator.inject_error(503, None, path="RemoveNodeState")  # plain 503, no Fabric body
    sf_emulator.inject_error(
        503, "FABRIC_E_NOT_READY", path="StartClusterConfigurationUpgrade"
    )  # refused before acting: safe to resend even this one
    sf_emulator.inject_error(503, "FABRIC_E_COMMUNICATION_ERROR", path="GetClusterConfiguration")

    scale_in(
        sf_client,
        instances=instances(tagged("i-0aaa", "scale-0")),
        host=machines({"i-0aaa": "scale-0"}),
        lifecycle=recording_lifecycle,
        hook=hook_for("i-0aaa"),
    )

    assert_removed(sf_client, sf_cluster, "scale-0")
    assert sf_emulator.faults.pending == 0
    assert len(fake_time.sleeps) == 6  # every fault was waited out, none was fatal
    assert len(sf_cluster.upgrade_requests) == 1


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


def test_steps_run_too_early_refuse_without_writing(sf_client, sf_cluster, sf_emulator, machines):
    host = machines({"i-0aaa": "scale-0"})

    with pytest.raises(NodeInWrongState, match="state of scale-0: it is Up"):
        remove_node_state(sf_client, "scale-0")
    with pytest.raises(NodeInWrongState, match="must be removed first"):
        start_configuration_removal(sf_client, "scale-0")
    with pytest.raises(NodeInWrongState):
        stop_fabric_host(sf_client, host, "scale-0", "i-0aaa")

    assert posts(sf_emulator) == []
    assert sf_cluster.upgrade_requests == []
    assert refuse_seed_node(sf_client, "scale-0").refused is False


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
