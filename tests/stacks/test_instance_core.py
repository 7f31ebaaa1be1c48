"""The SSM agent's permissions on the instance roles: AmazonSSMManagedInstanceCore's, less its
parameter reads on "*" (stacks/constructs/instance_core.py)."""

from __future__ import annotations

import json

import pytest

from stacks.constructs.instance_core import AGENT_ACTIONS, MANAGED_POLICY, PARAMETER_READS_OF_THE_MANAGED_POLICY


def test_the_agents_actions_are_the_managed_policys_own_less_its_parameter_reads():
    """Against the managed policy's document as moto ships it (moto/iam/aws_managed_policies.py, a
    copy of AWS's; version v2 of 2019-05-23, as the AWS Managed Policy Reference gives it on
    2026-11-26). A new version there (an action a new agent needs) fails here first."""
    from moto.iam.aws_managed_policies import aws_managed_policies_data

    managed = json.loads(aws_managed_policies_data)[MANAGED_POLICY]
    assert managed["DefaultVersionId"] == "v2"
    statements = managed["Document"]["Statement"]
    assert all(s["Effect"] == "Allow" and s["Resource"] == "*" and "Condition" not in s for s in statements)
    ours = [list(actions) for actions in AGENT_ACTIONS]
    ours[0][5:5] = PARAMETER_READS_OF_THE_MANAGED_POLICY  # where the managed policy lists them
    assert [s["Action"] for s in statements] == ours


@pytest.mark.parametrize("part", ["simulator_fleet", "service_fabric"])
def test_no_instance_role_carries_the_managed_policy(synthesized, part):
    template = synthesized("prod").stacks[part]
    roles = [r for r in template["Resources"].values() if r["Type"] == "AWS::IAM::Role"
             and "ec2.amazonaws.com" in json.dumps(r["Properties"]["AssumeRolePolicyDocument"])]
    assert roles
    assert not [r for r in roles if MANAGED_POLICY in json.dumps(r["Properties"].get("ManagedPolicyArns", []))]


def test_functions_in_a_vpc_hold_the_managed_vpc_policys_interface_actions_and_no_log_wildcard():
    """AWSLambdaVPCAccessExecutionRole as moto ships it (v3 of 2024-01-05): its EC2 actions are what
    the lifecycle functions get; its log actions on every group are not (log_group.function_role)."""
    from moto.iam.aws_managed_policies import aws_managed_policies_data

    from stacks.constructs.lifecycle_functions import VPC_INTERFACE_ACTIONS

    managed = json.loads(aws_managed_policies_data)["AWSLambdaVPCAccessExecutionRole"]
    assert managed["DefaultVersionId"] == "v3"
    (statement,) = managed["Document"]["Statement"]
    assert [a for a in statement["Action"] if not a.startswith("logs:")] == list(VPC_INTERFACE_ACTIONS)


def test_no_function_of_ours_carries_a_lambda_managed_policy(synthesized):
    """Our functions' roles name no AWS managed policy; CDK's own custom-resource providers still do."""
    for template in synthesized("prod").stacks.values():
        for logical_id, resource in template["Resources"].items():
            if resource["Type"] == "AWS::IAM::Role" and "lambda.amazonaws.com" in json.dumps(resource["Properties"]["AssumeRolePolicyDocument"]):
                if logical_id.startswith(("Custom", "AWS679f53fac002430cb0da5b7982bd2287")):
                    continue
                assert "ManagedPolicyArns" not in resource["Properties"], logical_id
