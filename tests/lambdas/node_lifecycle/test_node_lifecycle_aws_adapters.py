"""The AWS adapters: EC2, SSM and DynamoDB through moto; Auto Scaling through botocore's Stubber
(moto does not implement the lifecycle action calls)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from node_lifecycle import LifecycleHook, Outcome, complete_lifecycle_action, record_heartbeat
from node_lifecycle.fabric_host import STOP_SCRIPT, SsmFabricHost
from node_lifecycle.instances import Ec2InstanceDirectory
from node_lifecycle.lifecycle_hooks import AutoScalingLifecycleHooks
from node_lifecycle.membership_lock import DynamoDbMembershipLock

TOKEN = "bcd2f1b8-9a78-44d3-8a7a-4dd07d7cf635"
HOOK = LifecycleHook("sf-scaling", "drain-on-terminate", "i-0123456789abcdef0", TOKEN)


# -- EC2 -----------------------------------------------------------------------------------


def test_instances_are_described_with_their_node_tag_address_and_state(ec2, launch):
    tagged = launch(node_name="scale-3")
    untagged = launch()
    ec2.terminate_instances(InstanceIds=[untagged["InstanceId"]])
    directory = Ec2InstanceDirectory(ec2)

    found = directory.describe_instance(tagged["InstanceId"])
    gone = directory.describe_instance(untagged["InstanceId"])

    assert (found.node_name, found.state) == ("scale-3", "running")
    assert found.private_ip == tagged["PrivateIpAddress"]
    assert gone.node_name == "" and gone.state == "terminated"
    assert directory.describe_instance("i-0123456789abcdef0") is None  # EC2 forgot it
    assert [i.node_name for i in directory.list_node_instances()] == ["scale-3"]


# -- SSM -----------------------------------------------------------------------------------


def test_the_stop_command_runs_the_stacks_stop_host_document_and_passes_no_script(ssm):
    """The document holds the script (stacks/constructs/node_scripts.py render_stop_host_document);
    the sender gives only its timeout, so Run Command runs nothing else."""
    from stacks.constructs.node_scripts import render_stop_host_document

    document = render_stop_host_document()
    ssm.create_document(Name="telemetry-test-sf-stop-host", Content=json.dumps(document), DocumentType="Command",
                        DocumentFormat="JSON")
    host = SsmFabricHost(ssm, stop_host_document="telemetry-test-sf-stop-host", execution_timeout_seconds=300)
    sent: list[dict] = []
    ssm.meta.events.register("provide-client-params.ssm.SendCommand", lambda params, **_: sent.append(dict(params)))

    command_id = host.send_stop_command("i-0123456789abcdef0")
    status = host.command_status(command_id, "i-0123456789abcdef0")

    (command,) = ssm.list_commands(CommandId=command_id)["Commands"]
    assert command["DocumentName"] == "telemetry-test-sf-stop-host"
    assert command["InstanceIds"] == ["i-0123456789abcdef0"]
    assert command["Parameters"] == {"executionTimeout": ["300"]}
    (request,) = sent  # moto's ListCommands does not echo DocumentVersion: the request as sent
    assert request["DocumentVersion"] == "$LATEST"  # the version the stack deployed last, not the default
    (step,) = document["mainSteps"]
    assert step["inputs"]["runCommand"] == STOP_SCRIPT.read_text().splitlines()
    assert set(document["parameters"]) == {"executionTimeout"}
    assert (status.status, status.succeeded, status.failed) == ("Success", True, False)


def test_an_invocation_not_visible_yet_reads_as_pending(ssm):
    host = SsmFabricHost(ssm, stop_host_document="telemetry-test-sf-stop-host")
    command_id = host.send_stop_command("i-0123456789abcdef0")

    status = host.command_status(command_id, "i-0fedcba9876543210")  # not (yet) known

    assert (status.status, status.failed) == ("Pending", False)


def test_the_stop_script_is_idempotent_powershell_for_the_fabric_host_service():
    script = STOP_SCRIPT.read_text()

    assert "$serviceName = 'FabricHostSvc'" in script
    assert "Stop-Service -Name $serviceName -Force" in script
    # Stopping only what runs, and tolerating a missing service, is what makes a re-run safe.
    assert "if ($service.Status -ne 'Stopped')" in script
    assert "Get-Service -Name $serviceName -ErrorAction SilentlyContinue" in script
    assert script.count("{") == script.count("}")


# -- DynamoDB lock -------------------------------------------------------------------------


@pytest.fixture
def lock_table(dynamodb) -> str:
    dynamodb.create_table(
        TableName="sf-membership-lock",
        KeySchema=[{"AttributeName": "LockName", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "LockName", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return "sf-membership-lock"


@pytest.fixture
def clock():
    now = [1_000_000.0]
    return now


@pytest.fixture
def lock(dynamodb, lock_table, clock) -> DynamoDbMembershipLock:
    return DynamoDbMembershipLock(dynamodb, lock_table, clock=lambda: clock[0])


def test_two_owners_contend_and_only_one_holds_the_lock(lock):
    first = lock.acquire("scale-in/i-0aaa", ttl_seconds=900)
    second = lock.acquire("scale-out/i-0bbb", ttl_seconds=900)

    assert first.acquired and first.holder == "scale-in/i-0aaa"
    assert (second.acquired, second.holder) == (False, "scale-in/i-0aaa")
    assert second.expires_at == first.expires_at == 1_000_900


def test_acquiring_again_as_the_same_owner_renews_the_lock(lock, clock):
    lock.acquire("scale-in/i-0aaa", ttl_seconds=900)
    clock[0] += 600

    again = lock.acquire("scale-in/i-0aaa", ttl_seconds=900)

    assert again.acquired and again.expires_at == 1_001_500


def test_an_expired_lock_is_taken_over(lock, clock):
    lock.acquire("reaper/run-1", ttl_seconds=300)  # and then the reaper died
    clock[0] += 299
    too_early = lock.acquire("scale-in/i-0aaa", ttl_seconds=900)
    clock[0] += 2
    taken = lock.acquire("scale-in/i-0aaa", ttl_seconds=900)

    assert (too_early.acquired, too_early.holder) == (False, "reaper/run-1")
    assert (taken.acquired, taken.holder) == (True, "scale-in/i-0aaa")
    late = lock.release("reaper/run-1")  # the old owner wakes up
    assert (late.released, late.holder) == (False, "scale-in/i-0aaa")


def test_only_the_owner_releases_the_lock(lock):
    lock.acquire("scale-in/i-0aaa", ttl_seconds=900)

    refused = lock.release("scale-out/i-0bbb")
    released = lock.release("scale-in/i-0aaa")
    released_again = lock.release("scale-in/i-0aaa")
    next_owner = lock.acquire("scale-out/i-0bbb", ttl_seconds=900)

    assert (refused.released, refused.holder) == (False, "scale-in/i-0aaa")
    assert released.released is True
    assert (released_again.released, released_again.holder) == (False, "")  # nothing held
    assert next_owner.acquired


def test_the_lock_refuses_nonsense(lock):
    with pytest.raises(ValueError, match="owner"):
        lock.acquire("", ttl_seconds=60)
    with pytest.raises(ValueError, match="ttl"):
        lock.acquire("someone", ttl_seconds=0)


def test_a_refused_owner_learns_the_holders_intent_node_and_since(lock, clock):
    lock.acquire("operator-drain:scale-3:ana@laptop:4242", ttl_seconds=900, intent="drain", node="scale-3")
    clock[0] += 60

    refused = lock.acquire("scale-out:i-0bbb:exec", ttl_seconds=900, intent="join", node="scale-7")

    assert refused.acquired is False
    assert (refused.holder, refused.intent, refused.node) == ("operator-drain:scale-3:ana@laptop:4242", "drain", "scale-3")
    assert (refused.since, refused.expires_at) == (1_000_000, 1_000_900)


def test_a_renewal_keeps_since_and_a_take_over_starts_a_new_one(lock, clock):
    first = lock.acquire("patch:run-1", ttl_seconds=300, intent="patch", node="seed-0")
    clock[0] += 200
    renewed = lock.acquire("patch:run-1", ttl_seconds=300, intent="patch", node="seed-0")
    clock[0] += 301  # and then the patch run died
    taken = lock.acquire("scale-in:i-0aaa:exec", ttl_seconds=900, intent="drain", node="scale-1")

    assert (first.since, first.expires_at) == (1_000_000, 1_000_300)
    assert (renewed.acquired, renewed.since, renewed.expires_at) == (True, 1_000_000, 1_000_500)
    assert (taken.acquired, taken.holder, taken.since) == (True, "scale-in:i-0aaa:exec", 1_000_501)
    assert (taken.intent, taken.node) == ("drain", "scale-1")
    assert (first.renewed, renewed.renewed, taken.renewed) == (False, True, False)  # what a holder checks


def test_current_says_who_holds_the_lock_and_nobody_once_it_expired_or_went(lock, clock):
    assert lock.current() is None
    lock.acquire("reaper:run-9", ttl_seconds=300, intent="reap")
    clock[0] += 10

    held = lock.current()

    assert held is not None and held.acquired is False  # a look, not a take
    assert (held.holder, held.intent, held.node, held.since, held.expires_at) == (
        "reaper:run-9", "reap", "", 1_000_000, 1_000_300)
    clock[0] += 291
    assert lock.current() is None  # expired: nobody holds it, whatever the item says
    lock.acquire("reaper:run-10", ttl_seconds=300)
    lock.release("reaper:run-10")
    assert lock.current() is None


def test_a_lock_item_written_before_intent_existed_reads_without_it_and_gains_since(lock, dynamodb, lock_table, clock):
    dynamodb.put_item(TableName=lock_table, Item={"LockName": {"S": "cluster-membership"},
                                                  "Owner": {"S": "scale-in:i-0old"}, "ExpiresAt": {"N": "1000900"}})

    held = lock.current()
    renewed = lock.acquire("scale-in:i-0old", ttl_seconds=900)

    assert (held.holder, held.intent, held.node, held.since) == ("scale-in:i-0old", "", "", 0.0)
    assert (renewed.acquired, renewed.since) == (True, 1_000_000)


def test_the_lock_writes_are_conditional_as_the_dynamodb_model_takes_them(lock_table):
    """The exact requests, checked against DynamoDB's API model by botocore's Stubber: a renewal
    that is refused (not ours), then the conditional put that takes it."""
    client = boto3.client("dynamodb", region_name="eu-west-1")
    key = {"LockName": {"S": "cluster-membership"}}
    values = {":owner": {"S": "op"}, ":expires": {"N": "1000900"}, ":intent": {"S": "drain"},
              ":node": {"S": "scale-0"}, ":now": {"N": "1000000"}}
    with Stubber(client) as stub:
        stub.add_client_error("update_item", "ConditionalCheckFailedException", expected_params={
            "TableName": lock_table, "Key": key,
            "UpdateExpression": "SET ExpiresAt = :expires, Intent = :intent, #node = :node, "
                                "Since = if_not_exists(Since, :now)",
            "ConditionExpression": "#owner = :owner",
            "ExpressionAttributeNames": {"#owner": "Owner", "#node": "Node"},
            "ExpressionAttributeValues": values, "ReturnValues": "ALL_NEW"})
        stub.add_response("put_item", {}, expected_params={
            "TableName": lock_table,
            "Item": {**key, "Owner": {"S": "op"}, "ExpiresAt": {"N": "1000900"}, "Intent": {"S": "drain"},
                     "Node": {"S": "scale-0"}, "Since": {"N": "1000000"}},
            "ConditionExpression": "attribute_not_exists(LockName) OR ExpiresAt < :now",
            "ExpressionAttributeValues": {":now": {"N": "1000000"}}})
        grant = DynamoDbMembershipLock(client, lock_table, clock=lambda: 1_000_000.0).acquire(
            "op", ttl_seconds=900, intent="drain", node="scale-0")
        stub.assert_no_pending_responses()

    assert (grant.acquired, grant.since, grant.node) == (True, 1_000_000, "scale-0")


# -- Auto Scaling lifecycle actions (Stubber) -------------------------------------------


@pytest.fixture
def autoscaling(aws, region):
    client = boto3.client("autoscaling", region_name=region)
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


ADDRESS = {
    "LifecycleHookName": "drain-on-terminate",
    "AutoScalingGroupName": "sf-scaling",
    "LifecycleActionToken": TOKEN,
}
NO_ACTION = "No active Lifecycle Action found with token " + TOKEN


def test_completing_a_pending_action_continues_the_termination(autoscaling):
    client, stubber = autoscaling
    stubber.add_response(
        "complete_lifecycle_action", {}, {**ADDRESS, "LifecycleActionResult": "CONTINUE"}
    )

    completion = complete_lifecycle_action(AutoScalingLifecycleHooks(client), HOOK)

    assert completion.to_dict() == {
        "instance_id": "i-0123456789abcdef0",
        "outcome": "requested",
        "result": "CONTINUE",
        "changed": True,
    }


def test_completing_an_action_already_completed_is_fine(autoscaling):
    client, stubber = autoscaling
    stubber.add_client_error(
        "complete_lifecycle_action", "ValidationError", NO_ACTION, http_status_code=400
    )

    completion = complete_lifecycle_action(AutoScalingLifecycleHooks(client), HOOK)

    assert completion.outcome == Outcome.ALREADY_DONE


def test_without_a_token_the_action_is_addressed_by_instance(autoscaling):
    client, stubber = autoscaling
    hook = LifecycleHook("sf-scaling", "drain-on-terminate", "i-0123456789abcdef0")
    stubber.add_response(
        "record_lifecycle_action_heartbeat",
        {},
        {
            "LifecycleHookName": "drain-on-terminate",
            "AutoScalingGroupName": "sf-scaling",
            "InstanceId": "i-0123456789abcdef0",
        },
    )

    assert record_heartbeat(AutoScalingLifecycleHooks(client), hook) is True


def test_heartbeats_report_an_action_that_is_gone_and_raise_other_errors(autoscaling):
    client, stubber = autoscaling
    stubber.add_client_error(
        "record_lifecycle_action_heartbeat", "ValidationError", NO_ACTION, http_status_code=400
    )
    stubber.add_client_error(
        "record_lifecycle_action_heartbeat", "AccessDenied", "not allowed", http_status_code=403
    )
    lifecycle = AutoScalingLifecycleHooks(client)

    assert record_heartbeat(lifecycle, HOOK) is False
    with pytest.raises(ClientError, match="AccessDenied"):
        record_heartbeat(lifecycle, HOOK)
    assert record_heartbeat(None, None) is None  # an operator's run has no hook


def test_an_instances_lifecycle_state_is_read_from_its_group_and_empty_once_it_is_gone(autoscaling):
    client, stubber = autoscaling
    instance = {"InstanceId": "i-0123456789abcdef0", "AvailabilityZone": "eu-west-1a", "LifecycleState": "Terminating",
                "HealthStatus": "Healthy", "ProtectedFromScaleIn": False}  # fmt: skip
    group = {"AutoScalingGroupName": "sf-scaling", "MinSize": 0, "MaxSize": 3, "DesiredCapacity": 1,
             "DefaultCooldown": 300, "AvailabilityZones": ["eu-west-1a"], "HealthCheckType": "EC2",
             "CreatedTime": datetime(2026, 11, 1, tzinfo=timezone.utc)}  # fmt: skip
    for listed in ([instance], []):
        stubber.add_response("describe_auto_scaling_groups", {"AutoScalingGroups": [{**group, "Instances": listed}]},
                             {"AutoScalingGroupNames": ["sf-scaling"]})  # fmt: skip
    lifecycle = AutoScalingLifecycleHooks(client)

    assert lifecycle.instance_state("sf-scaling", "i-0123456789abcdef0") == "Terminating"
    assert lifecycle.instance_state("sf-scaling", "i-0123456789abcdef0") == ""


def test_complete_refuses_a_result_auto_scaling_does_not_know():
    with pytest.raises(ValueError, match="CONTINUE or ABANDON"):
        complete_lifecycle_action(AutoScalingLifecycleHooks(None), HOOK, result="DONE")


def test_the_hook_is_read_from_the_eventbridge_event():
    detail = {
        "LifecycleActionToken": TOKEN,
        "AutoScalingGroupName": "sf-scaling",
        "LifecycleHookName": "drain-on-terminate",
        "EC2InstanceId": "i-0123456789abcdef0",
        "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING",
    }

    assert LifecycleHook.from_event_detail(detail) == HOOK
    assert HOOK.to_dict()["token"] == TOKEN


# -- Step Functions executions (Stubber) ---------------------------------------------------


def test_executions_served_follow_the_order_list_executions_really_has():
    """ListExecutions sorts running executions by startDate and the others by stopDate (Step
    Functions API Reference): a hold that started before the window and stopped lately sorts
    above a newer execution. Read in that order, the newer one still counts, the old one does
    not, and paging stops at the first execution whose sort key is older than the window."""
    from datetime import datetime, timedelta, timezone

    from node_lifecycle.executions import StepFunctionsExecutions

    client = boto3.client("stepfunctions", region_name="eu-west-1")
    machine = "arn:aws:states:eu-west-1:123456789012:stateMachine:telemetry-test-sf-scale-in"
    now = datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)
    since = now - timedelta(hours=25)

    def item(name: str, started: datetime, stopped: datetime | None) -> dict:
        found = {"executionArn": f"{machine.replace(':stateMachine:', ':execution:')}:{name}", "stateMachineArn": machine,
                 "name": name, "status": "FAILED" if stopped else "RUNNING", "startDate": started}  # fmt: skip
        return {**found, "stopDate": stopped} if stopped else found

    listed = [
        item("running", now - timedelta(minutes=3), None),
        item("old-hold", now - timedelta(hours=26), now - timedelta(minutes=30)),  # started before the window
        item("recent", now - timedelta(hours=2), now - timedelta(hours=1)),
        item("ancient", now - timedelta(days=3), now - timedelta(days=2)),  # sorted below the window: stop
    ]
    event = '{"detail": {"EC2InstanceId": "%s"}}'
    with Stubber(client) as stubber:
        stubber.add_response("list_executions", {"executions": listed, "nextToken": "more"}, {"stateMachineArn": machine})
        for name, instance in (("running", "i-0aaa"), ("recent", "i-0ccc")):
            arn = f"{machine.replace(':stateMachine:', ':execution:')}:{name}"
            stubber.add_response(
                "describe_execution",
                {"executionArn": arn, "stateMachineArn": machine, "status": "RUNNING", "startDate": now, "input": event % instance},
                {"executionArn": arn},
            )  # fmt: skip

        served = StepFunctionsExecutions(client).instances_served(machine, since=since)

        stubber.assert_no_pending_responses()  # the old hold was not read, the second page never asked for
    assert served == {"i-0aaa", "i-0ccc"}
