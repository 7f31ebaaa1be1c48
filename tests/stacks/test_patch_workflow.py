"""The patch state machine and its maintenance window as synthesized for each environment: the
schedule (off in dev), the execution's bound, and what the patch function may do. The executions
are in tests/lambdas/node_lifecycle/test_patch_executed.py."""

from __future__ import annotations

import json

import pytest

from stacks.config import load_environment
from stacks.lifecycle_timing import HISTORY_EVENT_LIMIT
from tests.conftest import ENVIRONMENTS, cdk_context
from tests.stacks.test_node_lifecycle_stack import literal, machines, resources, statements_of


@pytest.fixture(scope="module", params=ENVIRONMENTS)
def each(request, synthesized):
    name = request.param
    return name, synthesized(name).template("node_lifecycle"), load_environment(cdk_context()["environments"], name)


def test_the_maintenance_window_starts_the_patch_run_where_patching_is_enabled(each):
    name, template, config = each
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
