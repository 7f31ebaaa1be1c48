"""`telemetry cluster upgrade` (scripts/upgrade_runtime.py) as typed, against the HTTPS emulator's
Cluster Manager (provision, start, progress; tests/sf_emulator/cluster_manager.py), with the
membership lock table (where a patch run holds its progress lease) in moto."""

from __future__ import annotations

import json
import time

import boto3

import pytest

from scripts.telemetry import cli

pytestmark = pytest.mark.integration  # starts the HTTPS emulator

CAB = "MicrosoftServiceFabric.11.5.0.1.cab"


@pytest.fixture
def lock_table(moto_session) -> str:
    """The dev membership lock table, as the NodeLifecycle stack makes it (key LockName)."""
    from stacks.config import load_environment, read_environments
    from stacks.naming import membership_lock_table_name

    name = membership_lock_table_name(load_environment(read_environments(), "dev"))
    moto_session.client("dynamodb").create_table(
        TableName=name, KeySchema=[{"AttributeName": "LockName", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "LockName", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST")  # fmt: skip
    return name


@pytest.fixture
def gateway(sf_emulator, sf_pki, lock_table) -> list[str]:
    return ["--endpoint", sf_emulator.endpoint, "--client-cert", sf_pki.client.cert_path,
            "--client-key", sf_pki.client.key_path, "--ca-bundle", sf_pki.ca_path]


def upgrade(gateway, *extra: str) -> int:
    return cli.main(["cluster", "upgrade", "--env", "dev", "--version", "11.5.0.1", *gateway,
                     "--poll-interval", "0.001", *extra], session_factory=lambda region: boto3.Session(region_name=region))


def test_provisions_upgrades_and_follows_until_it_completes(gateway, sf_cluster, sf_emulator, capsys):
    sf_cluster.cm.put_in_image_store(CAB)
    assert upgrade(gateway, "--format", "json") == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == {
        "environment": "dev", "version": "11.5.0.1", "previous": "11.4.268.1", "state": "RollingForwardCompleted",
        "cdk_json": {
            "environments.dev.service_fabric.runtime_version": "11.5.0.1",
            "environments.dev.service_fabric.runtime_cab_url":
                "the Cab link of 11.5.0.1 in its release notes (microsoft/service-fabric release_notes)",
            "environments.dev.service_fabric.standalone_package_url": "the Package link of 11.5.0.1 in the same release notes",
            "environments.dev.service_fabric.standalone_package_sha256":
                "Get-FileHash -Algorithm SHA256 of that package, after review",
        }}
    assert sf_emulator.requests_to("POST", r"/\$/Provision")[0].body == {"CodeFilePath": CAB}
    assert "RollingForwardInProgress to 11.5.0.1, 1/3 upgrade domains done, next UD1" in err
    assert "the cluster runs 11.5.0.1" in err and "then: make deploy ENV=dev" in err
    assert sf_cluster.cm.code_version == "11.5.0.1"


def test_run_again_while_it_runs_follows_the_same_upgrade(gateway, sf_cluster, sf_emulator, capsys):
    sf_cluster.cm.put_in_image_store(CAB)
    sf_cluster.cm.provision({"CodeFilePath": CAB})
    sf_cluster.cm.start_upgrade({"CodeVersion": "11.5.0.1", "RollingUpgradeMode": "Monitored"}, ["UD0", "UD1"])
    assert upgrade(gateway) == 0
    assert "an upgrade to 11.5.0.1 is under way (RollingForwardInProgress); following it" in capsys.readouterr().out
    assert not sf_emulator.requests_to("POST", r"/\$/Upgrade")


def test_a_rollback_is_exit_1_with_its_reason(gateway, sf_cluster, capsys):
    sf_cluster.cm.put_in_image_store(CAB)
    sf_cluster.cm.outcome = "RollingBackCompleted"
    assert upgrade(gateway) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["telemetry: error: the upgrade to 11.5.0.1 ended RollingBackCompleted (failure: HealthCheck); the "
                   "cluster runs 11.4.268.1; its health evaluations say why (Get-ServiceFabricClusterUpgrade)"]


@pytest.mark.parametrize(("version", "fragment"), [
    ("11.4.268.1", "--version 11.4.268.1 is not newer than 11.4.268.1, which the cluster runs"),
    ("10.1.2448.1", "--version 10.1.2448.1 is not newer than 11.4.268.1, which the cluster runs"),
])
def test_a_version_not_newer_than_the_clusters_is_refused(gateway, version, fragment, sf_emulator, capsys):
    code = cli.main(["cluster", "upgrade", "--env", "dev", "--version", version, *gateway])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and fragment in err[0]
    assert not sf_emulator.requests_to("POST", r"/\$/Provision")


def test_another_upgrade_under_way_is_refused(gateway, sf_cluster, capsys):
    sf_cluster.cm.put_in_image_store("MicrosoftServiceFabric.11.4.300.1.cab")
    sf_cluster.cm.provision({"CodeFilePath": "MicrosoftServiceFabric.11.4.300.1.cab"})
    sf_cluster.cm.start_upgrade({"CodeVersion": "11.4.300.1", "RollingUpgradeMode": "Monitored"}, ["UD0"])
    assert upgrade(gateway) == 2
    assert "an upgrade to 11.4.300.1 is under way (RollingForwardInProgress); wait until it ends" in capsys.readouterr().err


def test_a_package_missing_from_the_image_store_says_how_to_put_it_there(gateway, capsys):
    assert upgrade(gateway) == 1
    err = capsys.readouterr().err
    assert "provisioning MicrosoftServiceFabric.11.5.0.1.cab failed: FABRIC_E_FILE_NOT_FOUND" in err
    assert "Copy-ServiceFabricClusterPackage -Code" in err


def test_the_readme_command_plans_offline(capsys):
    """README's `telemetry cluster upgrade --env prod --version 11.5.0.1 --dry-run`."""
    assert cli.main(["cluster", "upgrade", "--env", "prod", "--version", "11.5.0.1", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Service Fabric runtime 11.4.268.1 (cdk.json) -> 11.5.0.1\n")
    assert "environments.prod.service_fabric.runtime_version: 11.5.0.1" in out


def test_a_patch_run_under_way_is_refused_in_one_line(gateway, lock_table, moto_session, sf_cluster, sf_emulator, capsys):
    # As lambdas/node_lifecycle/patch_progress.py writes the item while a run works.
    dynamodb = moto_session.client("dynamodb")
    dynamodb.put_item(TableName=lock_table, Item={
        "LockName": {"S": "patch-progress"}, "Owner": {"S": "patch:run-1"}, "LeaseUntil": {"N": str(time.time() + 3600)},
        "Current": {"S": "seed-1"}, "Stage": {"S": "install"}, "Done": {"L": [{"S": "seed-0"}]}})  # fmt: skip
    sf_cluster.cm.put_in_image_store(CAB)

    assert upgrade(gateway) == 2

    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a patch run (patch:run-1, at seed-1) holds the patch progress lease" in err[0]
    assert not sf_emulator.requests_to("POST", r"/\$/Provision")
    # Between runs (no Owner) or once the lease has lapsed, the upgrade goes on.
    dynamodb.update_item(TableName=lock_table, Key={"LockName": {"S": "patch-progress"}},
                         UpdateExpression="SET LeaseUntil = :past", ExpressionAttributeValues={":past": {"N": "1"}})  # fmt: skip
    assert upgrade(gateway) == 0
