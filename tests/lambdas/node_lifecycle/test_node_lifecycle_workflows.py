"""The steps as the Lambdas run them, `{"step", "state"}` in and JSON out, where a test needs
what an execution cannot show: a re-run after an execution died between two steps, the reaper,
the settings and the gateway connection.

The state machines themselves are executed in test_state_machines_executed.py; here the steps
are called in the scale-in state machine's order against the HTTPS gateway emulator, moto's EC2,
SSM, DynamoDB and Secrets Manager, and a stand-in Auto Scaling that remembers the lifecycle
calls (botocore's Stubber checks one completion against the real API model).
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
from node_lifecycle.workflow import SCALE_IN_STEPS, reap_zombies, run_step
from sf_rest import FabricError

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
        stop_host_document="telemetry-test-sf-stop-host",
        workflow_timeout_seconds=3600,
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


def scale_in(execution: Execution) -> dict[str, Any]:
    try:
        execution.loop("lock", "acquire_lock")
        if not execution.put("node", "resolve_node")["is_member"]:
            execution.put("finish", "finish")
            return execution.state
        if execution.put("seed", "refuse_seed_node")["refused"]:
            execution.put("retained", "retain_instance")
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


# -- scale-in ---------------------------------------------------------------------------


def tagged_instance(ec2, node_name: str) -> str:
    instance_id = launch_instance(ec2)["InstanceId"]
    ec2.create_tags(Resources=[instance_id], Tags=[{"Key": "sf:nodename", "Value": node_name}])
    return instance_id


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
    "STOP_HOST_DOCUMENT": "telemetry-test-sf-stop-host",
    "WORKFLOW_TIMEOUT_SECONDS": "3600",
    "ZOMBIE_DOWN_SECONDS": "600",
    "METRICS_NAMESPACE": "Telemetry/NodeLifecycle",
    "CLUSTER_NAME": "telemetry-test",
    "SCALING_GROUP_NAME": "telemetry-test-sf-scaling",
    "LAUNCH_HOOK_NAME": "sf-join-cluster",
    "TERMINATE_HOOK_NAME": "sf-leave-cluster",
    "SCALE_OUT_STATE_MACHINE_ARN": "arn:aws:states:eu-west-1:123456789012:stateMachine:telemetry-test-sf-scale-out",
    "SCALE_IN_STATE_MACHINE_ARN": "arn:aws:states:eu-west-1:123456789012:stateMachine:telemetry-test-sf-scale-in",
    "LIFECYCLE_GLOBAL_TIMEOUT_SECONDS": "90000",
    "PATCH_NODE_TIMEOUT_SECONDS": "3600",
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
    """The thumbprint comes from the SSM parameter telemetry/commands/cluster/bootstrap.py writes: the functions
    never read the cluster certificate secret."""
    secrets = boto3.client("secretsmanager", region_name=region)
    ssm = boto3.client("ssm", region_name=region)
    secrets.create_secret(
        Name="admin",
        SecretString=json.dumps({"certificate": sf_pki.client.cert_pem, "private_key": sf_pki.client.key_pem}),
    )
    parameter = "/telemetry-test/service-fabric/gateway-thumbprint"
    with pytest.raises(SettingsError, match=f"SSM parameter {parameter} does not exist; telemetry cluster bootstrap"):
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


def test_the_reaper_starts_nothing_for_an_action_auto_scaling_no_longer_has(world):
    """Between the reaper's look at the group and its heartbeat the action can end (completed, or
    timed out): the heartbeat answers 'no active lifecycle action', and there is nothing to save."""
    from dataclasses import replace

    from node_lifecycle.interfaces import WaitingInstance
    from node_lifecycle.workflow import restart_orphaned_actions

    class Gone:
        def waiting_instances(self, group_name):
            return [WaitingInstance("i-0gone", "terminate")]

        def record_lifecycle_action_heartbeat(self, hook):
            return False

    class NoExecutions:
        started: list = []

        def instances_served(self, arn, *, since):
            return set()

        def start(self, arn, name, event):
            self.started.append(name)
            return "arn"

    executions = NoExecutions()
    runtime = replace(world[0], settings=settings(scaling_group_name="telemetry-test-sf-scaling",
                      terminate_hook_name="sf-leave-cluster", scale_in_state_machine_arn=ENVIRONMENT["SCALE_IN_STATE_MACHINE_ARN"],
                      global_timeout_seconds=90_000), lifecycle=Gone(), executions=executions)  # fmt: skip

    answer = restart_orphaned_actions(runtime)

    assert (answer["actions_restarted"], answer["actions_gone"], executions.started) == ([], ["i-0gone"], [])


@pytest.mark.parametrize(
    ("stage", "error", "left"),
    [
        # The install was sent and had not ended when the run stopped: it may yet reboot the node.
        ("install", "WaitTimedOut: gave up waiting for the updates to install", "left deactivated, because an install may still be running"),
        # It ended Failed: nothing more will reboot the node, which goes back into service.
        ("install", "PatchInstallFailed: installing updates on scale-0 ended Failed", "Disabled and has been activated again"),
        ("deactivate", "ClusterNotHealthy: cluster health is Warning", "Disabled and has been activated again"),
    ],
)
def test_a_stopped_patch_run_activates_its_node_unless_an_install_may_still_reboot_it(world, dynamodb, lock_table, sf_client,
                                                                                       sf_cluster, stage, error, left):  # fmt: skip
    from node_lifecycle.patch_progress import DynamoDbPatchProgress
    from node_lifecycle.patching import stop

    runtime, clock, _, _ = world
    runtime.patch_progress = DynamoDbPatchProgress(dynamodb, lock_table, clock)
    owner = "patch:run-1"
    runtime.patch_progress.claim(owner, lease_seconds=600)
    runtime.patch_progress.record(owner, current="scale-0", stage=stage, lease_seconds=600)
    sf_client.deactivate_node("scale-0", "Restart")
    sf_cluster.tick(3)
    state = {"run": {"owner": owner}, "current": {"node_name": "scale-0"},
             "error": {"Error": "PermanentError", "Cause": json.dumps({"errorMessage": error})}}  # fmt: skip

    alarm = stop(runtime, state)

    assert left in alarm["node_left"]
    assert (sf_client.get_node_info("scale-0").status == "Up") == ("activated again" in left)
    assert runtime.patch_progress.read().owner == "" and "scale-0: " + error in runtime.patch_progress.read().stopped
