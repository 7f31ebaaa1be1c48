"""The state machines' steps as the Lambdas run them: `{"step", "state"}` in, JSON out.

Driven here in the order the state machines call them (stacks/constructs/lifecycle_workflows.py),
against the HTTPS gateway emulator, moto's EC2, SSM, DynamoDB and Secrets Manager, and a
stand-in Auto Scaling that remembers the lifecycle calls (botocore's Stubber checks one
completion against the real API model).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from node_lifecycle import LifecycleError, Outcome
from node_lifecycle.fabric_host import SsmFabricHost
from node_lifecycle.instances import Ec2InstanceDirectory
from node_lifecycle.lifecycle_hooks import AutoScalingLifecycleHooks
from node_lifecycle.membership_lock import DynamoDbMembershipLock
from node_lifecycle.runtime import Runtime, connect_gateway
from node_lifecycle.settings import Settings, SettingsError
from node_lifecycle.workflow import (
    SCALE_IN_STEPS,
    SCALE_OUT_STEPS,
    reap_zombies,
    run_step,
)
from sf_rest import FabricError
from sf_rest.cluster_config import node_names, nodes_to_be_removed

pytestmark = pytest.mark.integration  # starts the HTTPS emulator

LOCK_TABLE = "telemetry-test-sf-membership-lock"
WAITS = {Outcome.WAIT_FOR_UPGRADE, Outcome.WAIT_FOR_INSTANCE}


def settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = dict(
        region="eu-west-1",
        gateway_endpoints=("https://127.0.0.1:19080",),
        admin_certificate_secret="admin",
        gateway_thumbprint_parameter="/telemetry-test/service-fabric/gateway-thumbprint",
        lock_table=LOCK_TABLE,
        lock_ttl_seconds=900,
        scaling_node_type="ScalingNodeType",
        add_node_document="telemetry-test-add-node",
        workflow_timeout_seconds=3600,
        operator_hold_seconds=1800,
        zombie_down_seconds=600,
        metrics_namespace="Telemetry/NodeLifecycle",
        cluster_name="telemetry-test",
    )
    values.update(overrides)
    return Settings(**values)


@dataclass
class Clock:
    now: float = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def lock_table(dynamodb) -> str:
    dynamodb.create_table(
        TableName=LOCK_TABLE,
        KeySchema=[{"AttributeName": "LockName", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "LockName", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return LOCK_TABLE


@pytest.fixture
def world(sf_client, ec2, ssm, dynamodb, lock_table, machines, recording_lifecycle):
    """A Runtime on the emulator and moto, plus what the tests look at."""
    clock = Clock()
    metrics: list[tuple[str, float, str]] = []
    host = machines({}, inner=SsmFabricHost(ssm, add_node_document="telemetry-test-add-node"))
    runtime = Runtime(
        settings=settings(),
        connect=lambda: sf_client,
        instances=Ec2InstanceDirectory(ec2),
        host=host,
        lifecycle=recording_lifecycle,
        lock=DynamoDbMembershipLock(dynamodb, lock_table, clock=clock),
        clock=clock,
        record_metric=lambda name, value, unit: metrics.append((name, value, unit)),
    )
    return runtime, clock, metrics, host


def lifecycle_event(instance_id: str, transition: str = "launch") -> dict[str, Any]:
    return {
        "source": "aws.autoscaling",
        "detail-type": f"EC2 Instance-{transition} Lifecycle Action",
        "detail": {
            "AutoScalingGroupName": "telemetry-test-sf-scaling",
            "LifecycleHookName": "sf-join-cluster" if transition == "launch" else "sf-leave-cluster",
            "EC2InstanceId": instance_id,
            "LifecycleActionToken": str(uuid.uuid4()),
            "LifecycleTransition": f"autoscaling:EC2_INSTANCE_{transition.upper()}ING",
        },
    }


class Execution:
    """One state machine execution: each step's result stored under its key, as the
    state machine's ResultPath does; Wait states move the clock."""

    def __init__(self, steps, runtime: Runtime, clock: Clock, event: dict, name: str = "exec-1"):
        self.steps, self.runtime, self.clock = steps, runtime, clock
        self.state: dict[str, Any] = self.step("begin", {"event": event, "execution": name})
        self.polls = 0

    def step(self, name: str, state: dict | None = None) -> dict[str, Any]:
        payload = {"step": name, "state": self.state if state is None else state}
        # Step Functions passes JSON: nothing but JSON survives between states.
        return json.loads(json.dumps(run_step(self.steps, self.runtime, payload)))

    def put(self, key: str, name: str) -> dict[str, Any]:
        self.state[key] = self.step(name)
        return self.state[key]

    def loop(self, key: str, name: str, wait: float = 15.0, limit: int = 40) -> dict[str, Any]:
        for _ in range(limit):
            result = self.put(key, name)
            self.polls += 1
            if result.get("done") or result.get("acquired"):
                return result
            self.clock.now += wait
        raise AssertionError(f"{name} never finished: {result}")

    def retry_while_waiting(self, key: str, name: str, wait: float = 30.0) -> dict[str, Any]:
        for _ in range(40):
            result = self.put(key, name)
            if result.get("outcome") not in WAITS:
                return result
            self.clock.now += wait
        raise AssertionError(f"{name} kept waiting: {result}")

    def fail(self, err: Exception) -> dict[str, Any]:
        cause = {"errorType": type(err).__name__, "errorMessage": str(err)}
        self.state["error"] = {"Error": type(err).__name__, "Cause": json.dumps(cause)}
        return self.put("failure", "fail")


