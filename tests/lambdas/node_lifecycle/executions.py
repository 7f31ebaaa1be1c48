"""One test's platform for the executed state machines: an environment's synthesized node
lifecycle on moto's ASL interpreter (asl_harness.py), AWS on moto and the wire (aws_wire.py,
lifecycle_actions.py), the Service Fabric gateway emulator; and how an execution ended, as an
operator sees it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import boto3
from moto import mock_aws

from tests.conftest import cdk_context
from tests.sf_emulator import EmulatedCluster, Pki, SfEmulator

from .asl_harness import Alarm, Execution, LifecycleStateMachines, VirtualClock
from .aws_wire import AwsWire, Machines, route_through
from .lifecycle_actions import LifecycleAction, LifecycleActions

LOCK_ITEM = {"LockName": {"S": "cluster-membership"}}


class World:
    """One test's platform: the state machines, AWS on moto and the wire, the cluster."""

    def __init__(self, environment: str, machines: LifecycleStateMachines, wire: AwsWire, cluster: EmulatedCluster,
                 emulator: SfEmulator):  # fmt: skip
        self.environment = environment
        self.machines, self.wire, self.cluster, self.emulator = machines, wire, cluster, emulator
        self.ec2 = boto3.client("ec2", region_name=machines.region)
        self.dynamodb = boto3.client("dynamodb", region_name=machines.region)
        self.ssm = boto3.client("ssm", region_name=machines.region)
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

    def tags(self, instance_id: str) -> dict[str, str]:
        found = self.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
        return {tag["Key"]: tag["Value"] for tag in found.get("Tags", [])}

    def lock_holder(self) -> str | None:
        item = self.dynamodb.get_item(TableName=self.lock_table, Key=LOCK_ITEM, ConsistentRead=True).get("Item")
        return item["Owner"]["S"] if item else None

    def removed(self, name: str) -> bool:
        """Gone from the Failover Manager's list, the UOS's topology and the configuration."""
        node = self.cluster.node(name)
        listed = [entry["nodeName"] for entry in self.cluster.config["nodes"]]
        return (node is None or node.status == "Removed") and name not in self.cluster.uos_nodes and name not in listed

    def posts(self) -> int:
        """How many writes the gateway received."""
        return [request.method for request in self.emulator.requests].count("POST")

    # -- how an execution ended, as an operator sees it -----------------------------------

    def continued(self, execution: Execution, action: LifecycleAction) -> None:
        """Done: the action completed with CONTINUE, heartbeats kept it meanwhile, the lock is
        free and nobody was alarmed."""
        assert execution.status == "SUCCEEDED", [i for i in execution.invocations if i.error]
        assert (action.result, action.ended_by) == ("CONTINUE", "completed")
        assert self.max_heartbeat_gap(action) < action.heartbeat_timeout
        assert self.lock_holder() is None
        assert self.machines.alarms() == []

    def abandoned(self, execution: Execution, action: LifecycleAction) -> Alarm:
        """The join failed: the launch ABANDONed, the lock free, one alarm naming the instance."""
        assert (execution.status, execution.error) == ("FAILED", "JoinFailed")
        assert (action.result, action.ended_by) == ("ABANDON", "completed")
        assert self.lock_holder() is None
        assert "JoinsFailed" in self.machines.metrics.names()
        (alarm,) = self.machines.alarms()
        assert alarm.subject == f"Service Fabric join failed: {action.instance_id}"
        return alarm

    def retained(self, execution: Execution, action: LifecycleAction, error: str = "DrainFailed") -> list[Alarm]:
        """The drain failed (or a seed was refused): the terminate action ABANDONed, so Auto Scaling
        retains the instance, running, for an operator; heartbeats kept it meanwhile; the lock is
        free. Returns what reached the inbox."""
        assert (execution.status, execution.error) == ("FAILED", error)
        assert action.retained, (action.result, action.ended_by)
        assert self.max_heartbeat_gap(action) < action.heartbeat_timeout
        assert self.lock_holder() is None
        return self.machines.alarms()

    def max_heartbeat_gap(self, action: LifecycleAction) -> float:
        """The longest the action went without a heartbeat while the execution worked on it."""
        times = [action.started_at, *action.heartbeats]
        return max((b - a for a, b in zip(times, times[1:])), default=0.0)


@contextlib.contextmanager
def open_world(environment: str, synthesized: Any, cluster: EmulatedCluster, emulator: SfEmulator, pki: Pki,
               monkeypatch: Any) -> Iterator[World]:  # fmt: skip
    """The synthesized environment's state machines on moto, the wire and the emulator."""
    stacks = synthesized(environment).stacks
    region = cdk_context()["environments"][environment]["region"]
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": region}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    clock = VirtualClock()
    lifecycle = LifecycleActions(clock)
    wire = AwsWire(lifecycle, Machines(cluster, add_node_document=_add_node_document(stacks)))
    route_through(wire, monkeypatch)
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        machines = LifecycleStateMachines(
            stacks,
            region=region,
            gateway_endpoints=[emulator.endpoint],
            admin_certificate={"certificate": pki.client.cert_pem, "private_key": pki.client.key_pem},
            gateway_thumbprint=pki.server.sha1_thumbprint,
            clock=clock,
            lifecycle=lifecycle,
            monkeypatch=monkeypatch,
        )
        yield World(environment, machines, wire, cluster, emulator)


def _add_node_document(stacks: dict) -> str:
    documents = [r for r in stacks["node_lifecycle"]["Resources"].values() if r["Type"] == "AWS::SSM::Document"
                 and r["Properties"]["Name"].endswith("-add-node")]
    (document,) = documents
    return document["Properties"]["Name"]


def gateway_down(world: World, how: str) -> None:
    if how == "refused":
        world.emulator.stop()  # nothing listens on the gateway's port any more
    else:
        world.emulator.inject_error(503, times=100_000)  # every call: 503 Service Unavailable
