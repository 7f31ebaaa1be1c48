"""The node lifecycle stack as synthesized for each environment: rules, state machines, the
lock table, the reaper, the functions' reach and permissions, alarms."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import tree_sitter_powershell
import yaml
from tree_sitter import Language, Parser
from node_lifecycle.patching import PATCH_STEPS
from node_lifecycle.workflow import SCALE_IN_STEPS, SCALE_OUT_STEPS

from stacks.config import load_environment
from stacks.constructs.node_scripts import render_add_node_document
from stacks.lifecycle_timing import (
    ALARM_PUBLISH_TIMEOUT_SECONDS,
    ALARM_RETRY,
    HEARTBEAT_LANDING_SECONDS,
    HISTORY_EVENT_LIMIT,
    INVOKE_RETRY,
    SAFETY_MARGIN_SECONDS,
    STEP_RETRY,
    Retrier,
)
from tests.conftest import ENVIRONMENTS, cdk_context


def resources(template, kind: str) -> dict[str, dict]:
    return template.find_resources(kind)


def definition(state_machine: dict) -> dict[str, Any]:
    """The ASL document, with CloudFormation references replaced by a placeholder."""
    body = state_machine["Properties"]["DefinitionString"]
    if isinstance(body, dict):
        body = "".join(part if isinstance(part, str) else "REF" for part in body["Fn::Join"][1])
    return json.loads(body)


def machines(template) -> dict[str, dict[str, Any]]:
    """'scale-in'/'scale-out' -> ASL."""
    found = {}
    for resource in resources(template, "AWS::StepFunctions::StateMachine").values():
        name = resource["Properties"]["StateMachineName"]
        found[name.rsplit("-sf-", 1)[1]] = definition(resource)
    return found


def invoked_steps(asl: dict[str, Any]) -> list[str]:
    steps = []
    for state in asl["States"].values():
        payload = state.get("Parameters") or {}
        if "step" in payload:
            steps.append(payload["step"])
    return steps


@pytest.fixture(scope="module")
def dev(synthesized):
    return synthesized("dev").template("node_lifecycle")


@pytest.fixture(scope="module")
def prod(synthesized):
    return synthesized("prod").template("node_lifecycle")


def test_lifecycle_actions_of_the_scaling_group_start_the_state_machines(dev):
    patterns = {
        tuple(rule["Properties"]["EventPattern"]["detail-type"]): rule["Properties"]["EventPattern"]
        for rule in resources(dev, "AWS::Events::Rule").values()
        if "EventPattern" in rule["Properties"]
    }
    launch = patterns[("EC2 Instance-launch Lifecycle Action",)]
    terminate = patterns[("EC2 Instance-terminate Lifecycle Action",)]
    assert launch["source"] == terminate["source"] == ["aws.autoscaling"]
    assert launch["detail"] == {
        "AutoScalingGroupName": ["telemetry-dev-sf-scaling"],
        "LifecycleHookName": ["sf-join-cluster"],
    }
    assert terminate["detail"]["LifecycleHookName"] == ["sf-leave-cluster"]


def test_every_step_the_state_machines_invoke_exists_in_the_lambda(dev):
    found = machines(dev)
    assert set(invoked_steps(found["scale-in"])) == set(SCALE_IN_STEPS) - {"keep_warm"}
    assert set(invoked_steps(found["scale-out"])) == set(SCALE_OUT_STEPS) - {"keep_warm"}
    assert set(invoked_steps(found["patch"])) == set(PATCH_STEPS) - {"keep_warm"}


def test_the_drain_and_join_functions_are_invoked_daily_so_they_never_go_inactive(dev):
    (rule,) = [r["Properties"] for r in resources(dev, "AWS::Events::Rule").values()
               if r["Properties"].get("ScheduleExpression") == "rate(1 day)"]  # fmt: skip
    functions = {lid for lid, f in resources(dev, "AWS::Lambda::Function").items()
                 if f["Properties"]["Handler"] in ("node_lifecycle.handlers.scale_in", "node_lifecycle.handlers.scale_out",
                                                   "node_lifecycle.handlers.patch")}  # fmt: skip
    assert {t["Arn"]["Fn::GetAtt"][0] for t in rule["Targets"]} == functions
    assert {t["Input"] for t in rule["Targets"]} == {'{"step":"keep_warm"}'}


@pytest.fixture(scope="module", params=ENVIRONMENTS)
def each(request, synthesized):
    """(environment name, its node lifecycle template, its validated timing), for every environment."""
    name = request.param
    config = load_environment(cdk_context()["environments"], name)
    return name, synthesized(name).template("node_lifecycle"), config.lifecycle_timing


def retrier(entry: dict) -> Retrier:
    return Retrier(tuple(entry["ErrorEquals"]), entry["IntervalSeconds"], entry["MaxAttempts"], entry["MaxDelaySeconds"],
                   entry["BackoffRate"])  # fmt: skip


# Steps that make no call that could fail for now (or catch what they call): only Lambda's
# invoke errors are retried in place.
INVOKE_ONLY = {"fail", "clean_up", "alarm_undelivered", "stop", "install"}
FAILURE_PATH = {"scale-in": "Release the lock, retain the instance and word the alarm", "scale-out": "Release the lock and clean up the join",
                "patch": "Leave the node safe and word the alarm"}
GONE_PATH = "Action gone: release the lock"


def test_every_lambda_task_rides_out_throttling_and_what_can_be_transient_is_retried(each):
    """Step Functions reports a throttled invoke as Lambda.TooManyRequestsException and matches
    error names exactly; every Lambda Task of every environment retries it, with Lambda's other
    invoke errors that pass, in the one entry stacks/lifecycle_timing.py declares. The executions
    (tests/lambdas/node_lifecycle/test_state_machines_executed.py) prove the paths."""
    name, template, _ = each
    for flow, asl in machines(template).items():
        states = asl["States"]
        # The failure paths catch into themselves: each must go on to its end.
        own_catches = reachable(states, FAILURE_PATH[flow])
        if flow == "scale-in":
            own_catches |= reachable(states, "Release the lock and retain the instance")
            own_catches |= reachable(states, "Alarm: drained, instance kept")  # the drain is done: on to its end
        if flow == "scale-out":
            own_catches |= reachable(states, GONE_PATH)
            own_catches |= reachable(states, "Alarm: joined, launch action ended")  # the join is done: on to its end
        for label, state in states.items():
            if state["Type"] != "Task":
                continue
            assert state.get("Catch"), f"{name} {flow}: {label} is not caught"
            step = (state.get("Parameters") or {}).get("step")
            if step is None:  # SnsPublish: retried on anything, each try bounded, then counted undelivered
                assert state["Resource"].endswith(":states:::sns:publish")
                assert [retrier(r) for r in state["Retry"]] == [ALARM_RETRY]
                assert state["TimeoutSeconds"] == ALARM_PUBLISH_TIMEOUT_SECONDS
                assert states[state["Catch"][0]["Next"]]["Parameters"]["step"] == "alarm_undelivered"
                continue
            expected = [INVOKE_RETRY] if step in INVOKE_ONLY else [INVOKE_RETRY, STEP_RETRY]
            assert [retrier(r) for r in state["Retry"]] == expected, (name, flow, label)
            assert all(r["JitterStrategy"] == "FULL" for r in state["Retry"])
            assert "Lambda.TooManyRequestsException" in state["Retry"][0]["ErrorEquals"]
            if label not in own_catches:
                catches = [c["Next"] for c in state["Catch"]]
                # A launch action Auto Scaling no longer has ends the join without touching the node.
                assert catches == ([GONE_PATH] if flow == "scale-out" else []) + [FAILURE_PATH[flow]], (name, flow, label)
                assert state["Catch"][0]["ErrorEquals"] == (["ActionGone"] if flow == "scale-out" else ["States.ALL"])


def test_heartbeat_attempts_fit_twice_failed_in_the_heartbeat_timeout(each):
    """Read from the definition, not the model: three attempts (each its invoke retries, its run
    bounded by the Task's TimeoutSeconds, and the longest wait after it), the third's landing and
    the margin fit in the heartbeat timeout."""
    name, template, timing = each
    for asl in machines(template).values():
        tasks = [t for t in asl["States"].values() if t["Type"] == "Task"]
        lambdas = [t for t in tasks if "step" in (t.get("Parameters") or {})]
        waits = [t["Seconds"] for t in asl["States"].values() if t["Type"] == "Wait"]
        waits += [r["MaxDelaySeconds"] for t in lambdas for r in t["Retry"]]
        waits += [t["TimeoutSeconds"] * (t["Retry"][0]["MaxAttempts"] + 1) + retrier(t["Retry"][0]).span_seconds
                  for t in tasks if t not in lambdas]  # fmt: skip
        attempts = [t["TimeoutSeconds"] + retrier(t["Retry"][0]).span_seconds + max(waits) for t in lambdas]
        assert 3 * max(attempts) + HEARTBEAT_LANDING_SECONDS + SAFETY_MARGIN_SECONDS <= timing.heartbeat_timeout_seconds, name
        assert all(t["TimeoutSeconds"] <= 10 + 120 for t in lambdas)  # Init and the function's timeout


def test_a_terminate_action_nobody_completes_retains_its_instance(each, synthesized):
    """The terminate hook's default result is ABANDON and the group retains an instance whose
    terminate action is ABANDONed (RetentionTriggers: retain | terminate, in lower case): a failed
    drain, or one nobody serves, never lets its node go undrained."""
    name, _, _ = each
    group = next(iter(synthesized(name).template("service_fabric").find_resources("AWS::AutoScaling::AutoScalingGroup").values()))
    hooks = {h["LifecycleTransition"]: h["DefaultResult"] for h in group["Properties"]["LifecycleHookSpecificationList"]}
    assert hooks == {"autoscaling:EC2_INSTANCE_LAUNCHING": "ABANDON", "autoscaling:EC2_INSTANCE_TERMINATING": "ABANDON"}
    assert group["Properties"]["InstanceLifecyclePolicy"] == {"RetentionTriggers": {"TerminateHookAbandon": "retain"}}


def test_no_execution_outlives_its_lifecycle_action(each, synthesized):
    """The hook's global timeout is min(48 h, 100 x its heartbeat timeout): a failed drain's
    deadline and its failure path fit in it, and no execution runs longer."""
    name, template, timing = each
    group = next(iter(synthesized(name).template("service_fabric").find_resources("AWS::AutoScaling::AutoScalingGroup").values()))
    for hook in group["Properties"]["LifecycleHookSpecificationList"]:
        assert hook["HeartbeatTimeout"] == timing.heartbeat_timeout_seconds
    global_timeout = min(48 * 3600, 100 * timing.heartbeat_timeout_seconds)
    for flow, asl in machines(template).items():
        if flow != "patch":  # no lifecycle action: tests/stacks/test_patch_workflow.py
            assert asl["TimeoutSeconds"] == global_timeout
    assert timing.drain_span_seconds <= global_timeout and timing.join_span_seconds <= global_timeout
    assert timing.drain_history_events <= 12_500


def test_lifecycle_events_are_retried_then_kept_in_an_encrypted_queue_that_alarms(each):
    name, template, timing = each
    (queue_id, queue), = resources(template, "AWS::SQS::Queue").items()
    assert queue["Properties"]["SqsManagedSseEnabled"] is True
    assert queue["Properties"]["MessageRetentionPeriod"] == 14 * 24 * 3600
    rules = [r for r in resources(template, "AWS::Events::Rule").values() if "EventPattern" in r["Properties"]]
    assert len(rules) == 2
    for rule in rules:
        (target,) = rule["Properties"]["Targets"]
        assert target["RetryPolicy"] == {"MaximumEventAgeInSeconds": timing.event_age_seconds, "MaximumRetryAttempts": 185}
        assert target["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": [queue_id, "Arn"]}}
        # Started at its latest, an execution's first heartbeat (after its invoke retries) still lands in time.
        assert timing.event_age_seconds + INVOKE_RETRY.span_seconds + HEARTBEAT_LANDING_SECONDS <= timing.heartbeat_timeout_seconds
    policy = json.dumps(next(iter(resources(template, "AWS::SQS::QueuePolicy").values()))["Properties"])
    # The lifecycle rules and the maintenance window's (test_patch_workflow.py) share the queue.
    assert policy.count('"Service": "events.amazonaws.com"') == 3 and "aws:SourceArn" in policy
    alarms = [a["Properties"] for a in resources(template, "AWS::CloudWatch::Alarm").values()]
    depth = [a for a in alarms if a.get("MetricName") == "ApproximateNumberOfMessagesVisible"]
    assert len(depth) == 1 and depth[0]["Dimensions"] == [{"Name": "QueueName", "Value": {"Fn::GetAtt": [queue_id, "QueueName"]}}]
    assert depth[0]["Threshold"] == 1 and depth[0]["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    lost = [a for a in alarms if a.get("MetricName") == "InvocationsFailedToBeSentToDlq"]
    assert len(lost) == 3


def test_the_failure_paths_need_no_gateway_and_end_by_abandoning(dev):
    found = machines(dev)
    scale_out = found["scale-out"]["States"]
    # The only step of the join's failure path that talks to the cluster is caught, and leads
    # to the step that abandons the launch whatever happened.
    assert scale_out["Release the lock and clean up the join"]["Catch"][0]["Next"] == "Abandon the launch and word the alarm"
    assert scale_out["Release the lock and clean up the join"]["Next"] == "Abandon the launch and word the alarm"
    scale_in = found["scale-in"]["States"]
    # The drain's failure step ABANDONs (the instance is retained) and words the alarm; then the
    # alarm, delivered or counted, and the end. No heartbeat loop: retention keeps the instance.
    word = "Release the lock, retain the instance and word the alarm"
    assert scale_in[word]["Parameters"]["step"] == "fail"
    assert scale_in[word]["Next"] == "Alarm the operators" and scale_in["Alarm the operators"]["Next"] == "Drain failed"
    assert scale_in["Alarm the operators: count it undelivered"]["Next"] == "Drain failed"
    assert not [label for label in scale_in if label.startswith("Hold ")]


def reachable(states: dict, start: str, avoid: str = "") -> set[str]:
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name in seen or name == avoid:
            continue
        seen.add(name)
        state = states[name]
        todo += [state[k] for k in ("Next", "Default") if k in state]
        todo += [choice["Next"] for choice in state.get("Choices", [])]
        todo += [catch["Next"] for catch in state.get("Catch", [])]
    return seen


def test_waits_loop_through_wait_states_at_the_configured_interval(dev, prod):
    for template, seconds in ((dev, 15), (prod, 30)):
        asl = machines(template)["scale-in"]
        wait = asl["States"]["Wait until the node is Disabled: wait"]
        assert wait == {"Type": "Wait", "Seconds": seconds, "Next": "Wait until the node is Disabled"}
        choice = asl["States"]["Wait until the node is Disabled: done?"]
        assert choice["Choices"][0]["Variable"] == "$.disabled.done"
        assert choice["Choices"][0]["Next"] == "Remove the node from the configuration"


def test_scale_in_removes_by_upgrade_before_it_ever_stops_a_host(dev):
    """The documented order: Disabled, then the removal upgrade while the machine runs; the
    host is stopped only on the clean-up branch after the check that the node is still listed."""
    states = machines(dev)["scale-in"]["States"]
    main_path = {name: {k: v for k, v in state.items() if k != "Catch"} for name, state in states.items()}

    before_check = reachable(main_path, "Deactivate the node", avoid="Check the node left the node list")
    assert "Remove the node from the configuration" in before_check
    assert not {"Clean-up: stop the Fabric host", "Clean-up: remove the node state"} & before_check
    gone = states["Node gone?"]
    assert [c["Variable"] for c in gone["Choices"]] == ["$.removal.removed", "$.removal.down"]
    assert [c["Next"] for c in gone["Choices"]] == [
        "Complete the lifecycle action",
        "Clean-up: remove the node state",
    ]
    assert gone["Default"] == "Clean-up: stop the Fabric host"


def test_a_seed_node_releases_the_lock_is_retained_and_alarms(dev):
    states = machines(dev)["scale-in"]["States"]
    seed = states["Seed node?"]["Choices"][0]
    assert seed["Variable"] == "$.seed.refused" and seed["Next"] == "Release the lock and retain the instance"
    assert states["Release the lock and retain the instance"]["Parameters"]["step"] == "retain_instance"
    assert states["Release the lock and retain the instance"]["Next"] == "Alarm: seed node refused"
    assert states["Alarm: seed node refused"]["Next"] == "Seed node refused"


def test_state_machines_log_everything_and_are_traced(dev):
    for resource in resources(dev, "AWS::StepFunctions::StateMachine").values():
        props = resource["Properties"]
        assert props["TracingConfiguration"] == {"Enabled": True}
        assert props["LoggingConfiguration"]["Level"] == "ALL"
        assert props["LoggingConfiguration"]["IncludeExecutionData"] is True


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_each_state_machine_role_trusts_step_functions_for_that_machine_alone(env, synthesized):
    """No role trusts `stateMachine:*`: Step Functions may assume a machine's role only as that
    machine (aws:SourceArn, its exact ARN; the name is fixed) in this account (aws:SourceAccount)."""
    config = load_environment(cdk_context()["environments"], env)
    template = synthesized(env).template("node_lifecycle")
    roles = resources(template, "AWS::IAM::Role")
    machines_ = resources(template, "AWS::StepFunctions::StateMachine").values()
    assert len(machines_) == 3
    for machine in machines_:
        name = machine["Properties"]["StateMachineName"]
        (statement,) = roles[machine["Properties"]["RoleArn"]["Fn::GetAtt"][0]]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        assert statement["Principal"] == {"Service": "states.amazonaws.com"}
        assert statement["Condition"] == {
            "StringEquals": {"aws:SourceAccount": config.account},
            "ArnEquals": {"aws:SourceArn": f"arn:aws:states:{config.region}:{config.account}:stateMachine:{name}"},
        }
    trusts = json.dumps([r["Properties"]["AssumeRolePolicyDocument"] for r in roles.values()])
    assert "stateMachine:*" not in trusts


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_each_rule_starts_its_machine_with_a_role_only_this_accounts_rules_may_assume(env, synthesized):
    """The role an EventBridge rule starts a state machine with trusts EventBridge acting for a rule
    of this account and Region (aws:SourceAccount, aws:SourceArn: EventBridge User Guide, "Using IAM
    policy conditions in Amazon EventBridge"); it had no condition at all."""
    from fnmatch import fnmatchcase

    config = load_environment(cdk_context()["environments"], env)
    template = synthesized(env).template("node_lifecycle")
    roles = resources(template, "AWS::IAM::Role")
    starters = [t for rule in resources(template, "AWS::Events::Rule").values() for t in rule["Properties"]["Targets"]
                if "RoleArn" in t]  # fmt: skip
    assert len(starters) == 3
    for target in starters:
        (statement,) = roles[target["RoleArn"]["Fn::GetAtt"][0]]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        assert statement["Principal"] == {"Service": "events.amazonaws.com"}
        assert statement["Condition"]["StringEquals"] == {"aws:SourceAccount": config.account}
        pattern = statement["Condition"]["ArnLike"]["aws:SourceArn"]
        # A rule's ARN as EventBridge gives it (the CloudFormation-made name is not ours to fix).
        ours = f"arn:aws:events:{config.region}:{config.account}:rule/Telemetry-{env}-NodeLifecycle-ScaleIn-1A2B3C"
        assert fnmatchcase(ours, pattern)
        assert not fnmatchcase(ours.replace(config.account, "111122223333"), pattern)
        assert not fnmatchcase(ours.replace(":events:", ":scheduler:"), pattern)


def test_the_state_machine_roles_wildcards_are_the_documented_logging_and_tracing_actions(dev):
    """What the acknowledgment says is what the roles hold on "*": the log delivery actions (with
    logs:PutResourcePolicy named as the reason the trust is narrow) and X-Ray's, nothing else."""
    from stacks.constructs.lifecycle_workflows import MACHINE_POLICY_WILDCARDS_REASON

    roles = {lid for lid, r in resources(dev, "AWS::IAM::Role").items()
             if r["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "states.amazonaws.com"}}  # fmt: skip
    assert len(roles) == 3
    for policy in resources(dev, "AWS::IAM::Policy").values():
        if not {ref["Ref"] for ref in policy["Properties"]["Roles"]} & roles:
            continue
        on_all = {a for st in policy["Properties"]["PolicyDocument"]["Statement"] if st["Resource"] == "*"
                  for a in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])}  # fmt: skip
        logs_actions = {a for a in on_all if a.startswith("logs:")}
        assert on_all - logs_actions == {"xray:GetSamplingRules", "xray:GetSamplingTargets", "xray:PutTelemetryRecords",
                                         "xray:PutTraceSegments"}  # fmt: skip
        assert logs_actions and all(a.split(":")[1] in MACHINE_POLICY_WILDCARDS_REASON for a in logs_actions), logs_actions


def test_the_lock_table_keys_on_the_lock_name_and_expires_holders(dev):
    dev.has_resource_properties(
        "AWS::DynamoDB::GlobalTable",
        {
            "TableName": "telemetry-dev-sf-membership-lock",
            "KeySchema": [{"AttributeName": "LockName", "KeyType": "HASH"}],
            "TimeToLiveSpecification": {"AttributeName": "ExpiresAt", "Enabled": True},
            "BillingMode": "PAY_PER_REQUEST",
        },
    )


def test_the_reaper_runs_every_five_minutes(dev):
    dev.has_resource_properties("AWS::Events::Rule", {"ScheduleExpression": "rate(5 minutes)"})


def test_functions_run_in_the_vpc_with_the_gateway_client_group_and_validated_settings(dev):
    functions = resources(dev, "AWS::Lambda::Function")
    assert sorted(f["Properties"]["Handler"] for f in functions.values()) == [
        "node_lifecycle.handlers.patch",
        "node_lifecycle.handlers.reaper",
        "node_lifecycle.handlers.scale_in",
        "node_lifecycle.handlers.scale_out",
    ]
    for function in functions.values():
        props = function["Properties"]
        assert len(props["VpcConfig"]["SecurityGroupIds"]) == 2
        assert any("GatewayClientSecurityGroup" in json.dumps(g) for g in props["VpcConfig"]["SecurityGroupIds"])
        variables = props["Environment"]["Variables"]
        assert variables["SF_GATEWAY_ENDPOINTS"].startswith("https://") and ":19080" in variables["SF_GATEWAY_ENDPOINTS"]
        assert variables["LOCK_TTL_SECONDS"] == "3600" and variables["SCALING_NODE_TYPE"] == "ScalingNodeType"
        assert props["Runtime"].startswith("python3.") and props["Architectures"] == ["arm64"]


def statements_of(template, handler: str) -> list[dict]:
    function = next(
        f for f in resources(template, "AWS::Lambda::Function").values() if f["Properties"]["Handler"].endswith(handler)
    )
    role = function["Properties"]["Role"]["Fn::GetAtt"][0]
    policy = next(
        p for p in resources(template, "AWS::IAM::Policy").values() if p["Properties"]["Roles"] == [{"Ref": role}]
    )
    return policy["Properties"]["PolicyDocument"]["Statement"]


def actions(statement: dict) -> list[str]:
    value = statement["Action"]
    return [value] if isinstance(value, str) else value


def test_run_command_reaches_only_this_clusters_nodes_and_only_the_needed_documents(dev):
    for handler, document in (("scale_in", "StopHostDocument"), ("scale_out", "AddNodeDocument")):
        sends = [s for s in statements_of(dev, handler) if "ssm:SendCommand" in actions(s)]
        assert len(sends) == 2, handler
        on_instances = next(s for s in sends if "Condition" in s)
        # Scaling nodes of this cluster alone (both tags): never a seed, never another cluster's node.
        assert on_instances["Condition"] == {"StringEquals": {"ssm:resourceTag/sf:cluster": "telemetry-dev-sf",
                                                              "ssm:resourceTag/sf:nodetype": "ScalingNodeType"}}
        on_document = next(s for s in sends if "Condition" not in s)
        assert document in json.dumps(on_document["Resource"]), handler
    reaper = statements_of(dev, "reaper")
    reaper_actions = {a for s in reaper for a in actions(s)}
    # Of SSM, the reaper only reads the gateway thumbprint; no Run Command, no lock.
    assert not any(a.startswith("dynamodb:") for a in reaper_actions)
    assert {a for a in reaper_actions if a.startswith("ssm:")} == {"ssm:GetParameter"}


def test_each_functions_reads_on_everything_are_acknowledged_by_name_on_its_own_policy(synthesized):
    """One reason per function naming exactly the reads it holds on "*" (not one sentence shared by
    four functions naming actions some lack): cdk-nag's acknowledgement in the synthesis metadata."""
    from stacks.constructs.lifecycle_functions import VPC_INTERFACE_ACTIONS
    from stacks.node_lifecycle_stack import TRACING_ACTIONS

    env = synthesized("dev")
    template = env.template("node_lifecycle")
    metadata = json.loads((Path(env.outdir) / "Telemetry-dev-NodeLifecycle.metadata.json").read_text())
    for handler, construct in (("scale_in", "ScaleInFunction"), ("scale_out", "ScaleOutFunction"),
                               ("reaper", "ReaperFunction"), ("patch", "PatchFunction")):  # fmt: skip
        on_everything = {a for s in statements_of(template, handler) if s["Resource"] == "*" for a in actions(s)}
        reads = on_everything - set(VPC_INTERFACE_ACTIONS) - set(TRACING_ACTIONS)
        entries = metadata[f"/Telemetry-dev-NodeLifecycle/{construct}/Role/DefaultPolicy"]
        (reason,) = [e["data"]["Annotation::AwsSolutions-IAM5[Resource::*]"] for e in entries
                     if e["type"] == "aws:cdk:acknowledged-rules" and "Annotation::AwsSolutions-IAM5[Resource::*]" in e["data"]]  # fmt: skip
        named = set(re.findall(r"\b(?:ec2|ssm|autoscaling):[A-Za-z]+", reason))
        assert named == reads, (construct, named, reads)


def literal(value: Any) -> Any:
    """A statement's references as the deployed values: the partition, literal joins; any other
    reference becomes a name no ARN matches."""
    if isinstance(value, list):
        return [literal(v) for v in value]
    if isinstance(value, dict):
        if "Fn::Join" in value:
            separator, parts = value["Fn::Join"]
            return separator.join(str(literal(p)) for p in parts)
        if value == {"Ref": "AWS::Partition"}:
            return "aws"
        if len(value) == 1 and next(iter(value)).startswith(("Ref", "Fn::")):
            return f"elsewhere:{json.dumps(value)}"
        return {k: literal(v) for k, v in value.items()}
    return value


def test_the_reaper_may_restart_lost_actions_and_nothing_more(dev):
    """Evaluated by moto's IAM policy evaluator (moto/iam/access_control.py, IAMPolicy and
    IAMPolicyStatement.is_action_permitted) with the ARNs the reaper's calls name: it reads the
    group, heartbeats the scaling group's actions, lists, reads and starts the two lifecycle state
    machines' executions; it completes no action and starts no other state machine."""
    from moto.iam.access_control import IAMPolicy, PermissionResult

    policy = IAMPolicy(json.dumps({"Version": "2012-10-17", "Statement": literal(statements_of(dev, "reaper"))}))

    def permitted(action: str, resource: str) -> bool:
        return policy.is_action_permitted(action, resource) == PermissionResult.PERMITTED

    region, account = "eu-west-1", "111111111111"
    group = f"arn:aws:autoscaling:{region}:{account}:autoScalingGroup:0f3c-uuid:autoScalingGroupName/telemetry-dev-sf-scaling"
    machine = f"arn:aws:states:{region}:{account}:stateMachine:telemetry-dev-sf-scale-in"
    assert permitted("autoscaling:DescribeAutoScalingGroups", "*")
    assert permitted("autoscaling:RecordLifecycleActionHeartbeat", group)
    assert not permitted("autoscaling:CompleteLifecycleAction", group)
    assert not permitted("autoscaling:RecordLifecycleActionHeartbeat", group.replace("telemetry-dev", "telemetry-prod"))
    for flow in ("scale-in", "scale-out"):
        arn = machine.replace("scale-in", flow)
        assert permitted("states:StartExecution", arn) and permitted("states:ListExecutions", arn)
        assert permitted("states:DescribeExecution", arn.replace(":stateMachine:", ":execution:") + ":reaper-i-0abc")
    assert not permitted("states:StartExecution", machine.replace("telemetry-dev", "telemetry-prod"))
    assert not permitted("states:StopExecution", machine.replace(":stateMachine:", ":execution:") + ":x")


@pytest.mark.parametrize("handler", ["scale_in", "scale_out", "reaper"])
def test_functions_pin_the_gateway_by_the_published_thumbprint_not_the_cluster_secret(dev, handler):
    """The cluster certificate secret holds the cluster's private key and the node password; the
    functions need neither: they read the admin client certificate and the thumbprint parameter
    telemetry/commands/cluster/bootstrap.py publishes."""
    statements = statements_of(dev, handler)
    secrets = [s for s in statements if "secretsmanager:GetSecretValue" in actions(s)]
    assert len(secrets) == 1
    assert "admin-certificate-??????" in json.dumps(secrets[0]["Resource"])
    assert "cluster-certificate" not in json.dumps(statements)
    (read,) = [s for s in statements if "ssm:GetParameter" in actions(s)]
    assert read["Resource"] == "arn:aws:ssm:eu-west-1:111111111111:parameter/telemetry-dev/service-fabric/gateway-thumbprint"
    function = next(
        f for f in resources(dev, "AWS::Lambda::Function").values() if f["Properties"]["Handler"].endswith(handler)
    )
    variables = function["Properties"]["Environment"]["Variables"]
    assert variables["SF_GATEWAY_THUMBPRINT_PARAMETER"] == "/telemetry-dev/service-fabric/gateway-thumbprint"
    assert "SF_CLUSTER_CERTIFICATE_SECRET" not in variables


def test_only_scale_out_tags_instances_and_only_with_the_node_name(dev):
    tagging = [s for s in statements_of(dev, "scale_out") if "ec2:CreateTags" in actions(s)]
    assert tagging[0]["Condition"]["ForAllValues:StringEquals"] == {"aws:TagKeys": ["sf:nodename"]}
    assert not any("ec2:CreateTags" in actions(s) for s in statements_of(dev, "scale_in"))


def test_lifecycle_actions_are_allowed_on_the_scaling_group_only(dev):
    for handler in ("scale_in", "scale_out"):
        statement = next(
            s for s in statements_of(dev, handler) if "autoscaling:CompleteLifecycleAction" in actions(s)
        )
        assert "autoScalingGroupName/telemetry-dev-sf-scaling" in json.dumps(statement["Resource"])


def test_failures_stalls_zombies_and_seed_nodes_down_alarm(dev):
    alarms = resources(dev, "AWS::CloudWatch::Alarm").values()

    def metric_name(alarm: dict) -> str:
        props = alarm["Properties"]
        return props.get("MetricName") or props["Metrics"][0]["MetricStat"]["Metric"]["MetricName"]

    metrics = {metric_name(a) for a in alarms}
    assert {"DrainsFailed", "JoinsFailed", "ZombieNodes", "SeedNodesDown", "ExecutionsFailed", "ExecutionsTimedOut",
            "AlarmsUndelivered", "JoinsStopped", "LifecycleActionsRestarted"} <= metrics  # fmt: skip
    for alarm in alarms:
        assert alarm["Properties"]["AlarmActions"] and alarm["Properties"]["OKActions"]


def test_the_dashboard_shows_drains_joins_and_zombies(synthesized):
    body = json.dumps(synthesized("dev").template("monitoring").to_json())
    for metric in ("DrainsStarted", "DrainsSucceeded", "DrainsFailed", "DrainDurationSeconds", "ZombieNodes"):
        assert metric in body


def test_the_add_node_document_checks_every_parameter_and_renders_the_stack_values(dev):
    document = next(iter(resources(dev, "AWS::SSM::Document").values()))["Properties"]
    assert document["Name"] == "telemetry-dev-sf-add-node" and document["DocumentType"] == "Command"
    parameters = document["Content"]["parameters"]
    assert all("allowedPattern" in spec for spec in parameters.values())
    # No secret to read: the deployment account gets a one-time password on the node (#33).
    assert "certificateSecret" not in parameters and parameters["deploymentAccount"]["default"] == "sfdeploy"
    patterns = {name: re.compile(spec["allowedPattern"]) for name, spec in parameters.items()}
    assert patterns["nodeName"].fullmatch("scale-i-0123456789abcdef0")
    assert patterns["faultDomain"].fullmatch("fd:/eu-west-1/eu-west-1a")
    assert patterns["clientConnectionEndpoint"].fullmatch("10.10.4.10:19000")
    assert not patterns["nodeName"].fullmatch("x'; Remove-Item C:\\ -Recurse; '")
    # The pinned runtime, as config names it (the CAB path: test_userdata.py).
    assert parameters["runtimeVersion"]["default"] == "11.4.268.1"
    assert patterns["runtimePackage"].fullmatch(parameters["runtimePackage"]["default"])
    assert not patterns["runtimeVersion"].fullmatch("11.4.268.1'; Remove-Item C:\\ -Recurse; '")
    assert not patterns["runtimePackage"].fullmatch("C:\\ServiceFabric\\Package\\x.zip")


def test_the_add_node_script_parses_as_powershell_with_values_substituted():
    cab = "C:\\ServiceFabric\\Package\\MicrosoftServiceFabric.11.4.268.1.cab"
    document = render_add_node_document(
        {"statusFile": "C:\\ServiceFabric\\s.json", "deploymentAccount": "sfdeploy",
         "runtimePackage": cab, "runtimeVersion": "11.4.268.1"}
    )
    values = {
        "nodeName": "scale-i-0abc", "nodeType": "ScalingNodeType", "ipAddress": "10.10.4.20",
        "faultDomain": "fd:/eu-west-1/eu-west-1a", "upgradeDomain": "UD1",
        "clientConnectionEndpoint": "10.10.4.10:19000", "preparationTimeoutSeconds": "1800",
        "addNodeTimeoutSeconds": "1800", "statusFile": "C:\\ServiceFabric\\s.json",
        "deploymentAccount": "sfdeploy", "runtimePackage": cab, "runtimeVersion": "11.4.268.1",
    }  # fmt: skip
    script = document["mainSteps"][0]["inputs"]["runCommand"][0]
    for name, value in values.items():
        script = script.replace("{{ " + name + " }}", value)
    assert "{{" not in script
    tree = Parser(Language(tree_sitter_powershell.language())).parse(script.encode())
    assert not tree.root_node.has_error
    # AddNode.ps1's parameters are splatted from a table (test_userdata.py checks the task script)
    assert "& .\\AddNode.ps1 @parameters" in script
    assert "ExistingClientConnectionEndpoint = '10.10.4.10:19000'" in script
    assert yaml.safe_dump(document)  # still a plain YAML document


@pytest.mark.integration  # downloads the pinned wheels from the package registry
def test_the_function_package_builds_without_docker(tmp_path):
    from stacks.constructs.lifecycle_functions import _PipBundling

    assert _PipBundling().try_bundle(str(tmp_path), image=None) is True
    for path in (
        "node_lifecycle/handlers.py",
        "node_lifecycle/stop_fabric_host.ps1",  # sent by Run Command on scale-in
        "sf_rest/client.py",
        "requests/__init__.py",
        "aws_lambda_powertools/metrics/__init__.py",
    ):
        assert (tmp_path / path).is_file(), path
    assert not list(tmp_path.rglob("__pycache__"))
    assert not (tmp_path / "boto3").exists()  # the Lambda runtime provides it


# -- patching every node in place -------------------------------------------------------------


def test_the_maintenance_window_starts_the_patch_run_where_patching_is_enabled(each):
    """The patch state machine and its schedule (off in dev); the executions are in
    tests/lambdas/node_lifecycle/test_patch_executed.py."""
    name, template, _ = each
    config = load_environment(cdk_context()["environments"], name)
    (lid, machine), = [(lid, m) for lid, m in resources(template, "AWS::StepFunctions::StateMachine").items()
                       if m["Properties"]["StateMachineName"] == f"telemetry-{name}-sf-patch"]  # fmt: skip
    (rule,) = [r["Properties"] for r in resources(template, "AWS::Events::Rule").values()
               if any(t["Arn"] == {"Ref": lid} for t in r["Properties"]["Targets"])]  # fmt: skip
    assert rule["ScheduleExpression"] == config.patching.schedule
    assert rule["State"] == ("ENABLED" if config.patching.enabled else "DISABLED")
    assert config.patching.enabled == (name != "dev")
    (target,) = rule["Targets"]
    assert json.loads(target["Input"]) == {"trigger": "schedule"} and "DeadLetterConfig" in target
    # Every node at its longest fits the execution, and its history the Standard limit.
    nodes = config.service_fabric.seed_node_count + config.service_fabric.scaling_max_nodes
    assert machines(template)["patch"]["TimeoutSeconds"] >= nodes * config.patching.node_timeout_minutes * 60
    assert config.patch_run_history_events < HISTORY_EVENT_LIMIT
    assert machines(template)["patch"]["States"]["Wait for the scan: wait"]["Seconds"] == config.patching.poll_interval_seconds
    # The bound counts a node's looks at the poll interval: no loop of the definition turns faster,
    # the wait for the membership lock included (at 30 s it doubled a node's looks: prod's worst
    # case was then about 38,000 events).
    waits = {label: state["Seconds"] for label, state in machines(template)["patch"]["States"].items() if state["Type"] == "Wait"}
    assert min(waits.values()) >= config.patching.poll_interval_seconds, waits


def test_the_patch_function_runs_only_aws_run_patch_baseline_and_only_on_this_clusters_nodes(synthesized):
    """Evaluated by moto's IAM policy evaluator with the ARNs Run Command checks: the AWS-owned
    document (no account in its ARN) on instances tagged as this cluster's, seeds included."""
    from moto.iam.access_control import IAMPolicy, PermissionResult

    dev = synthesized("dev").template("node_lifecycle")
    statements = statements_of(dev, "patch")
    policy = IAMPolicy(json.dumps({"Version": "2012-10-17", "Statement": literal(statements)}))
    document = "arn:aws:ssm:eu-west-1::document/AWS-RunPatchBaseline"
    assert policy.is_action_permitted("ssm:SendCommand", document) == PermissionResult.PERMITTED
    for other in ("arn:aws:ssm:eu-west-1::document/AWS-RunPowerShellScript",
                  "arn:aws:ssm:eu-west-1:111111111111:document/telemetry-dev-sf-add-node"):  # fmt: skip
        assert policy.is_action_permitted("ssm:SendCommand", other) != PermissionResult.PERMITTED
    (on_instances,) = [s for s in statements if "ssm:SendCommand" in json.dumps(s["Action"]) and "Condition" in s]
    assert on_instances["Condition"] == {"StringEquals": {"ssm:resourceTag/sf:cluster": "telemetry-dev-sf"}}
    assert literal(on_instances["Resource"]) == "arn:aws:ec2:eu-west-1:111111111111:instance/*"
    granted = {a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert not {"autoscaling:CompleteLifecycleAction", "ec2:CreateTags", "states:StartExecution"} & granted
    assert {"ssm:DescribeInstancePatchStates", "ssm:GetCommandInvocation"} <= granted
    # The patches a node reported, on this cluster's instances only (IAM's catalogue: instance*).
    (states,) = [s for s in statements if "ssm:DescribeInstancePatchStates" in json.dumps(s["Action"])]
    assert set(states["Action"]) <= {"ssm:DescribeInstancePatchStates", "ssm:SendCommand"}  # the CDK merges them
    assert literal(states["Resource"]) == "arn:aws:ec2:eu-west-1:111111111111:instance/*"
    assert states["Condition"] == {"StringEquals": {"ssm:resourceTag/sf:cluster": "telemetry-dev-sf"}}