def scale_out(execution: Execution) -> dict[str, Any]:
    try:
        execution.loop("lock", "acquire_lock")
        execution.put("plan", "plan_node")
        join = execution.retry_while_waiting("join", "join_node")
        if join["outcome"] in (Outcome.REQUESTED, Outcome.ALREADY_DONE):
            execution.loop("node_up", "poll_node_up")
        execution.put("tagging", "tag_node_instance")
        change = execution.retry_while_waiting("configuration", "start_configuration_registration")
        if change["changed"]:
            execution.loop("upgrade", "poll_configuration_upgrade")
        execution.put("finish", "finish")
    except (LifecycleError, FabricError) as err:
        execution.fail(err)
    return execution.state


def scale_in(execution: Execution) -> dict[str, Any]:
    try:
        execution.loop("lock", "acquire_lock")
        if not execution.put("node", "resolve_node")["is_member"]:
            execution.put("finish", "finish")
            return execution.state
        if execution.put("seed", "refuse_seed_node")["refused"]:
            execution.put("released", "release_lock")
            execution.loop("hold", "hold_instance", wait=300)
            return execution.state
        execution.put("deactivation", "deactivate_node")
        execution.loop("disabled", "poll_deactivation")
        change = execution.retry_while_waiting("configuration", "start_configuration_removal")
        if change["changed"]:
            execution.loop("upgrade", "poll_configuration_upgrade")
        removal = execution.put("removal", "check_node_removed")
        if not removal["removed"]:  # clean-up, as the state machine's "Node gone?" choice
            if not removal["down"]:
                execution.put("host_stop", "stop_fabric_host")
                execution.loop("down", "poll_node_down")
            execution.put("state_removal", "remove_node_state")
        execution.put("finish", "finish")
    except (LifecycleError, FabricError) as err:
        execution.fail(err)
    return execution.state


def launch_instance(ec2) -> dict[str, Any]:
    return ec2.run_instances(ImageId="ami-12c6146b", InstanceType="m5.large", MinCount=1, MaxCount=1)[
        "Instances"
    ][0]


def lock_holder(dynamodb) -> str | None:
    item = dynamodb.get_item(TableName=LOCK_TABLE, Key={"LockName": {"S": "cluster-membership"}}).get("Item")
    return item["Owner"]["S"] if item else None


def tags_of(ec2, instance_id: str) -> dict[str, str]:
    found = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    return {t["Key"]: t["Value"] for t in found.get("Tags", [])}


