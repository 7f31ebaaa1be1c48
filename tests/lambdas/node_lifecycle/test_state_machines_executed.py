"""The scale-out and scale-in state machines of the synthesized dev environment, executed.

Each test starts a lifecycle action of the scaling group as Auto Scaling would, lets the
EventBridge rule's pattern pick the state machine, and runs the synthesized definition under
moto's ASL interpreter with the real Lambda code (asl_harness.py), against moto, the wire
stand-ins moto lacks (aws_wire.py, lifecycle_actions.py) and the Service Fabric emulator. What a
test asserts is what an operator would see: how the execution ended, what became of the lifecycle
action, the heartbeats that kept the instance, the alarm in the inbox, the lock, the node.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
import boto3
import pytest

from tests.conftest import cdk_context
from tests.sf_emulator import EmulatedCluster, Pki, SfEmulator

from tests.lambdas.node_lifecycle.executions import LOCK_ITEM, World, gateway_down, open_world

pytestmark = pytest.mark.integration  # the HTTPS emulator and the ASL interpreter's threads

ENVIRONMENT = "dev"
REGION = cdk_context()["environments"][ENVIRONMENT]["region"]


@pytest.fixture
def world(synthesized, sf_cluster: EmulatedCluster, sf_emulator: SfEmulator, sf_pki: Pki, monkeypatch) -> Iterator[World]:
    with open_world(ENVIRONMENT, synthesized, sf_cluster, sf_emulator, sf_pki, monkeypatch) as opened:
        yield opened


# -- scale-out ----------------------------------------------------------------------------


def test_a_launched_instance_joins_and_the_launch_continues(world: World):
    instance_id = world.instance()
    action = world.machines.begin("launch", instance_id)

    execution = world.machines.run(action)

    world.continued(execution, action)
    name = f"scale-{instance_id}"
    assert world.cluster.node(name).status == "Up"
    assert name in world.cluster.uos_nodes  # registered by the configuration upgrade
    entry = next(n for n in world.cluster.config["nodes"] if n["nodeName"] == name)
    instance = world.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    assert entry["faultDomain"] == f"fd:/{REGION}/{instance['Placement']['AvailabilityZone']}"
    # UD0 and UD1 hold a seed and a scaling node each, UD2 only a seed: the new node goes there.
    assert entry["upgradeDomain"] == "UD2"
    assert world.tags(instance_id)["sf:nodename"] == name
    (command,) = world.ssm.list_commands()["Commands"]
    assert command["DocumentName"] == world.wire.machines.add_node_document
    assert command["Parameters"]["nodeName"] == [name]
    assert command["Parameters"]["clientConnectionEndpoint"] == ["10.0.1.10:19000"]  # seed-0
    assert world.machines.metrics.names() == ["JoinsStarted", "JoinsSucceeded", "JoinDurationSeconds"]


def test_a_join_waits_for_the_ssm_agent_and_for_another_upgrade(world: World):
    instance_id = world.instance()
    world.wire.machines.unregistered.add(instance_id)  # its SSM agent registers later
    world.cluster.run_other_upgrade(ticks=8)  # an operator's upgrade that cannot be interrupted
    refusals = []
    send_command = world.wire.machines.send_command

    def register_after_two_refusals(url, body):
        if instance_id in world.wire.machines.unregistered:
            refusals.append(body["DocumentName"])
            if len(refusals) == 2:
                world.wire.machines.unregistered.discard(instance_id)
        return send_command(url, body)

    world.wire.machines.send_command = register_after_two_refusals
    action = world.machines.begin("launch", instance_id)

    execution = world.machines.run(action)

    world.continued(execution, action)
    assert len(execution.steps("join_node")) >= 3  # waited for the upgrade, then twice for the agent
    assert len(refusals) == 2 and len(world.ssm.list_commands()["Commands"]) == 1
    assert world.cluster.node(f"scale-{instance_id}").status == "Up"


# A duplicated launch event: test_overlap_executed.py (the overlap matrix).


def test_a_failed_add_node_abandons_the_launch_and_alarms(world: World):
    world.wire.machines.add_node_fails = True
    action = world.machines.begin("launch", world.instance())

    alarm = world.abandoned(world.machines.run(action), action)

    assert "NodeJoinFailed" in alarm.message and "could not reach the seed" in alarm.message
    assert world.cluster.node(f"scale-{action.instance_id}") is None


def test_a_join_whose_registration_is_refused_deactivates_and_tags_the_half_added_node(world: World):
    world.emulator.inject_error(400, "FABRIC_E_INVALID_CONFIGURATION", method="POST",
                                path="StartClusterConfigurationUpgrade", times=10)  # fmt: skip
    action = world.machines.begin("launch", world.instance())

    execution = world.machines.run(action)

    alarm = world.abandoned(execution, action)
    assert execution.retried("start_configuration_registration") == 0  # a refusal is an answer
    name = f"scale-{action.instance_id}"
    assert world.cluster.node(name).deactivation_intent == "RemoveNode"
    assert world.tags(action.instance_id)["sf:nodename"] == name
    assert f"node {name} deactivated: True" in alarm.message and "FABRIC_E_INVALID_CONFIGURATION" in alarm.message


def test_a_join_with_no_seed_up_abandons_without_running_add_node(world: World):
    for seed in ("seed-0", "seed-1", "seed-2"):
        world.cluster.stop_host(seed)
    action = world.machines.begin("launch", world.instance())

    alarm = world.abandoned(world.machines.run(action), action)

    assert "no seed node is Up" in alarm.message
    assert world.ssm.list_commands()["Commands"] == [] and world.posts() == 0


# -- scale-in -----------------------------------------------------------------------------


def test_a_terminating_node_is_drained_and_removed_before_the_instance_goes(world: World):
    action = world.machines.begin("terminate", world.instance("scale-0"))

    execution = world.machines.run(action)

    world.continued(execution, action)
    assert world.removed("scale-0")
    assert [u.removing for u in world.cluster.upgrades] == [("scale-0",)]
    assert world.machines.metrics.names() == ["DrainsStarted", "DrainsSucceeded", "DrainDurationSeconds"]


@pytest.mark.overlap
def test_two_drains_at_once_take_turns_and_both_nodes_leave(world: World):
    first = world.machines.begin("terminate", world.instance("scale-0"))
    second = world.machines.begin("terminate", world.instance("scale-1"))

    executions = world.machines.run_together(first, second)

    for execution, action in zip(executions, (first, second)):
        world.continued(execution, action)
    assert world.removed("scale-0") and world.removed("scale-1")
    # One upgrade each, each naming only its own node (no stale NodesToBeRemoved).
    assert sorted(u.removing for u in world.cluster.upgrades) == [("scale-0",), ("scale-1",)]


def test_a_drain_left_down_by_the_upgrade_has_its_node_state_removed(world: World):
    world.cluster.removes_node_state = False  # the UOS's own RemoveNodeState is best effort
    action = world.machines.begin("terminate", world.instance("scale-0"))

    execution = world.machines.run(action)

    world.continued(execution, action)
    assert [i.step for i in execution.steps()][-2:] == ["remove_node_state", "finish"]
    assert not execution.steps("stop_fabric_host")
    assert world.removed("scale-0")


def test_a_drain_left_listed_by_the_upgrade_stops_the_host_then_removes_the_node_state(world: World):
    world.cluster.uninstalls_removed_nodes = False  # FabricDeployer did not uninstall Fabric
    action = world.machines.begin("terminate", world.instance("scale-1"))

    execution = world.machines.run(action)

    world.continued(execution, action)
    steps = [i.step for i in execution.steps()]
    assert steps.index("stop_fabric_host") < steps.index("poll_node_down") < steps.index("remove_node_state")
    assert world.removed("scale-1")


@pytest.mark.overlap
def test_a_drain_waits_for_the_lock_held_elsewhere_keeping_the_instance(world: World):
    held_for = 1200  # longer than the hook's heartbeat timeout (900 s)
    holder = "scale-out:i-0other:exec-other"  # an execution that died holding the lock
    world.dynamodb.put_item(
        TableName=world.lock_table,
        Item={**LOCK_ITEM, "Owner": {"S": holder}, "ExpiresAt": {"N": str(int(world.clock() + held_for))}},
    )
    action = world.machines.begin("terminate", world.instance("scale-0"))

    execution = world.machines.run(action)

    world.continued(execution, action)  # heartbeats while waiting: no gap over the hook's timeout
    assert len(execution.steps("acquire_lock")) > held_for // 30  # every lock_retry s until it expired
    assert world.removed("scale-0")


def test_an_instance_that_never_joined_continues_at_once(world: World):
    action = world.machines.begin("terminate", world.instance())  # untagged, no node at its address

    execution = world.machines.run(action)

    world.continued(execution, action)
    assert world.posts() == 0 and world.machines.metrics.names() == []


def test_a_seed_node_is_refused_and_its_instance_retained_for_an_operator(world: World):
    action = world.machines.begin("terminate", world.instance("seed-1"))

    (alarm,) = world.retained(world.machines.run(action), action, error="SeedNodeRefused")

    assert alarm.subject == "Service Fabric scale-in refused a seed node"
    assert f"Instance {action.instance_id} runs seed node seed-1" in alarm.message
    assert "Auto Scaling retains the instance (Terminating:Retained)" in alarm.message
    assert world.cluster.node("seed-1").status == "Up" and world.posts() == 0


def test_a_stalled_drain_fails_at_its_deadline_and_its_instance_is_retained(world: World):
    world.cluster.set_stuck_in_safety_check("scale-0")
    action = world.machines.begin("terminate", world.instance("scale-0"))

    execution = world.machines.run(action)

    (alarm,) = world.retained(execution, action)
    assert execution.virtual_seconds >= int(world.setting("WORKFLOW_TIMEOUT_SECONDS"))
    assert alarm.subject == f"Service Fabric drain failed: scale-0 on {action.instance_id}"
    assert "WaitTimedOut" in alarm.message and "scale-0 to be Disabled" in alarm.message
    assert "Auto Scaling retains the instance (Terminating:Retained)" in alarm.message
    assert (f"aws autoscaling terminate-instance-in-auto-scaling-group --instance-id {action.instance_id} "
            f"--no-should-decrement-desired-capacity --region {REGION}") in alarm.message  # fmt: skip
    assert "DrainsFailed" in world.machines.metrics.names()
    assert "scale-0" in world.cluster.uos_nodes  # nothing removed


def test_a_removal_the_upgrade_service_refuses_is_not_retried_and_the_instance_is_retained(world: World):
    # SMB blocked on the machine: the UOS refuses the removal (SU.CheckRequiredPorts), for good.
    world.cluster.nodes["scale-0"].machine_reachable = False
    action = world.machines.begin("terminate", world.instance("scale-0"))

    (alarm,) = world.retained(world.machines.run(action), action)

    assert len(world.cluster.upgrade_requests) == 1  # a refusal is an answer: never sent again
    assert alarm.subject == f"Service Fabric drain failed: scale-0 on {action.instance_id}"
    assert "Required ports on the node to be removed are not reacheable" in alarm.message
    assert world.cluster.node("scale-0").status == "Disabled" and "scale-0" in world.cluster.uos_nodes


def test_a_permanent_refusal_with_a_code_we_do_not_know_is_not_retried(world: World):
    world.emulator.inject_error(400, "FABRIC_E_INVALID_CONFIGURATION", message="the configuration is not valid",
                                method="POST", path="StartClusterConfigurationUpgrade", times=10)  # fmt: skip
    action = world.machines.begin("terminate", world.instance("scale-0"))

    (alarm,) = world.retained(world.machines.run(action), action)

    assert len([r for r in world.emulator.requests if r.path.endswith("StartClusterConfigurationUpgrade")]) == 1
    assert "FABRIC_E_INVALID_CONFIGURATION" in alarm.message and "(PermanentError)" in alarm.message


# -- without a gateway --------------------------------------------------------------------


@pytest.mark.parametrize("how", ["refused", "503"])
def test_a_join_without_a_gateway_abandons_the_launch_and_alarms(world: World, how: str):
    instance_id = world.instance()
    gateway_down(world, how)
    action = world.machines.begin("launch", instance_id)

    execution = world.machines.run(action)

    alarm = world.abandoned(execution, action)
    assert execution.retried("plan_node") == 4  # transient: every try used
    assert "gateway" in alarm.message.lower() and "(TransientError)" in alarm.message


@pytest.mark.parametrize("how", ["refused", "503"])
def test_a_drain_without_a_gateway_alarms_and_retains_the_instance(world: World, how: str):
    instance_id = world.instance("scale-0")
    gateway_down(world, how)
    action = world.machines.begin("terminate", instance_id)

    execution = world.machines.run(action)

    (alarm,) = world.retained(execution, action)
    assert execution.retried("resolve_node") == 4
    assert alarm.subject == f"Service Fabric drain failed: (unresolved) on {instance_id}"
    assert "gateway" in alarm.message.lower()
    assert "scale-0" in world.cluster.uos_nodes and world.cluster.node("scale-0").status == "Up"


def test_a_gateway_lost_once_the_node_is_up_abandons_the_join_and_says_what_was_left(world: World):
    instance_id = world.instance()
    world.machines.after_step["tag_node_instance"] = lambda: gateway_down(world, "503")
    action = world.machines.begin("launch", instance_id)

    execution = world.machines.run(action)

    alarm = world.abandoned(execution, action)
    assert execution.retried("start_configuration_registration") == 4
    assert "could not clean up in the cluster" in alarm.message
    # What the join left: a node the UOS does not know, Up on an instance about to terminate.
    # Its terminate hook's drain removes it (test_an_abandoned_join_is_drained_...).
    name = f"scale-{instance_id}"
    assert world.cluster.node(name).status == "Up" and name not in world.cluster.uos_nodes


def test_a_gateway_lost_mid_drain_retains_the_instance_with_the_node_disabled(world: World):
    world.machines.after_step["deactivate_node"] = lambda: gateway_down(world, "503")
    action = world.machines.begin("terminate", world.instance("scale-0"))

    execution = world.machines.run(action)

    (alarm,) = world.retained(execution, action)
    assert execution.retried("poll_deactivation") == 4
    assert "telemetry cluster drain --env <environment> --node scale-0" in alarm.message
    assert world.cluster.node("scale-0").deactivation_intent == "RemoveNode"
    assert "scale-0" in world.cluster.uos_nodes


# -- when the alarm cannot be published --------------------------------------------------


def delete_alarm_topic(world: World) -> None:
    boto3.client("sns", region_name=REGION).delete_topic(TopicArn=world.machines.alarm_topic_arn)


def test_a_seed_is_retained_when_the_alarm_topic_is_gone(world: World):
    delete_alarm_topic(world)
    action = world.machines.begin("terminate", world.instance("seed-0"))

    execution = world.machines.run(action)

    assert world.retained(execution, action, error="SeedNodeRefused") == []
    assert world.machines.metrics.names().count("AlarmsUndelivered") == 1
    assert world.wire.count("sns", "Publish") == 5  # the first try and 4 retries, then counted
    assert world.cluster.node("seed-0").status == "Up"


@pytest.mark.parametrize("fault", ["topic deleted", "KMS access denied"])
def test_a_failed_drain_is_retained_when_its_alarm_cannot_be_published(world: World, fault: str):
    if fault == "topic deleted":
        delete_alarm_topic(world)
    else:  # SNS's answer when the topic's key refuses the publisher (SNS API reference, Publish)
        world.wire.fail("sns", "Publish", "KMSAccessDenied", times=100)
    world.cluster.nodes["scale-0"].machine_reachable = False  # the removal is refused: a failed drain
    action = world.machines.begin("terminate", world.instance("scale-0"))

    execution = world.machines.run(action)

    assert world.retained(execution, action) == []
    assert world.machines.metrics.names().count("AlarmsUndelivered") == 1
    assert "DrainsFailed" in world.machines.metrics.names()


def test_an_alarm_publish_that_is_throttled_is_retried_and_delivered(world: World):
    world.wire.fail("sns", "Publish", "Throttled", times=2)
    action = world.machines.begin("terminate", world.instance("seed-2"))

    (alarm,) = world.retained(world.machines.run(action), action, error="SeedNodeRefused")

    assert "seed-2" in alarm.message and world.wire.count("sns", "Publish") == 3
    assert "AlarmsUndelivered" not in world.machines.metrics.names()


def test_a_malformed_event_alarms_and_fails_without_touching_anything(world: World):
    machine = next(m for m in world.machines.state_machines.values() if "Instance-terminate" in json.dumps(m["pattern"]))
    event = {"source": "aws.autoscaling", "detail-type": "EC2 Instance-terminate Lifecycle Action", "detail": {}}

    execution = world.machines.start(machine, event)

    assert (execution.status, execution.error) == ("FAILED", "DrainFailed")
    (alarm,) = world.machines.alarms()
    assert alarm.subject == "Service Fabric drain failed: (unresolved) on (unknown instance)"
    assert "not an Auto Scaling lifecycle action event" in alarm.message
    assert "There is no lifecycle action to end" in alarm.message
    assert world.posts() == 0 and world.lock_holder() is None and world.wire.count("auto-scaling", "RecordLifecycleActionHeartbeat") == 0


# -- AWS throttling -----------------------------------------------------------------------


def test_dynamodb_throttling_is_ridden_out_by_a_drain(world: World):
    # More throttles than botocore's own three attempts: the state machine's Retry meets them.
    world.wire.fail("dynamodb", "PutItem", "ProvisionedThroughputExceededException", times=4)
    action = world.machines.begin("terminate", world.instance("scale-0"))

    execution = world.machines.run(action)

    world.continued(execution, action)
    assert execution.retried("acquire_lock") == 1
    assert world.removed("scale-0")


def test_ssm_throttling_is_ridden_out_by_a_join(world: World):
    world.wire.fail("ssm", "SendCommand", "ThrottlingException", times=4)
    action = world.machines.begin("launch", world.instance())

    execution = world.machines.run(action)

    world.continued(execution, action)
    assert execution.retried("join_node") == 1
    assert world.cluster.node(f"scale-{action.instance_id}").status == "Up"


# -- journeys -----------------------------------------------------------------------------


def test_an_abandoned_join_is_drained_when_its_instance_terminates(world: World):
    """After a join that failed between AddNode.ps1 and its registration upgrade, Auto Scaling
    terminates the abandoned instance: the drain must leave no node behind, though the UOS
    refuses removals until the node is registered."""
    instance_id = world.instance()
    world.machines.after_step["tag_node_instance"] = lambda: gateway_down(world, "503")
    launch = world.machines.begin("launch", instance_id)
    world.abandoned(world.machines.run(launch), launch)
    world.emulator.faults.clear()  # the gateway is back
    action = world.machines.begin("terminate", instance_id)

    execution = world.machines.run(action)

    world.continued(execution, action)
    assert world.removed(f"scale-{instance_id}")
    registration, removal = world.cluster.upgrades[-2:]
    assert (registration.removing, removal.removing) == ((), (f"scale-{instance_id}",))


def test_a_failed_join_that_cannot_tell_whether_its_action_is_pending_leaves_the_node_alone(world: World):
    """Heartbeats refused once the node is Up: the join fails, and its clean-up cannot tell whether
    Auto Scaling still has the launch action. It leaves the node as it is (deactivating it could
    take a serving node out of service; left alone, an abandoned launch's terminate hook drains it)."""
    world.machines.after_step["tag_node_instance"] = lambda: world.wire.fail(
        "auto-scaling", "RecordLifecycleActionHeartbeat", "AccessDenied", status=403, times=10_000)
    action = world.machines.begin("launch", world.instance())

    alarm = world.abandoned(world.machines.run(action), action)

    node = world.cluster.node(f"scale-{action.instance_id}")
    assert (node.status, node.deactivation_intent) == ("Up", "Invalid")
    assert "Whether Auto Scaling still had the launch action could not be read" in alarm.message
