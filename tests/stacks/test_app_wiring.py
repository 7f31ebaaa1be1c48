"""How the stacks of one environment are named and wired."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ENVIRONMENTS


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_stack_names_carry_the_environment(synthesized, env):
    manifest = json.loads((synthesized(env).outdir / "manifest.json").read_text())
    stacks = {
        name: artifact
        for name, artifact in manifest["artifacts"].items()
        if artifact["type"] == "aws:cloudformation:stack"
    }
    parts = (
        "Network", "Monitoring", "Msk", "SimulatorFleet", "ServiceFabric", "TelemetrySink", "NodeLifecycle", "DeviceGateway",
    )  # fmt: skip
    assert set(stacks) == {f"Telemetry-{env}-{part}" for part in parts}
    account = {"dev": "111111111111", "staging": "222222222222", "prod": "333333333333"}[env]
    for name, artifact in stacks.items():
        # The manifest omits stackName when it equals the artifact id.
        assert artifact["properties"].get("stackName", name) == name
        assert artifact["environment"] == f"aws://{account}/eu-west-1"
        assert artifact["properties"].get("terminationProtection", False) is (env == "prod")


def test_environments_do_not_share_physical_names(synthesized):
    def names(env):
        template = json.dumps(synthesized(env).stacks)
        return {n for n in ("telemetry-dev", "telemetry-staging", "telemetry-prod") if n in template}

    assert names("dev") == {"telemetry-dev"}
    assert names("prod") == {"telemetry-prod"}