# -- scale-out --------------------------------------------------------------------------


def test_a_launched_instance_joins_the_cluster_and_the_configuration(world, ec2, dynamodb, sf_client, ssm):
    runtime, clock, metrics, machines = world
    instance = launch_instance(ec2)
    instance_id = instance["InstanceId"]
    state = scale_out(Execution(SCALE_OUT_STEPS, runtime, clock, lifecycle_event(instance_id)))

    assert "failure" not in state, state.get("failure")
    name = f"scale-{instance_id}"
    node = sf_client.get_node_info(name)
    assert node.status == "Up" and node.ip_address_or_fqdn == instance["PrivateIpAddress"]
    entry = next(n for n in sf_client.get_cluster_configuration()["nodes"] if n["nodeName"] == name)
    zone = instance["Placement"]["AvailabilityZone"]
    assert entry["faultDomain"] == f"fd:/eu-west-1/{zone}"
    # UD0 and UD1 hold a seed and a scaling node each, UD2 only a seed: the new node goes there.
    assert entry["upgradeDomain"] == "UD2"
    assert machines.added[0]["clientConnectionEndpoint"] == "10.0.1.10:19000"  # seed-0
    assert tags_of(ec2, instance_id)["sf:nodename"] == name
    assert runtime.lifecycle.results == ["CONTINUE"]
    assert lock_holder(dynamodb) is None
    assert [m[0] for m in metrics] == ["JoinsStarted", "JoinsSucceeded", "JoinDurationSeconds"]
    sent = ssm.list_commands()["Commands"]
    assert [c["DocumentName"] for c in sent] == ["telemetry-test-add-node"]
    assert sent[0]["Parameters"]["nodeName"] == [name]


def test_a_duplicated_launch_event_changes_nothing_the_second_time(world, ec2, sf_cluster):
    runtime, clock, _, machines = world
    instance_id = launch_instance(ec2)["InstanceId"]
    event = lifecycle_event(instance_id)
    scale_out(Execution(SCALE_OUT_STEPS, runtime, clock, event, "exec-1"))
    upgrades = len(sf_cluster.upgrade_requests)
    again = scale_out(Execution(SCALE_OUT_STEPS, runtime, clock, event, "exec-2"))
    assert again["join"]["outcome"] == Outcome.ALREADY_DONE
    # Nothing the cluster shows says the UOS knows the node, so the registration is sent
    # again: a version bump with nothing else to change, which completes.
    assert again["configuration"]["outcome"] == Outcome.REQUESTED
    assert sf_cluster.upgrades[-1].log[-1] == "completed"
    assert again["finish"]["outcome"] == Outcome.ALREADY_DONE  # the action was completed
    assert len(machines.added) == 1 and len(sf_cluster.upgrade_requests) == upgrades + 1


def test_a_join_waits_for_the_ssm_agent_and_for_a_running_upgrade(world, ec2, sf_client, sf_cluster):
    runtime, clock, _, machines = world
    instance_id = launch_instance(ec2)["InstanceId"]
    machines.registered = False
    execution = Execution(SCALE_OUT_STEPS, runtime, clock, lifecycle_event(instance_id))
    execution.loop("lock", "acquire_lock")
    execution.put("plan", "plan_node")
    assert execution.put("join", "join_node")["outcome"] == Outcome.WAIT_FOR_INSTANCE
    machines.registered = True
    sf_cluster.run_other_upgrade(ticks=6)  # an operator's upgrade that cannot be interrupted
    assert execution.put("join", "join_node")["outcome"] == Outcome.WAIT_FOR_UPGRADE
    assert machines.added == []  # AddNode refuses to run during an upgrade: never sent
    scale_out(execution)
    assert "failure" not in execution.state and execution.state["finish"]["result"] == "CONTINUE"


