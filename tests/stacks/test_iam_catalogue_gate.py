"""IAM's action catalogue as a gate over every environment's synthesized templates (issue 46): no
unknown action, no action on a resource type it does not take (devtools/iam_catalogue_gate.py,
parliament 1.6.4 from .venv/checkov), the catalogue's own gaps listed there with their sources."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import ENVIRONMENTS, REPO

pytestmark = pytest.mark.integration
SCAN_PYTHON = REPO / ".venv" / "checkov" / "bin" / "python"


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_every_policy_names_known_actions_on_resource_types_they_take(env, synthesized):
    assert SCAN_PYTHON.exists(), "the scanners' virtual environment is missing: `make lint` or `make test` installs it"
    gate = subprocess.run([str(SCAN_PYTHON), "-m", "devtools.iam_catalogue_gate", str(synthesized(env).outdir)],
                          cwd=REPO, capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert gate.returncode == 0, gate.stderr[-4000:]
    assert " 0 failed" in gate.stdout


def test_the_gate_refuses_an_unknown_action_and_a_resource_the_action_does_not_take(tmp_path):
    """It can fail: a template whose policy names a misspelt action and an action on the wrong
    resource type is refused, one line each."""
    template = {"Resources": {"Policy": {"Type": "AWS::IAM::Policy", "Properties": {"PolicyDocument": {
        "Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": "s3:GetObjekt", "Resource": "arn:aws:s3:::bucket/*"},
            {"Effect": "Allow", "Action": "dynamodb:GetRecords",
             "Resource": {"Fn::GetAtt": ["Table", "Arn"]}}]}}},
        "Table": {"Type": "AWS::DynamoDB::Table", "Properties": {"TableName": "locks"}}}}
    (tmp_path / "Stack.template.json").write_text(json.dumps(template))
    gate = subprocess.run([str(SCAN_PYTHON), "-m", "devtools.iam_catalogue_gate", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert gate.returncode == 1
    assert "UNKNOWN_ACTION" in gate.stderr and "dynamodb:GetRecords" in gate.stderr


def test_a_listed_gap_is_accepted_only_on_the_resources_it_was_listed_for(tmp_path):
    """ssm:SendCommand's listed gap covers documents and instances; the same action granted on an
    S3 bucket is judged again and refused."""
    def gate_on(resource: str) -> subprocess.CompletedProcess:
        template = {"Resources": {"Policy": {"Type": "AWS::IAM::Policy", "Properties": {"PolicyDocument": {
            "Version": "2012-10-17", "Statement": [
                {"Effect": "Allow", "Action": "ssm:SendCommand", "Resource": resource}]}}}}}
        (tmp_path / "Stack.template.json").write_text(json.dumps(template))
        return subprocess.run([str(SCAN_PYTHON), "-m", "devtools.iam_catalogue_gate", str(tmp_path)],
                              cwd=REPO, capture_output=True, text=True, timeout=600, check=False)  # fmt: skip

    listed = gate_on("arn:aws:ec2:eu-west-1:123456789012:instance/*")
    assert listed.returncode == 0 and "1 known catalogue gaps" in listed.stdout, listed.stdout + listed.stderr
    elsewhere = gate_on("arn:aws:s3:::bucket")
    assert elsewhere.returncode == 1 and "ssm:SendCommand" in elsewhere.stderr
