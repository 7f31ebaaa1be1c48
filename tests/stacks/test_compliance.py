"""Compliance gates: cdk-nag on every synth, and cfn-lint over every template of every environment."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3

from stacks.config import load_environment
from stacks.platform import build_platform, create_app
from tests.conftest import ENVIRONMENTS, REPO, cdk_context


def test_gate_is_live_a_noncompliant_resource_fails_synthesis(tmp_path):
    """The platform's own app, plus one plain bucket slipped into a stack, must not synthesize."""
    context = cdk_context()
    # Without asset bundling (the Flink jar's Maven build): the gate runs on templates alone.
    app = create_app(context={**context, "aws:cdk:bundling-stacks": []}, outdir=str(tmp_path))
    stacks = build_platform(app, load_environment(context["environments"], "dev"))
    s3.CfnBucket(stacks["network"], "PlainBucket")  # no access logs, no TLS-only policy
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    report = json.loads((tmp_path / "validation-report.json").read_text())
    findings = {
        (v["ruleName"], c["constructPath"])
        for plugin in report["pluginReports"]
        for v in plugin["violations"]
        for c in v["violatingConstructs"]
    }
    assert findings == {
        ("AwsSolutions-S1", "Telemetry-dev-Network/PlainBucket"),
        ("AwsSolutions-S10", "Telemetry-dev-Network/PlainBucket"),
    }


def test_acknowledged_finding_passes_only_on_its_construct(tmp_path):
    app = create_app(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Throwaway")
    bucket = s3.Bucket(stack, "Bucket", enforce_ssl=True, encryption=s3.BucketEncryption.S3_MANAGED)
    cdk.Validations.of(bucket).acknowledge(
        cdk.Acknowledgment(id="AwsSolutions-S1", reason="test: access logs deliberately off")
    )
    app.synth()  # acknowledged: passes
    assert not any(
        v for p in json.loads((tmp_path / "validation-report.json").read_text())["pluginReports"] for v in p["violations"]
    )


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_every_environment_synthesizes_with_no_open_findings(synthesized, env):
    # Synthesis itself raises while a finding is open (see the test above); check the report too.
    report = json.loads((synthesized(env).outdir / "validation-report.json").read_text())
    assert all(p["conclusion"] == "success" and not p["violations"] for p in report["pluginReports"])


def test_cfn_lint_finds_nothing_in_any_environment_but_the_warnings_cdk_cannot_avoid(synthesized, tmp_path):
    """As `make lint` runs it: the cfn-lint command, from the checkout, whose .cfnlintrc leaves out
    W3005 and W3010 (why: that file); any error, or any other warning, fails. cfn-lint's exit code
    is a bit field: 2 = errors, 4 = warnings, 8 = informational. (The package has no __main__: an
    earlier version of this test ran `python -m cfnlint`, which only ever failed to start, and took
    that for a clean run.)"""
    cfn_lint = str(Path(sys.executable).parent / "cfn-lint")
    files = [str(f) for env in ENVIRONMENTS for f in synthesized(env).template_files]
    assert len(files) == 8 * len(ENVIRONMENTS)
    result = subprocess.run([cfn_lint, "--format", "parseable", *files], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    # The check can fail: a template with an error does.
    broken = json.loads(Path(files[0]).read_text())
    broken["Resources"]["Broken"] = {"Type": "AWS::SQS::Queue", "Properties": {"NoSuchProperty": 1}}
    # Written apart from the shared synthesis: checkov's gate, on the other worker, may be scanning
    # that folder at this moment (it once failed on this file).
    bad = tmp_path / "broken.template.json"
    bad.write_text(json.dumps(broken))
    failed = subprocess.run([cfn_lint, str(bad)], capture_output=True, text=True, cwd=REPO)
    assert failed.returncode & 2 and "NoSuchProperty" in failed.stdout, failed.stdout + failed.stderr