def test_a_failed_add_node_abandons_the_launch_and_alarms(world, ec2, dynamodb):
    runtime, clock, metrics, machines = world
    machines.add_node_fails = True
    instance_id = launch_instance(ec2)["InstanceId"]
    state = scale_out(Execution(SCALE_OUT_STEPS, runtime, clock, lifecycle_event(instance_id)))
    failure = state["failure"]
    assert failure["completion"] == Outcome.REQUESTED and runtime.lifecycle.results == ["ABANDON"]
    assert "NodeJoinFailed" in failure["message"] and "could not reach the seed" in failure["message"]
    assert failure["subject"].startswith("Service Fabric join failed")
    assert lock_holder(dynamodb) is None
    assert ("JoinsFailed", 1, "Count") in metrics


def test_a_half_added_node_is_deactivated_and_tagged_when_the_join_fails_later(world, ec2, sf_cluster, sf_emulator):
    runtime, clock, _, _ = world
    instance_id = launch_instance(ec2)["InstanceId"]
    sf_emulator.inject_error(400, "FABRIC_E_INVALID_CONFIGURATION", method="POST", path="StartClusterConfigurationUpgrade")
    state = scale_out(Execution(SCALE_OUT_STEPS, runtime, clock, lifecycle_event(instance_id)))
    name = f"scale-{instance_id}"
    assert state["failure"]["deactivated"] is True
    assert sf_cluster.node(name).deactivation_intent == "RemoveNode"
    assert tags_of(ec2, instance_id)["sf:nodename"] == name
    assert runtime.lifecycle.results == ["ABANDON"]


def test_no_seed_node_up_means_nothing_to_join_through(world, ec2, sf_cluster):
    runtime, clock, _, machines = world
    for seed in ("seed-0", "seed-1", "seed-2"):
        sf_cluster.stop_host(seed)
    instance_id = launch_instance(ec2)["InstanceId"]
    state = scale_out(Execution(SCALE_OUT_STEPS, runtime, clock, lifecycle_event(instance_id)))
    assert "no seed node is Up" in state["failure"]["message"]
    assert machines.added == [] and runtime.lifecycle.results == ["ABANDON"]


# -- scale-in ---------------------------------------------------------------------------


def tagged_instance(ec2, node_name: str) -> str:
    instance_id = launch_instance(ec2)["InstanceId"]
    ec2.create_tags(Resources=[instance_id], Tags=[{"Key": "sf:nodename", "Value": node_name}])
    return instance_id


def test_two_scale_ins_at_once_take_turns_and_both_nodes_leave(world, ec2, sf_client, sf_cluster, dynamodb):
    runtime, clock, metrics, machines = world
    first_id, second_id = tagged_instance(ec2, "scale-0"), tagged_instance(ec2, "scale-1")
    machines.node_by_instance.update({first_id: "scale-0", second_id: "scale-1"})
    first = Execution(SCALE_IN_STEPS, runtime, clock, lifecycle_event(first_id, "terminate"), "a")
    second = Execution(SCALE_IN_STEPS, runtime, clock, lifecycle_event(second_id, "terminate"), "b")
    assert first.put("lock", "acquire_lock")["acquired"]
    waiting = second.put("lock", "acquire_lock")
    assert not waiting["acquired"] and waiting["holder"] == first.state["owner"]
    assert runtime.lifecycle.calls[-1] == ("heartbeat", second_id)  # kept alive while waiting
    scale_in(first)
    scale_in(second)
    config = sf_client.get_cluster_configuration()
    for name in ("scale-0", "scale-1"):
        assert sf_client.get_node_info(name) is None and name not in node_names(config)
    # One upgrade each, each naming only its own node (no stale NodesToBeRemoved).
    assert [u.removing for u in sf_cluster.upgrades] == [("scale-0",), ("scale-1",)]
    assert nodes_to_be_removed(config) == ["scale-1"]
    assert runtime.lifecycle.results == ["CONTINUE", "CONTINUE"]
    assert [m[0] for m in metrics].count("DrainsSucceeded") == 2
    assert lock_holder(dynamodb) is None


