"""The scale-out and scale-in state machines of the synthesized dev environment, executed.

Each test starts a lifecycle action of the scaling group as Auto Scaling would, lets the
EventBridge rule's pattern pick the state machine, and runs the synthesized definition under
moto's ASL interpreter with the real Lambda code (asl_harness.py), against moto, the wire
stand-ins moto lacks (aws_wire.py, lifecycle_actions.py) and the Service Fabric emulator. What a
test asserts is what an operator would see: how the execution ended, what became of the lifecycle
action, the heartbeats that kept the instance, the alarm in the inbox, the lock, the node.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from tests.conftest import cdk_context
from tests.sf_emulator import EmulatedCluster, Pki, SfEmulator

from tests.lambdas.node_lifecycle.asl_harness import LifecycleStateMachines, VirtualClock
from tests.lambdas.node_lifecycle.aws_wire import AwsWire, Machines, on_the_wire
from tests.lambdas.node_lifecycle.lifecycle_actions import LifecycleAction, LifecycleActions

pytestmark = pytest.mark.integration  # the HTTPS emulator and the ASL interpreter's threads

ENVIRONMENT = "dev"
REGION = cdk_context()["environments"][ENVIRONMENT]["region"]
LOCK_ITEM = {"LockName": {"S": "cluster-membership"}}


class World:
    """One test's platform: the state machines, AWS on moto and the wire, the cluster."""

    def __init__(self, machines: LifecycleStateMachines, wire: AwsWire, cluster: EmulatedCluster, emulator: SfEmulator):
        self.machines, self.wire, self.cluster, self.emulator = machines, wire, cluster, emulator
        self.ec2 = boto3.client("ec2", region_name=machines.region)
        self.dynamodb = boto3.client("dynamodb", region_name=machines.region)
        self.lock_table = next(iter(machines.templates.resources("node_lifecycle", "AWS::DynamoDB::GlobalTable").values()))["Properties"]["TableName"]

    @property
    def clock(self) -> VirtualClock:
        return self.machines.clock

    def instance(self, node_name: str = "") -> str:
        """A running instance of the scaling group; tagged with its node name when given."""
        options: dict[str, Any] = {}
        if node_name:
            options["TagSpecifications"] = [{"ResourceType": "instance", "Tags": [{"Key": "sf:nodename", "Value": node_name}]}]
        found = self.ec2.run_instances(ImageId="ami-12c6146b", InstanceType="m5.large", MinCount=1, MaxCount=1, **options)
        instance_id = found["Instances"][0]["InstanceId"]
        if node_name:
            self.wire.machines.node_by_instance[instance_id] = node_name
        return instance_id

    def setting(self, name: str) -> str:
        """One of the functions' environment variables, as synthesized."""
        (value,) = {f.environment[name] for f in self.machines.functions.values() if f.handler.endswith(".scale_in")}
        return value

    def lock_holder(self) -> str | None:
        item = self.dynamodb.get_item(TableName=self.lock_table, Key=LOCK_ITEM, ConsistentRead=True).get("Item")
        return item["Owner"]["S"] if item else None

    def max_heartbeat_gap(self, action: LifecycleAction) -> float:
        """The longest the action went without a heartbeat while the execution worked on it."""
        times = [action.started_at, *action.heartbeats]
        return max((b - a for a, b in zip(times, times[1:])), default=0.0)


@pytest.fixture
def world(synthesized, sf_cluster: EmulatedCluster, sf_emulator: SfEmulator, sf_pki: Pki, monkeypatch) -> Iterator[World]:
    stacks = synthesized(ENVIRONMENT).stacks
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": REGION}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    clock = VirtualClock()
    lifecycle = LifecycleActions(clock)
    wire = AwsWire(lifecycle, Machines(sf_cluster, add_node_document=_add_node_document(stacks)))
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}), on_the_wire(wire):
        machines = LifecycleStateMachines(
            stacks,
            region=REGION,
            gateway_endpoints=[sf_emulator.endpoint],
            admin_certificate={"certificate": sf_pki.client.cert_pem, "private_key": sf_pki.client.key_pem},
            gateway_thumbprint=sf_pki.server.sha1_thumbprint,
            clock=clock,
            lifecycle=lifecycle,
        )
        with machines.installed(monkeypatch):
            yield World(machines, wire, sf_cluster, sf_emulator)


