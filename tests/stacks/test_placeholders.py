"""The shipped cdk.json's example values are refused by preflight and deploy before any AWS call,
each named with the key to edit; a dry run plans with them and says so (issue 34)."""

from __future__ import annotations

import json

import pytest

from stacks import placeholders
from telemetry import cli
from tests.conftest import REPO

SHIPPED = {
    "SHIPPED_ACCOUNTS": frozenset({"111111111111", "222222222222", "333333333333"}),
    "EXAMPLE_DOMAINS": ("example.com", "example.org", "example.net"),
    "SHIPPED_MANAGEMENT_CIDRS": frozenset({"10.250.0.0/24"}),
}


@pytest.fixture
def shipped(monkeypatch):
    """The placeholders as the module ships them (tests/conftest.py otherwise treats them as edited)."""
    for name, value in SHIPPED.items():
        monkeypatch.setattr(placeholders, name, value)
    # No AWS call may be made: any attempt to build a session fails the test.
    return lambda region: pytest.fail("an AWS session was made before the placeholders were refused")


def test_the_module_ships_the_values_cdk_json_ships():
    """What the refusal looks for is what cdk.json ships (read from the module's source, since the
    suite's fixture replaces the values at run time)."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(placeholders))
    assigned = {node.targets[0].id: node.value for node in tree.body if isinstance(node, ast.Assign)}
    for name, value in SHIPPED.items():
        text = ast.unparse(assigned[name])
        assert all(repr(item) in text for item in value), name
    shipped = (REPO / "cdk.json").read_text()
    assert all(account in shipped for account in SHIPPED["SHIPPED_ACCOUNTS"])
    assert "platform-oncall@example.com" in shipped and "10.250.0.0/24" in shipped


@pytest.mark.parametrize("command", [["preflight"], ["deploy"]])
def test_preflight_and_deploy_refuse_prods_placeholders_before_any_aws_call(shipped, command, capsys):
    assert cli.main([*command, "--env", "prod"], session_factory=shipped) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("telemetry: error: cdk.json still holds shipped placeholders: ")
    assert "environments.prod.account is the example 333333333333" in line
    assert "environments.prod.monitoring.alarm_emails has the example platform-oncall@example.com" in line
    assert "environments.prod.service_fabric.management_cidrs has the placeholder 10.250.0.0/24" in line


def test_a_dry_run_plans_with_them_and_says_they_are_placeholders(shipped, capsys, tmp_path):
    assert cli.main(["deploy", "--env", "dev", "--dry-run", "--format", "json", "--cdk-out", str(tmp_path)],
                    session_factory=shipped) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["placeholders"] == ["environments.dev.account is the example 111111111111: your account id"]
    assert plan["steps"]


UNPINNED = "service_fabric.standalone_package_sha256 is not pinned for environment 'prod'"


def test_a_dry_run_of_prod_lists_the_unpinned_package_the_real_run_refuses(synthesized, capsys):
    """The placeholders edited (tests/conftest.py), the package digest left as cdk.json ships it:
    make diff and the real run stop on it in the synthesis (app.py), so the dry run names it."""
    outdir = str(synthesized("prod").outdir)
    assert cli.main(["deploy", "--env", "prod", "--dry-run", "--format", "json", "--cdk-out", outdir],
                    session_factory=None) == 0
    (listed,) = json.loads(capsys.readouterr().out)["placeholders"]
    assert listed.startswith(UNPINNED)


def test_a_dry_run_lists_every_setting_the_real_run_refuses(shipped, synthesized, capsys):
    assert cli.main(["deploy", "--env", "prod", "--dry-run", "--cdk-out", str(synthesized("prod").outdir)],
                    session_factory=shipped) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("placeholders")]
    listed = line.removeprefix("placeholders (a real run refuses them): ").split("; ")
    assert [phrase.split(" ", 1)[0] for phrase in listed] == [
        "environments.prod.account", "environments.prod.monitoring.alarm_emails",
        "environments.prod.service_fabric.management_cidrs", "service_fabric.standalone_package_sha256"]