def test_an_instance_that_never_joined_completes_at_once(world, ec2, sf_emulator):
    runtime, clock, metrics, _ = world
    instance_id = launch_instance(ec2)["InstanceId"]  # untagged, no node at its address
    state = scale_in(Execution(SCALE_IN_STEPS, runtime, clock, lifecycle_event(instance_id, "terminate")))
    assert state["node"]["is_member"] is False and state["finish"]["drained"] is False
    assert runtime.lifecycle.results == ["CONTINUE"] and metrics == []
    assert [r.method for r in sf_emulator.requests].count("POST") == 0


def test_a_seed_node_is_held_for_an_operator_then_let_go_untouched(world, ec2, sf_cluster, sf_emulator, dynamodb):
    runtime, clock, _, _ = world
    instance_id = tagged_instance(ec2, "seed-1")
    state = scale_in(Execution(SCALE_IN_STEPS, runtime, clock, lifecycle_event(instance_id, "terminate")))
    assert state["seed"]["refused"] is True and state["hold"]["done"] is True
    assert state["hold"]["held_seconds"] >= runtime.settings.operator_hold_seconds
    heartbeats = [c for c in runtime.lifecycle.calls if c[0] == "heartbeat"]
    assert len(heartbeats) >= runtime.settings.operator_hold_seconds // 300
    assert runtime.lifecycle.results == []  # never completed: the operator decides
    assert sf_cluster.node("seed-1").status == "Up"
    assert [r.method for r in sf_emulator.requests].count("POST") == 0
    assert lock_holder(dynamodb) is None  # others are not blocked while the seed is held


def test_a_stalled_drain_fails_at_the_deadline_and_alarms(world, ec2, sf_cluster, dynamodb):
    runtime, clock, metrics, machines = world
    runtime.settings = settings(workflow_timeout_seconds=300)
    instance_id = tagged_instance(ec2, "scale-0")
    machines.node_by_instance[instance_id] = "scale-0"
    sf_cluster.set_stuck_in_safety_check("scale-0")
    state = scale_in(Execution(SCALE_IN_STEPS, runtime, clock, lifecycle_event(instance_id, "terminate")))
    message = state["failure"]["message"]
    assert "WaitTimedOut" in message and "scale-0 to be Disabled" in message
    assert "held with lifecycle heartbeats for 30 minutes" in message
    assert ("DrainsFailed", 1, "Count") in metrics
    assert lock_holder(dynamodb) is None and runtime.lifecycle.results == []
    # Then the instance is held for an operator: heartbeats until the hold is over.
    failed_at = clock.now
    heartbeats = runtime.lifecycle.heartbeats
    hold = Execution.__new__(Execution)
    hold.steps, hold.runtime, hold.clock, hold.state, hold.polls = (
        SCALE_IN_STEPS, runtime, clock, state, 0
    )
    held = hold.loop("failure_hold", "hold_instance", wait=300)
    assert held["done"] is True and clock.now - failed_at >= runtime.settings.operator_hold_seconds
    assert runtime.lifecycle.heartbeats - heartbeats >= runtime.settings.operator_hold_seconds // 300
    assert runtime.lifecycle.results == []  # never completed by the automation


def test_a_drain_rerun_after_a_crash_between_steps_finishes(world, ec2, sf_client, sf_cluster):
    runtime, clock, _, machines = world
    instance_id = tagged_instance(ec2, "scale-1")
    machines.node_by_instance[instance_id] = "scale-1"
    crashed = Execution(SCALE_IN_STEPS, runtime, clock, lifecycle_event(instance_id, "terminate"), "a")
    crashed.loop("lock", "acquire_lock")
    crashed.put("node", "resolve_node")
    crashed.put("deactivation", "deactivate_node")
    crashed.loop("disabled", "poll_deactivation")
    sf_cluster.upgrade_ticks = 10  # the removal is still rolling when the re-run arrives
    crashed.put("configuration", "start_configuration_removal")  # ... and the execution dies here
    clock.now += runtime.settings.lock_ttl_seconds + 1  # its lock expires
    rerun = scale_in(Execution(SCALE_IN_STEPS, runtime, clock, lifecycle_event(instance_id, "terminate"), "b"))
    assert "failure" not in rerun
    assert rerun["deactivation"]["outcome"] == Outcome.ALREADY_DONE
    assert len(sf_cluster.upgrade_requests) == 1
    assert sf_client.get_node_info("scale-1") is None and rerun["removal"]["removed"] is True