def _add_node_document(stacks: dict) -> str:
    documents = [r for r in stacks["node_lifecycle"]["Resources"].values() if r["Type"] == "AWS::SSM::Document"]
    (document,) = documents
    return document["Properties"]["Name"]


# -- scale-out ----------------------------------------------------------------------------


def test_a_launched_instance_joins_and_the_launch_continues(world: World):
    instance_id = world.instance()
    action = world.machines.begin("launch", instance_id)

    execution = world.machines.run(action)

    assert execution.status == "SUCCEEDED", (execution.invocations, world.wire.calls)
    assert action.result == "CONTINUE" and action.ended_by == "completed"
    name = f"scale-{instance_id}"
    assert world.cluster.node(name).status == "Up"
    assert name in world.cluster.uos_nodes  # registered by the configuration upgrade
    assert world.lock_holder() is None
    assert world.machines.alarms() == []
    assert world.max_heartbeat_gap(action) < action.heartbeat_timeout


# -- scale-in -----------------------------------------------------------------------------


def test_a_terminating_node_is_drained_and_removed_before_the_instance_goes(world: World):
    instance_id = world.instance("scale-0")
    action = world.machines.begin("terminate", instance_id)

    execution = world.machines.run(action)

    assert execution.status == "SUCCEEDED", execution.history[-1]
    assert action.result == "CONTINUE" and action.ended_by == "completed"
    assert world.cluster.node("scale-0") is None or world.cluster.node("scale-0").status == "Removed"
    assert "scale-0" not in world.cluster.uos_nodes
    assert world.lock_holder() is None
    assert world.max_heartbeat_gap(action) < action.heartbeat_timeout


def test_a_join_waits_for_the_ssm_agent_and_for_another_upgrade(world: World):
    instance_id = world.instance()
    world.wire.machines.unregistered.add(instance_id)  # its SSM agent registers later
    world.cluster.run_other_upgrade(ticks=8)  # an operator's upgrade that cannot be interrupted
    original = world.wire.machines.send_command
    refusals = []

    def register_after_two_refusals(url, body):
        if instance_id in world.wire.machines.unregistered:
            refusals.append(body["DocumentName"])
            if len(refusals) == 2:
                world.wire.machines.unregistered.discard(instance_id)
        return original(url, body)

    world.wire.machines.send_command = register_after_two_refusals
    action = world.machines.begin("launch", instance_id)

    execution = world.machines.run(action)

    assert execution.status == "SUCCEEDED", execution.invocations
    outcomes = [step for step in execution.steps("join_node")]
    assert len(outcomes) >= 3  # waited for the upgrade, then twice for the agent
    assert len(refusals) == 2 and action.result == "CONTINUE"
    assert world.cluster.node(f"scale-{instance_id}").status == "Up"
    assert world.max_heartbeat_gap(action) < action.heartbeat_timeout


def test_a_drain_left_down_by_the_upgrade_has_its_node_state_removed(world: World):
    world.cluster.removes_node_state = False  # the UOS's own RemoveNodeState is best effort
    action = world.machines.begin("terminate", world.instance("scale-0"))

    execution = world.machines.run(action)

    assert execution.status == "SUCCEEDED", execution.invocations
    assert [i.step for i in execution.steps()][-2:] == ["remove_node_state", "finish"]
    assert not execution.steps("stop_fabric_host")
    assert world.cluster.node("scale-0") is None or world.cluster.node("scale-0").status == "Removed"
    assert action.result == "CONTINUE"


