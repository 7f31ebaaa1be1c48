"""app.py as the CDK CLI runs it: bad input gives one line and a non-zero exit, no traceback."""

from __future__ import annotations

import json
import re
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO, cdk_context


def run_app(context: dict, tmp_path, **environ: str) -> subprocess.CompletedProcess:
    # The CLI hands context to the app through CDK_CONTEXT_JSON; do the same.
    env = {**os.environ, "CDK_CONTEXT_JSON": json.dumps(context), "CDK_OUTDIR": str(tmp_path), **environ}
    return subprocess.run(
        [sys.executable, "app.py"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )


def assert_one_line_error(result: subprocess.CompletedProcess, expected: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and expected in lines[0]
    assert "Traceback" not in result.stderr


def test_unknown_environment(tmp_path):
    result = run_app({**cdk_context(), "env": "qa"}, tmp_path)
    assert_one_line_error(result, "unknown environment 'qa'; known environments: dev, prod, staging")


def test_bad_config(tmp_path):
    context = cdk_context()
    context["environments"]["prod"]["msk"]["broker_count"] = 4
    result = run_app({**context, "env": "prod"}, tmp_path)
    assert_one_line_error(result, "msk.broker_count: 4 is not a multiple of the 3 availability zones")


@pytest.mark.integration
def test_a_machine_without_maven_is_told_so_in_one_line(tmp_path):
    # Only the virtual environment on PATH: its python and node, no mvn.
    result = run_app({**cdk_context(), "env": "dev"}, tmp_path, PATH=str(os.path.dirname(sys.executable)))

    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors == ["error: building asset Telemetry-dev-TelemetrySink/SinkJar/Stage: "
                      "building telemetry-sink.jar needs Maven (mvn) on PATH"]
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) <= 3


@pytest.mark.integration
def test_cdk_cli_reports_an_unknown_environment(tmp_path):
    cdk = shutil.which("cdk")
    assert cdk, "the CDK CLI is not on PATH; run the tests through `make test`"
    result = subprocess.run(
        [cdk, "synth", "-c", "env=nope", "--quiet", "--output", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "CDK_DISABLE_CLI_TELEMETRY": "true"},
    )
    assert result.returncode != 0
    assert "error: unknown environment 'nope'; known environments: dev, prod, staging" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_configuration_table_names_every_section():
    """Each top-level key of an environment in cdk.json has its row in the manual's table
    (docs/deploy.md, "Environments")."""
    from stacks.config import EnvironmentConfig

    page = (REPO / "docs" / "deploy.md").read_text()
    table = page[page.index("| key | what it sets |"):].split("\n\n", 1)[0]
    named = {key.split(".")[0] for row in table.splitlines()[2:] for key in re.findall(r"`([a-z_.]+)`", row.split("|")[1])}
    sections = set(EnvironmentConfig.model_fields) - {"name"}
    assert sections <= named, f"missing from docs/deploy.md's configuration table: {sorted(sections - named)}"


@pytest.mark.integration
def test_the_cdk_cli_runs_the_app_with_the_virtual_environment_outside_make(tmp_path):
    """`.venv/bin/cdk bootstrap|synth ...` typed in a shell whose PATH has no virtual environment:
    cdk.json names the venv's python, so the app still finds aws_cdk."""
    cdk = REPO / ".venv" / "bin" / "cdk"
    assert cdk.exists(), "make synth installs the CDK CLI into .venv"
    result = subprocess.run(
        [str(cdk), "synth", "-c", "env=nope", "--quiet", "--output", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), "CDK_DISABLE_CLI_TELEMETRY": "true"},
    )
    assert result.returncode != 0
    assert "ModuleNotFoundError" not in result.stderr
    assert "error: unknown environment 'nope'; known environments: dev, prod, staging" in result.stderr