# -- the reaper -------------------------------------------------------------------------


def reap(runtime: Runtime) -> dict[str, Any]:
    return json.loads(json.dumps(reap_zombies(runtime, now=datetime.now(timezone.utc))))


def test_the_reaper_counts_zombies_and_seeds_down_and_changes_nothing(
    world, ec2, sf_client, sf_cluster, sf_emulator, dynamodb
):
    runtime, _, metrics, _ = world
    gone = tagged_instance(ec2, "scale-0")
    ec2.terminate_instances(InstanceIds=[gone])
    tagged_instance(ec2, "scale-1")  # running: its node may come back
    for name in ("scale-0", "scale-1", "seed-2"):
        sf_cluster.stop_host(name)
        sf_cluster.nodes[name].down_since = sf_cluster.clock() - 3600
    result = reap(runtime)
    assert result["zombies"] == ["scale-0"] and result["seed_nodes_down"] == ["seed-2"]
    assert result["waiting"] == ["scale-1"]
    assert ("ZombieNodes", 1, "Count") in metrics and ("SeedNodesDown", 1, "Count") in metrics
    # No RemoveNodeState, no upgrade: the UOS would refuse to remove a machine that is gone,
    # and a node state removed by hand blocks every later upgrade (test_node_lifecycle_membership).
    assert [r.method for r in sf_emulator.requests].count("POST") == 0
    assert sf_cluster.node("scale-0").status == "Down" and "scale-0" in sf_cluster.uos_nodes
    assert lock_holder(dynamodb) is None  # the reaper never takes the membership lock


# -- settings and the gateway connection ------------------------------------------------


ENVIRONMENT = {
    "AWS_REGION": "eu-west-1",
    "SF_GATEWAY_ENDPOINTS": "https://10.0.1.10:19080,https://10.0.1.11:19080",
    "SF_ADMIN_CERTIFICATE_SECRET": "admin",
    "SF_GATEWAY_THUMBPRINT_PARAMETER": "/telemetry-test/service-fabric/gateway-thumbprint",
    "LOCK_TABLE_NAME": LOCK_TABLE,
    "LOCK_TTL_SECONDS": "900",
    "SCALING_NODE_TYPE": "ScalingNodeType",
    "ADD_NODE_DOCUMENT": "telemetry-test-add-node",
    "WORKFLOW_TIMEOUT_SECONDS": "3600",
    "OPERATOR_HOLD_SECONDS": "1800",
    "ZOMBIE_DOWN_SECONDS": "600",
    "METRICS_NAMESPACE": "Telemetry/NodeLifecycle",
    "CLUSTER_NAME": "telemetry-test",
}


def test_settings_come_from_the_environment_and_name_what_is_wrong():
    parsed = Settings.from_environ(ENVIRONMENT)
    assert parsed.gateway_endpoints == ("https://10.0.1.10:19080", "https://10.0.1.11:19080")
    with pytest.raises(SettingsError, match="LOCK_TABLE_NAME is not set"):
        Settings.from_environ({**ENVIRONMENT, "LOCK_TABLE_NAME": ""})
    with pytest.raises(SettingsError, match=r"LOCK_TTL_SECONDS='ten'.*>= 60"):
        Settings.from_environ({**ENVIRONMENT, "LOCK_TTL_SECONDS": "ten"})
    with pytest.raises(SettingsError, match="http://10.0.1.10:19080 is not https"):
        Settings.from_environ({**ENVIRONMENT, "SF_GATEWAY_ENDPOINTS": "http://10.0.1.10:19080"})


def test_unknown_steps_are_refused_by_name(world):
    runtime = world[0]
    with pytest.raises(LifecycleError, match="unknown step 'drain'; known: acquire_lock"):
        run_step(SCALE_IN_STEPS, runtime, {"step": "drain", "state": {}})


