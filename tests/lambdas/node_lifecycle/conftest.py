"""Fixtures for the node lifecycle tests: the HTTPS emulator, moto, and stand-ins for AWS.

`drive_scale_in` walks the steps the way the scale-in state machine will: one call per
state, results passed on as JSON, wait steps looped (without real sleeping).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest
from moto import mock_aws
from node_lifecycle import (
    CommandStatus,
    InstanceInfo,
    LifecycleHook,
    Outcome,
    WaitStatus,
    check_node_removed,
    complete_lifecycle_action,
    deactivate_node,
    poll_configuration_upgrade,
    poll_deactivation,
    poll_node_down,
    poll_running_upgrade,
    record_heartbeat,
    refuse_seed_node,
    remove_node_state,
    resolve_node,
    start_configuration_removal,
    stop_fabric_host,
    wait_until_done,
)
from sf_rest import ServiceFabricClient

from tests.sf_emulator import EmulatedCluster

REGION = "eu-west-1"


# -- stand-ins for AWS, for tests about the Fabric side ----------------------------------


class InstancesInMemory:
    """InstanceDirectory over a dict: instance id -> InstanceInfo."""

    def __init__(self, *instances: InstanceInfo) -> None:
        self.by_id = {i.instance_id: i for i in instances}

    def describe_instance(self, instance_id: str) -> InstanceInfo | None:
        return self.by_id.get(instance_id)

    def list_node_instances(self) -> list[InstanceInfo]:
        return [i for i in self.by_id.values() if i.node_name]


@dataclass
class EmulatedMachines:
    """FabricHost whose stop command stops the node's host in the emulated cluster, and whose
    AddNode command joins the node to it.

    Wraps a real adapter (moto's SSM) when given one, so the Run Command call is made
    too; moto cannot run PowerShell, so the "machine" part is ours.
    """

    cluster: EmulatedCluster
    node_by_instance: dict[str, str]
    inner: Any = None
    sent: list[str] = field(default_factory=list)
    registered: bool = True  # False: the SSM agent has not registered yet
    add_node_fails: bool = False  # AddNode.ps1 fails on the machine; the node never joins
    added: list[dict[str, str]] = field(default_factory=list)

    def send_add_node_command(self, instance_id: str, parameters: Any) -> str | None:
        if not self.registered:
            return None
        if self.inner is not None:
            command_id = self.inner.send_add_node_command(instance_id, parameters)
        else:
            command_id = f"cmd-add-{len(self.added)}"
        self.added.append(dict(parameters))
        if not self.add_node_fails:
            self.cluster.join_by_add_node(parameters)
        self.node_by_instance[instance_id] = parameters["nodeName"]
        return command_id

    def send_stop_command(self, instance_id: str) -> str:
        if self.inner is not None:
            command_id = self.inner.send_stop_command(instance_id)
        else:
            command_id = f"cmd-{len(self.sent)}"
        self.sent.append(instance_id)
        self.cluster.stop_host(self.node_by_instance[instance_id])
        return command_id

    def command_status(self, command_id: str, instance_id: str) -> CommandStatus:
        if self.add_node_fails:
            return CommandStatus(command_id, "Failed", "AddNode.ps1: the node could not reach the seed")
        if self.inner:
            return self.inner.command_status(command_id, instance_id)
        return CommandStatus(command_id, "Success")


@dataclass
class RecordingLifecycle:
    """AutoScalingLifecycle that remembers calls; the action is pending until completed."""

    calls: list[tuple[str, str]] = field(default_factory=list)
    completed: bool = False

    def complete_lifecycle_action(self, hook: LifecycleHook, result: str) -> bool:
        self.calls.append(("complete", result))
        was_pending, self.completed = not self.completed, True
        return was_pending

    def record_lifecycle_action_heartbeat(self, hook: LifecycleHook) -> bool:
        self.calls.append(("heartbeat", hook.instance_id))
        return not self.completed

    def waiting_instances(self, group_name: str) -> list:
        return []  # the steps driven here never lose an event; the executions test that

    def instance_state(self, group_name: str, instance_id: str) -> str:
        return "InService"  # never retained, never ABANDONed; the executions test the others

    @property
    def heartbeats(self) -> int:
        return sum(1 for name, _ in self.calls if name == "heartbeat")

    @property
    def results(self) -> list[str]:
        """The results the action was completed with, in order (CONTINUE, ABANDON)."""
        return [value for name, value in self.calls if name == "complete"]


# -- driving the steps like the state machine -------------------------------------------


def _as_state(result: Any) -> dict[str, Any]:
    """What Step Functions would carry to the next state: the result as JSON."""
    return json.loads(json.dumps(result.to_dict()))


def loop(poll: Callable[[], WaitStatus], max_polls: int = 25) -> WaitStatus:
    """A Wait-state loop without the waiting: the clock moves one tick per poll."""
    ticks = itertools.count()
    return wait_until_done(
        poll,
        what="the test's wait",
        timeout_seconds=max_polls,
        interval_seconds=1,
        sleep=lambda seconds: None,
        clock=lambda: next(ticks),
    )


def drive_scale_in(
    client: ServiceFabricClient,
    *,
    instances: Any,
    host: Any,
    lifecycle: Any,
    hook: LifecycleHook,
) -> dict[str, dict[str, Any]]:
    """The scale-in state machine's path: resolve, refuse seeds, deactivate, wait Disabled, the
    removal upgrade (waiting out others), wait for it, check the node left; clean-up only if
    it did not."""
    states: dict[str, dict[str, Any]] = {}
    keep = {"lifecycle": lifecycle, "hook": hook}
    states["resolve"] = _as_state(resolve_node(client, instances, hook.instance_id))
    if not states["resolve"]["is_member"]:
        states["complete"] = _as_state(complete_lifecycle_action(lifecycle, hook))
        return states
    name = states["resolve"]["node_name"]
    states["seed"] = _as_state(refuse_seed_node(client, name))
    if states["seed"]["refused"]:
        states["hold"] = {"heartbeat": record_heartbeat(lifecycle, hook)}
        return states
    states["deactivate"] = _as_state(deactivate_node(client, name))
    states["disabled"] = _as_state(loop(lambda: poll_deactivation(client, name, **keep)))
    clock = itertools.count()
    while True:
        start = _as_state(start_configuration_removal(client, name, now=next(clock)))
        if start["outcome"] != Outcome.WAIT_FOR_UPGRADE:
            break
        states["waited_for_other_upgrade"] = _as_state(
            loop(lambda: poll_running_upgrade(client, **keep))
        )
    states["configuration"] = start
    if start["changed"]:
        states["upgrade"] = _as_state(
            loop(lambda: poll_configuration_upgrade(client, start, now=next(clock), **keep))
        )
    states["removal"] = _as_state(check_node_removed(client, name))
    if not states["removal"]["removed"]:
        if not states["removal"]["down"]:
            stop = _as_state(stop_fabric_host(client, host, name, hook.instance_id))
            states["stop_host"] = stop
            states["down"] = _as_state(
                loop(
                    lambda: poll_node_down(
                        client,
                        name,
                        host=host,
                        instance_id=stop["instance_id"],
                        command_id=stop["command_id"],
                        **keep,
                    )
                )
            )
        states["remove_state"] = _as_state(remove_node_state(client, name))
    states["complete"] = _as_state(complete_lifecycle_action(lifecycle, hook))
    return states


@pytest.fixture
def scale_in() -> Callable[..., dict[str, dict[str, Any]]]:
    return drive_scale_in


@pytest.fixture
def poll_loop() -> Callable[..., WaitStatus]:
    return loop


# -- moto --------------------------------------------------------------------------------


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every AWS call inside goes to moto; fake credentials so nothing can reach AWS."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    with mock_aws():
        yield


@pytest.fixture
def ec2(aws: None) -> Any:
    return boto3.client("ec2", region_name=REGION)


@pytest.fixture
def ssm(aws: None) -> Any:
    return boto3.client("ssm", region_name=REGION)


@pytest.fixture
def dynamodb(aws: None) -> Any:
    return boto3.client("dynamodb", region_name=REGION)


@pytest.fixture
def launch(ec2: Any) -> Callable[..., dict[str, Any]]:
    """Starts a moto instance, optionally tagged with a node name; returns its description."""
    image_id = "ami-12c6146b"  # any id does for moto; listing its images is slow

    def start(node_name: str = "") -> dict[str, Any]:
        options: dict[str, Any] = {}
        if node_name:
            options["TagSpecifications"] = [
                {"ResourceType": "instance", "Tags": [{"Key": "sf:nodename", "Value": node_name}]}
            ]
        answer = ec2.run_instances(
            ImageId=image_id, InstanceType="m5.large", MinCount=1, MaxCount=1, **options
        )
        return answer["Instances"][0]

    return start


# -- the stand-ins as fixtures (test modules do not import conftest) ---------------------


@pytest.fixture
def region() -> str:
    return REGION


@pytest.fixture
def recording_lifecycle() -> RecordingLifecycle:
    return RecordingLifecycle()


@pytest.fixture
def recording() -> Callable[[], RecordingLifecycle]:
    """Another RecordingLifecycle, for a test with more than one lifecycle action."""
    return RecordingLifecycle


@pytest.fixture
def machines(sf_cluster: EmulatedCluster) -> Callable[..., EmulatedMachines]:
    """machines({"i-1": "scale-0"}, inner=None): a FabricHost that stops emulated hosts."""

    def make(node_by_instance: dict[str, str], inner: Any = None) -> EmulatedMachines:
        return EmulatedMachines(sf_cluster, node_by_instance, inner)

    return make


@pytest.fixture
def instances() -> Callable[..., InstancesInMemory]:
    return InstancesInMemory