def test_a_drain_left_listed_by_the_upgrade_stops_the_host_then_removes_the_node_state(world: World):
    world.cluster.uninstalls_removed_nodes = False  # FabricDeployer did not uninstall Fabric
    action = world.machines.begin("terminate", world.instance("scale-1"))

    execution = world.machines.run(action)

    assert execution.status == "SUCCEEDED", execution.invocations
    steps = [i.step for i in execution.steps()]
    assert steps.index("stop_fabric_host") < steps.index("poll_node_down") < steps.index("remove_node_state")
    assert world.cluster.node("scale-1") is None or world.cluster.node("scale-1").status == "Removed"
    assert action.result == "CONTINUE" and world.lock_holder() is None
    assert world.max_heartbeat_gap(action) < action.heartbeat_timeout


def test_a_drain_waits_for_the_lock_held_elsewhere_keeping_the_instance(world: World):
    holder = "scale-out:i-0other:exec-other"
    world.dynamodb.put_item(
        TableName=world.lock_table,
        Item={**LOCK_ITEM, "Owner": {"S": holder}, "ExpiresAt": {"N": str(int(world.clock() + 1500))}},
    )
    action = world.machines.begin("terminate", world.instance("scale-0"))

    execution = world.machines.run(action)

    assert execution.status == "SUCCEEDED", execution.invocations
    assert len(execution.steps("acquire_lock")) > 1500 // 30 - 5  # tried every lock_retry seconds
    assert len(action.heartbeats) >= 1500 // 600 and world.max_heartbeat_gap(action) < action.heartbeat_timeout
    assert action.result == "CONTINUE" and world.lock_holder() is None


def test_an_instance_that_never_joined_continues_at_once(world: World):
    action = world.machines.begin("terminate", world.instance())  # untagged, no node at its address

    execution = world.machines.run(action)

    assert execution.status == "SUCCEEDED"
    assert action.result == "CONTINUE"
    assert [r.method for r in world.emulator.requests].count("POST") == 0
    assert world.lock_holder() is None


def test_a_seed_node_is_refused_and_held_for_an_operator(world: World):
    action = world.machines.begin("terminate", world.instance("seed-1"))

    execution = world.machines.run(action)

    assert (execution.status, execution.error) == ("FAILED", "SeedNodeRefused")
    assert action.pending  # never completed: the operator decides
    hold = int(world.setting("OPERATOR_HOLD_SECONDS"))
    assert execution.virtual_seconds >= hold
    assert world.max_heartbeat_gap(action) < action.heartbeat_timeout
    (alarm,) = world.machines.alarms()
    assert alarm.subject == "Service Fabric scale-in refused a seed node" and "seed-1" in alarm.message
    assert world.cluster.node("seed-1").status == "Up"
    assert [r.method for r in world.emulator.requests].count("POST") == 0
    assert world.lock_holder() is None


def test_a_failed_add_node_abandons_the_launch_and_alarms(world: World):
    world.wire.machines.add_node_fails = True
    instance_id = world.instance()
    action = world.machines.begin("launch", instance_id)

    execution = world.machines.run(action)

    assert (execution.status, execution.error) == ("FAILED", "JoinFailed")
    assert action.result == "ABANDON" and action.ended_by == "completed"
    (alarm,) = world.machines.alarms()
    assert alarm.subject == f"Service Fabric join failed: {instance_id}"
    assert "NodeJoinFailed" in alarm.message and "could not reach the seed" in alarm.message
    assert world.lock_holder() is None


def test_a_removal_the_upgrade_service_refuses_is_not_retried_and_the_instance_is_held(world: World):
    # SMB blocked on the machine: the UOS refuses the removal (SU.CheckRequiredPorts), for good.
    world.cluster.nodes["scale-0"].machine_reachable = False
    action = world.machines.begin("terminate", world.instance("scale-0"))

    execution = world.machines.run(action)

    assert (execution.status, execution.error) == ("FAILED", "DrainFailed")
    assert len(world.cluster.upgrade_requests) == 1  # a refusal is an answer: never sent again
    assert action.pending and world.max_heartbeat_gap(action) < action.heartbeat_timeout
    (alarm,) = world.machines.alarms()
    assert alarm.subject == "Service Fabric drain failed: scale-0 on " + action.instance_id
    assert "445" in alarm.message or "port" in alarm.message
    assert "scale-0" in world.cluster.uos_nodes and world.lock_holder() is None
