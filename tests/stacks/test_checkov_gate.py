"""checkov as a gate over every environment's synthesized templates (issue 46): no check fails, and
every skip is one a construct wrote on its own resource with a reason (stacks/compliance.skip_check;
devtools/checkov_gate.py refuses any other). checkov runs from its own virtual environment,
.venv/checkov (requirements-scan.txt, pinned), which `make lint` and `make test` install."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import ENVIRONMENTS, REPO

pytestmark = pytest.mark.integration
SCAN_PYTHON = REPO / ".venv" / "checkov" / "bin" / "python"
MAX_SKIPS = {"prod": 50}  # issue 46: prod's skips stay at 50 or fewer


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_checkov_finds_nothing_failed_and_every_skip_is_reasoned_on_its_resource(env, synthesized):
    assert SCAN_PYTHON.exists(), "checkov's virtual environment is missing: `make lint` or `make test` installs .venv/checkov"
    limit = ["--max-skips", str(MAX_SKIPS[env])] if env in MAX_SKIPS else []
    gate = subprocess.run([str(SCAN_PYTHON), "-m", "devtools.checkov_gate", str(synthesized(env).outdir), *limit],
                          cwd=REPO, capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert gate.returncode == 0, gate.stderr[-4000:]
    assert " 0 failed" in gate.stdout


def test_skips_are_written_per_resource_with_a_reason(synthesized):
    """The metadata itself, in the shipped templates: an id once per resource, each with its reason."""
    for env in ENVIRONMENTS:
        for template in synthesized(env).stacks.values():
            for logical_id, resource in template["Resources"].items():
                skips = resource.get("Metadata", {}).get("checkov", {}).get("skip", [])
                ids = [skip["id"] for skip in skips]
                assert len(ids) == len(set(ids)), (env, logical_id, ids)
                assert all(len(skip["comment"].split()) >= 6 for skip in skips), (env, logical_id)
    prod = sum(len(r.get("Metadata", {}).get("checkov", {}).get("skip", []))
               for t in synthesized("prod").stacks.values() for r in t["Resources"].values())  # fmt: skip
    assert 0 < prod <= MAX_SKIPS["prod"], prod
    # Every log group carries its stack's key, but those an AWS service fills through CloudWatch
    # Logs' log delivery: the three state machines' execution logs and the MSK broker logs.
    assert json.dumps(synthesized("prod").stacks).count('"CKV_AWS_158"') == 4