def test_the_gateway_connection_skips_a_dead_seed_and_pins_the_published_thumbprint(
    aws, sf_emulator, sf_pki, region
):
    """The thumbprint comes from the SSM parameter bootstrap_cluster.py writes: the functions
    never read the cluster certificate secret."""
    secrets = boto3.client("secretsmanager", region_name=region)
    ssm = boto3.client("ssm", region_name=region)
    secrets.create_secret(
        Name="admin",
        SecretString=json.dumps({"certificate": sf_pki.client.cert_pem, "private_key": sf_pki.client.key_pem}),
    )
    parameter = "/telemetry-test/service-fabric/gateway-thumbprint"
    with pytest.raises(SettingsError, match=f"SSM parameter {parameter} does not exist; scripts/bootstrap_cluster.py"):
        connect_gateway(settings(gateway_endpoints=(sf_emulator.endpoint,)), secrets, ssm)
    ssm.put_parameter(Name=parameter, Value=sf_pki.server.sha1_thumbprint.lower(), Type="String")
    dead = "https://127.0.0.1:9"  # nothing listens on the discard port
    client = connect_gateway(settings(gateway_endpoints=(dead, sf_emulator.endpoint)), secrets, ssm)
    try:
        assert client.endpoint == sf_emulator.endpoint
        assert client.get_node_info("seed-0").is_seed_node
    finally:
        client.close()
    ssm.put_parameter(Name=parameter, Value=sf_pki.client.sha1_thumbprint, Type="String", Overwrite=True)
    with pytest.raises(FabricError):  # a gateway with another certificate is not trusted
        connect_gateway(settings(gateway_endpoints=(sf_emulator.endpoint,)), secrets, ssm)
    ssm.put_parameter(Name=parameter, Value="not-a-thumbprint", Type="String", Overwrite=True)
    with pytest.raises(SettingsError, match="holds 'not-a-thumbprint', not a thumbprint"):
        connect_gateway(settings(gateway_endpoints=(sf_emulator.endpoint,)), secrets, ssm)


def test_completing_a_launch_is_a_valid_auto_scaling_call(aws, region):
    client = boto3.client("autoscaling", region_name=region)
    hooks = AutoScalingLifecycleHooks(client)
    event = lifecycle_event("i-0123456789abcdef0")
    from node_lifecycle import LifecycleHook

    hook = LifecycleHook.from_event_detail(event["detail"])
    with Stubber(client) as stubber:
        stubber.add_response(
            "complete_lifecycle_action",
            {},
            {
                "LifecycleHookName": "sf-join-cluster",
                "AutoScalingGroupName": "telemetry-test-sf-scaling",
                "LifecycleActionToken": hook.token,
                "LifecycleActionResult": "ABANDON",
            },
        )
        assert hooks.complete_lifecycle_action(hook, "ABANDON") is True
        stubber.assert_no_pending_responses()


def test_the_reaper_handler_publishes_embedded_metrics_for_the_cluster(world, ec2, sf_cluster, monkeypatch, capsys):
    import node_lifecycle.handlers as handlers

    runtime = world[0]
    for name, value in ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(Runtime, "from_settings", classmethod(lambda cls, settings, session: runtime))
    monkeypatch.setattr(handlers, "_runtime", None)
    ec2.terminate_instances(InstanceIds=[tagged_instance(ec2, "scale-0")])
    sf_cluster.stop_host("scale-0")
    sf_cluster.nodes["scale-0"].down_since = sf_cluster.clock() - 3600

    answer = handlers.reaper({"source": "aws.events"}, None)

    assert list(answer["zombies"]) == ["scale-0"]
    emf = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert emf["Cluster"] == "telemetry-test" and emf["ZombieNodes"] == [1.0]
    directive = emf["_aws"]["CloudWatchMetrics"][0]
    assert directive["Namespace"] == "Telemetry/NodeLifecycle" and directive["Dimensions"] == [["Cluster"]]
