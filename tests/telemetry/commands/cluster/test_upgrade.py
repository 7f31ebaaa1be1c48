"""`telemetry cluster upgrade` (telemetry/commands/cluster/upgrade.py) as typed, against the HTTPS emulator's
Cluster Manager (provision, start, progress; tests/sf_emulator/cluster_manager.py) and image store
(--package's chunked upload; tests/sf_emulator/image_store.py), with the membership lock table
(where a patch run holds its progress lease) in moto."""

from __future__ import annotations

import hashlib
import json
import time

import boto3

import pytest

from telemetry import cli
from tests.telemetry.runtime_cabs import write_cab

pytestmark = pytest.mark.integration  # starts the HTTPS emulator

CAB = "MicrosoftServiceFabric.11.5.0.1.cab"


SCALING = "telemetry-dev-sf-scaling"
RESUME = f"aws autoscaling resume-processes --auto-scaling-group-name {SCALING} --scaling-processes Launch --region eu-west-1"


@pytest.fixture
def scaling_group(moto_session) -> str:
    """dev's scaling node group in moto's Auto Scaling, whose Launch process an upgrade suspends."""
    ec2 = moto_session.client("ec2")
    ec2.create_launch_template(LaunchTemplateName="nodes", LaunchTemplateData={
        "ImageId": "ami-12c6146b", "InstanceType": "m6i.xlarge"})  # any id does for moto; listing images is slow
    moto_session.client("autoscaling").create_auto_scaling_group(
        AutoScalingGroupName=SCALING, LaunchTemplate={"LaunchTemplateName": "nodes"}, MinSize=0, MaxSize=3,
        DesiredCapacity=0, VPCZoneIdentifier=ec2.describe_subnets()["Subnets"][0]["SubnetId"])
    return SCALING


def suspended(moto_session) -> list[str]:
    (group,) = moto_session.client("autoscaling").describe_auto_scaling_groups(
        AutoScalingGroupNames=[SCALING])["AutoScalingGroups"]
    return [process["ProcessName"] for process in group.get("SuspendedProcesses", [])]


@pytest.fixture
def gateway(sf_emulator, sf_pki, lock_table, scaling_group) -> list[str]:
    return sf_pki.gateway_flags(sf_emulator.endpoint)


def upgrade(gateway, *extra: str) -> int:
    return cli.main(["cluster", "upgrade", "--env", "dev", "--version", "11.5.0.1", *gateway,
                     "--poll-interval", "0.001", *extra], session_factory=lambda region: boto3.Session(region_name=region))


def test_provisions_upgrades_and_follows_until_it_completes(gateway, sf_cluster, sf_emulator, capsys):
    sf_cluster.cm.put_in_image_store(CAB)
    assert upgrade(gateway, "--format", "json") == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == {
        "environment": "dev", "version": "11.5.0.1", "previous": "11.4.268.1", "state": "RollingForwardCompleted",
        "upload": None,  # no --package: the package was in the image store already
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


def test_run_again_after_it_completed_it_says_so_and_prints_the_cdk_json_edit_again(gateway, sf_cluster, sf_emulator,
                                                                                      capsys):
    """The operator's process died as the upgrade completed, or the edit scrolled away: the same
    command again is done (exit 0), starts nothing, and prints the edit cdk.json still lacks."""
    sf_cluster.cm.put_in_image_store(CAB)
    assert upgrade(gateway) == 0
    capsys.readouterr()
    upgrades = len(sf_emulator.requests_to("POST", r"/\$/Upgrade"))
    assert upgrades == 1

    assert upgrade(gateway, "--format", "json") == 0

    out, err = capsys.readouterr()
    document = json.loads(out)
    assert document["state"] == "RollingForwardCompleted" and document["already_done"] is True
    assert document["cdk_json"]["environments.dev.service_fabric.runtime_version"] == "11.5.0.1"
    assert "the cluster runs 11.5.0.1 already (RollingForwardCompleted): the upgrade is done, nothing was started" in err
    assert "  environments.dev.service_fabric.runtime_version: 11.5.0.1" in err and "then: make deploy ENV=dev" in err
    assert len(sf_emulator.requests_to("POST", r"/\$/Upgrade")) == upgrades
    assert not sf_emulator.requests_to("POST", r"/\$/Provision")[1:]


def test_the_version_cdk_json_and_the_cluster_both_name_is_done_with_nothing_to_edit(gateway, sf_cluster, sf_emulator,
                                                                                     capsys):
    """dev's cdk.json names 11.4.268.1, which the emulated cluster runs."""
    code = cli.main(["cluster", "upgrade", "--env", "dev", "--version", "11.4.268.1", *gateway])
    assert code == 0
    out = capsys.readouterr().out
    assert "the cluster runs 11.4.268.1 already" in out
    assert "cdk.json names 11.4.268.1 too (environments.dev.service_fabric.runtime_version): nothing to edit" in out
    assert "then: make deploy" not in out
    assert not sf_emulator.requests_to("POST", r"/\$/(Provision|Upgrade)")


@pytest.mark.parametrize(("version", "fragment"), [
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
    assert "--package MicrosoftServiceFabric.11.5.0.1.cab uploads it" in err


def test_the_readme_command_plans_offline(capsys):
    """docs/day-2.md's `telemetry cluster upgrade --env prod --version 11.5.0.1 --dry-run`."""
    assert cli.main(["cluster", "upgrade", "--env", "prod", "--version", "11.5.0.1", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Service Fabric runtime 11.4.268.1 (cdk.json) -> 11.5.0.1\n")
    assert "environments.prod.service_fabric.runtime_version: 11.5.0.1" in out
    # The plan says what a run does with launches: resumed only after a rollback or failure.
    assert "(ResumeProcesses) when the upgrade rolls back or fails" in out and "after a completed upgrade" in out


@pytest.mark.overlap
def test_a_patch_run_under_way_is_refused_in_one_line(gateway, lock_table, moto_session, sf_cluster, sf_emulator, capsys):
    # As lambdas/node_lifecycle/patch_progress.py writes the item while a run works.
    dynamodb = moto_session.client("dynamodb")
    dynamodb.put_item(TableName=lock_table, Item={
        "LockName": {"S": "patch-progress"}, "Owner": {"S": "patch:run-1"}, "LeaseUntil": {"N": str(time.time() + 3600)},
        "Current": {"S": "seed-1"}, "Stage": {"S": "install"}, "Done": {"L": [{"S": "seed-0"}]}})  # fmt: skip
    sf_cluster.cm.put_in_image_store(CAB)

    assert upgrade(gateway) == 1  # not a usage error: another operation holds the cluster; wait, then run again

    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a patch run (patch:run-1, at seed-1) holds the patch progress lease" in err[0]
    assert "telemetry cluster upgrade starts nothing while it does" in err[0]
    assert not sf_emulator.requests_to("POST", r"/\$/Provision")
    # Between runs (no Owner) or once the lease has lapsed, the upgrade goes on.
    dynamodb.update_item(TableName=lock_table, Key={"LockName": {"S": "patch-progress"}},
                         UpdateExpression="SET LeaseUntil = :past", ExpressionAttributeValues={":past": {"N": "1"}})  # fmt: skip
    assert upgrade(gateway) == 0


def hold_the_membership_lock(moto_session, lock_table, *, expires_in: float) -> dict:
    """The lock item as a drain writes it (lambdas/node_lifecycle/membership_lock.py), held since 10 minutes ago."""
    since = int(time.time()) - 600
    item = {"LockName": {"S": "cluster-membership"}, "Owner": {"S": "operator-drain:scale-1:ana@laptop:4242"},
            "ExpiresAt": {"N": str(int(time.time() + expires_in))}, "Intent": {"S": "drain"},
            "Node": {"S": "scale-1"}, "Since": {"N": str(since)}}
    moto_session.client("dynamodb").put_item(TableName=lock_table, Item=item)
    return item


@pytest.mark.overlap
def test_a_held_membership_lock_is_refused_in_one_line_before_anything_is_sent(
        gateway, lock_table, moto_session, sf_cluster, sf_emulator, package, capsys):
    item = hold_the_membership_lock(moto_session, lock_table, expires_in=900)

    assert with_package(gateway, package) == 1

    (line,) = capsys.readouterr().err.strip().splitlines()
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(item["Since"]["N"])))
    assert line.startswith(
        f"telemetry: error: the membership lock ({lock_table}) is held by operator-drain:scale-1:ana@laptop:4242 "
        f"(intent drain, node scale-1) since {since}; telemetry cluster upgrade starts nothing while another operation "
        "holds the cluster: wait until it is released, then run again")
    assert not sf_emulator.requests_to("PUT", r"/ImageStore/") and not sf_emulator.requests_to("POST", r"/\$/")
    assert sf_cluster.cm.code_version == "11.4.268.1"


def test_a_membership_lock_its_holder_let_expire_does_not_stop_the_upgrade(
        gateway, lock_table, moto_session, sf_cluster, capsys):
    hold_the_membership_lock(moto_session, lock_table, expires_in=900)
    sf_cluster.cm.put_in_image_store(CAB)
    assert upgrade(gateway) == 1

    hold_the_membership_lock(moto_session, lock_table, expires_in=-1)  # its holder died; the lock lapsed

    assert upgrade(gateway) == 0
    assert sf_cluster.cm.code_version == "11.5.0.1"


def test_an_upgrade_under_way_is_followed_whoever_holds_the_lock(
        gateway, lock_table, moto_session, sf_cluster, sf_emulator, capsys):
    """Following starts nothing; the automation holds the lock node by node while the upgrade runs."""
    hold_the_membership_lock(moto_session, lock_table, expires_in=900)
    sf_cluster.cm.put_in_image_store(CAB)
    assert upgrade(gateway) == 1  # a new upgrade is refused while it is held

    sf_cluster.cm.provision({"CodeFilePath": CAB})
    sf_cluster.cm.start_upgrade({"CodeVersion": "11.5.0.1", "RollingUpgradeMode": "Monitored"}, ["UD0", "UD1"])

    assert upgrade(gateway) == 0
    assert "following it" in capsys.readouterr().out
    assert not sf_emulator.requests_to("POST", r"/\$/Upgrade")


@pytest.fixture
def launch_at_start(monkeypatch, sf_cluster, moto_session) -> list[list[str]]:
    """The group's suspended processes at the moment the cluster receives the upgrade's start."""
    seen: list[list[str]] = []
    start = sf_cluster.cm.start_upgrade

    def watched(*args, **kwargs):
        seen.append(suspended(moto_session))
        return start(*args, **kwargs)

    monkeypatch.setattr(sf_cluster.cm, "start_upgrade", watched)
    return seen


@pytest.mark.overlap
def test_launches_are_suspended_for_the_upgrades_window_and_resumed_when_it_rolls_back(
        gateway, sf_cluster, moto_session, launch_at_start, capsys):
    sf_cluster.cm.put_in_image_store(CAB)
    sf_cluster.cm.outcome = "RollingBackCompleted"

    assert upgrade(gateway) == 1

    out = capsys.readouterr().out
    assert launch_at_start == [["Launch"]]
    assert suspended(moto_session) == []  # the cluster runs the version the launch template prepares
    assert f"suspended the Launch process of {SCALING} for the upgrade's window" in out
    assert out.index("suspended the Launch process") < out.index("upgrade 11.4.268.1 -> 11.5.0.1 started")
    assert f"resumed the Launch process of {SCALING}: the group launches instances again" in out


@pytest.mark.overlap
def test_a_completed_upgrade_keeps_launches_suspended_until_the_deploy_carries_its_version(
        gateway, sf_cluster, moto_session, launch_at_start, capsys):
    """A node launched now would prepare cdk.json's old runtime and be refused at its join
    (add_node.yaml compares TargetCodeVersion with the runtime it was prepared with)."""
    sf_cluster.cm.put_in_image_store(CAB)

    assert upgrade(gateway) == 0

    out = capsys.readouterr().out
    assert launch_at_start == [["Launch"]] and suspended(moto_session) == ["Launch"]
    assert "resumed the Launch" not in out
    assert f"the Launch process of {SCALING} stays suspended" in out and "make deploy ENV=" in out
    assert f"aws autoscaling resume-processes --auto-scaling-group-name {SCALING} --scaling-processes Launch --region " in out


def test_a_launch_process_suspended_before_is_left_as_found(gateway, sf_cluster, moto_session, launch_at_start, capsys):
    moto_session.client("autoscaling").suspend_processes(AutoScalingGroupName=SCALING, ScalingProcesses=["Launch"])
    sf_cluster.cm.put_in_image_store(CAB)

    assert upgrade(gateway) == 0

    out = capsys.readouterr().out
    assert f"the Launch process of {SCALING} is suspended already" in out and "resumed the Launch" not in out
    assert launch_at_start == [["Launch"]] and suspended(moto_session) == ["Launch"]


@pytest.mark.parametrize("ends", ["interrupted", "timeout"])
def test_while_the_upgrade_runs_on_without_the_command_launch_stays_suspended_and_the_command_to_resume_it_is_printed(
        gateway, sf_cluster, moto_session, monkeypatch, capsys, ends):
    from sf_rest import ServiceFabricClient

    sf_cluster.cm.put_in_image_store(CAB)
    looks = []
    progress = ServiceFabricClient.get_cluster_upgrade_progress

    def interrupted_at_the_third_look(self):
        looks.append(1)
        if len(looks) == 3:
            raise KeyboardInterrupt
        return progress(self)

    if ends == "interrupted":
        monkeypatch.setattr(ServiceFabricClient, "get_cluster_upgrade_progress", interrupted_at_the_third_look)

    code = upgrade(gateway, *(["--timeout", "0.000001"] if ends == "timeout" else []))

    captured = capsys.readouterr()
    assert code == (130 if ends == "interrupted" else 1)
    assert sf_cluster.cm.code_version == "11.4.268.1"  # still upgrading
    assert suspended(moto_session) == ["Launch"]
    assert (f"the Launch process of {SCALING} stays suspended while the upgrade runs; once it has rolled back, or "
            f"completed and the deploy carries its version, resume it: {RESUME}") in captured.out
    assert "resumed the Launch process" not in captured.out

    # The run that follows the upgrade to its end says again that Launch stays suspended, and how to resume it.
    if ends == "interrupted":
        monkeypatch.setattr(ServiceFabricClient, "get_cluster_upgrade_progress", progress)
    assert upgrade(gateway) == 0
    out = capsys.readouterr().out
    assert "following it" in out and f"the Launch process of {SCALING} stays suspended" in out and RESUME in out
    assert suspended(moto_session) == ["Launch"]


def test_an_upgrade_begun_while_the_package_was_provisioned_is_not_interrupted(gateway, sf_cluster, moto_session, monkeypatch,
                                                                               capsys):
    """Another upgrade began between the first look and the start (while the package was
    provisioned): a start sent now would interrupt it and take its place (CMR
    BeginAcceptUpgradeFabric), so the command looks again, starts nothing, and resumes Launch."""
    sf_cluster.cm.put_in_image_store(CAB)
    sf_cluster.cm.put_in_image_store("MicrosoftServiceFabric.11.4.300.1.cab")
    sf_cluster.cm.provision({"CodeFilePath": "MicrosoftServiceFabric.11.4.300.1.cab"})
    provision = sf_cluster.cm.provision

    def someone_else_meanwhile(body, *args, **kwargs):
        provision(body, *args, **kwargs)
        sf_cluster.cm.start_upgrade({"CodeVersion": "11.4.300.1", "RollingUpgradeMode": "Monitored"}, ["UD0"])

    monkeypatch.setattr(sf_cluster.cm, "provision", someone_else_meanwhile)

    assert upgrade(gateway) == 2

    captured = capsys.readouterr()
    assert "an upgrade to 11.4.300.1 began meanwhile (RollingForwardInProgress); nothing was started" in captured.err
    assert f"resumed the Launch process of {SCALING}" in captured.out
    assert suspended(moto_session) == [] and sf_cluster.cm.upgrade.target == "11.4.300.1"


@pytest.mark.overlap
def test_a_drain_that_took_the_lock_while_the_package_was_provisioned_stops_the_start(
        gateway, lock_table, moto_session, sf_cluster, sf_emulator, monkeypatch, capsys):
    """A drain took the lock after the first look: it may be between its own look at the cluster
    and its removal upgrade's start, and either start would interrupt the other's upgrade. The
    start is sent only under the lock, so it is refused, nothing started, Launch resumed."""
    sf_cluster.cm.put_in_image_store(CAB)
    provision = sf_cluster.cm.provision

    def a_drain_meanwhile(body, *args, **kwargs):
        provision(body, *args, **kwargs)
        hold_the_membership_lock(moto_session, lock_table, expires_in=900)

    monkeypatch.setattr(sf_cluster.cm, "provision", a_drain_meanwhile)

    assert upgrade(gateway) == 1

    assert "is held by operator-drain:scale-1:ana@laptop:4242 (intent drain, node scale-1)" in capsys.readouterr().err
    assert not sf_emulator.requests_to("POST", r"/\$/Upgrade") and sf_cluster.cm.upgrade is None
    assert suspended(moto_session) == []


def test_the_start_is_sent_under_the_membership_lock_and_the_lock_let_go(gateway, lock_table, moto_session, sf_cluster,
                                                                         monkeypatch):
    sf_cluster.cm.put_in_image_store(CAB)
    held_at_start = []
    start = sf_cluster.cm.start_upgrade

    def watched(*args, **kwargs):
        item = moto_session.client("dynamodb").get_item(TableName=lock_table, Key={"LockName": {"S": "cluster-membership"}})
        held_at_start.append(item.get("Item", {}).get("Intent", {}).get("S"))
        return start(*args, **kwargs)

    monkeypatch.setattr(sf_cluster.cm, "start_upgrade", watched)

    assert upgrade(gateway) == 0

    assert held_at_start == ["upgrade"]
    assert "Item" not in moto_session.client("dynamodb").get_item(TableName=lock_table, Key={"LockName": {"S": "cluster-membership"}})


def test_help_says_what_the_upgrade_reads_first(capsys):
    assert cli.main(["cluster", "upgrade", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert ("Before it uploads, provisions or starts anything it reads the cluster's membership lock and the patch "
            "progress lease (DynamoDB) and starts nothing while either is held; it takes neither.") in text


# -- --package: the runtime package uploaded into the image store first ------------------------

PUT = r"/ImageStore/.*/\$/UploadChunk"
CHUNK = 64 * 1024


@pytest.fixture
def package(tmp_path):
    """A 300 KiB cabinet named for 11.5.0.1: five chunks of 64 KiB, the last one short."""
    path = tmp_path / "downloads" / CAB
    return path, write_cab(path, 300 * 1024)


@pytest.fixture
def no_backoff(monkeypatch):
    """The client's retries without their waits (RetryPolicy.backoff 0 s), so a test that spends
    every attempt takes no time."""
    from sf_rest.retry import RetryPolicy

    monkeypatch.setattr(RetryPolicy, "backoff", lambda self, attempt: 0.0)


def with_package(gateway, package, *extra: str) -> int:
    return upgrade(gateway, "--package", str(package[0]), "--chunk-size", "64KiB", *extra)


def test_uploads_the_package_in_chunks_then_provisions_and_upgrades(gateway, package, sf_cluster, sf_emulator, capsys):
    assert with_package(gateway, package, "--format", "json") == 0

    out, err = capsys.readouterr()
    assert sf_cluster.image_store.file(CAB) == package[1]
    assert [r.body["Content-Range"] for r in sf_emulator.requests_to("PUT", PUT)] == [
        f"bytes {start}-{min(start + CHUNK, 300 * 1024) - 1}/{300 * 1024}" for start in range(0, 300 * 1024, CHUNK)]
    assert sf_emulator.requests_to("POST", r"/\$/Provision")[0].body == {"CodeFilePath": CAB}
    document = json.loads(out)
    assert document["state"] == "RollingForwardCompleted" and sf_cluster.cm.code_version == "11.5.0.1"
    upload = document["upload"]
    assert (upload["store_path"], upload["bytes"], upload["resumed_bytes"], upload["sent_bytes"]) == (
        CAB, 300 * 1024, 0, 300 * 1024)
    assert upload["sha256"] == hashlib.sha256(package[1]).hexdigest().upper()
    assert f"5 chunks of at most 0.1 MiB, upload session {upload['session_id']}" in err
    # A line each time another 10 % is in the store.
    assert [line.split("%")[0].split()[-1] for line in err.splitlines() if line.startswith("uploaded")] == [
        "21", "42", "64", "85", "100"]
    assert f"committed {CAB} into the image store at {CAB}" in err


def test_a_chunk_failing_transiently_is_sent_again(gateway, package, sf_cluster, sf_emulator, no_backoff):
    sf_emulator.inject_error(503, "FABRIC_E_NOT_READY", method="PUT", skip=1)

    assert with_package(gateway, package) == 0

    assert [r.status for r in sf_emulator.requests_to("PUT", PUT)] == [200, 503, 200, 200, 200, 200]
    assert sf_cluster.image_store.file(CAB) == package[1]


def test_an_interrupted_upload_resumes_when_run_again(gateway, package, sf_cluster, sf_emulator, no_backoff, capsys):
    # Two chunks reach the store; every attempt at the third is dropped (the client tries 6 times).
    sf_emulator.inject_drop(times=6, method="PUT", skip=2)

    assert with_package(gateway, package) == 1

    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert f"uploading {CAB} stopped at 42% (0.1 MiB of 0.3 MiB): CONNECTION_LOST" in line
    assert "keeps what it has for 30 minutes after the last chunk: run the same command again to resume" in line
    assert not sf_emulator.requests_to("POST", r"/\$/Provision")
    sf_emulator.clear_log()

    assert with_package(gateway, package) == 0

    out = capsys.readouterr().out
    assert "resuming: the image store has 0.1 MiB of it already" in out
    assert [r.body["Content-Range"].split("/")[0] for r in sf_emulator.requests_to("PUT", PUT)] == [
        f"bytes {start}-{min(start + CHUNK, 300 * 1024) - 1}" for start in range(2 * CHUNK, 300 * 1024, CHUNK)]
    assert sf_cluster.image_store.file(CAB) == package[1] and sf_cluster.cm.code_version == "11.5.0.1"


def test_an_upload_the_store_refuses_deletes_its_session(gateway, package, sf_cluster, sf_emulator, capsys):
    sf_emulator.inject_error(400, "E_INVALIDARG", message="merged size", method="POST", path="CommitUploadSession")

    assert with_package(gateway, package) == 1

    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert f"the image store refused {CAB} at 100%" in line and "E_INVALIDARG" in line
    assert "its upload session was deleted: a run again starts the upload afresh" in line
    assert [r.status for r in sf_emulator.requests_to("DELETE", r"/ImageStore/\$/DeleteUploadSession")] == [200]
    assert sf_cluster.image_store.sessions == {} and not sf_emulator.requests_to("POST", r"/\$/Provision")


def test_a_version_provisioned_already_is_not_uploaded_again(gateway, package, sf_cluster, sf_emulator, capsys):
    sf_cluster.cm.put_in_image_store(CAB)
    sf_cluster.cm.provision({"CodeFilePath": CAB})

    assert with_package(gateway, package, "--format", "json") == 0

    out, err = capsys.readouterr()
    assert "11.5.0.1 is provisioned already: the package is not uploaded" in err
    assert json.loads(out)["upload"] == {"skipped": "11.5.0.1 is provisioned already"}
    assert not sf_emulator.requests_to("PUT", PUT) and not sf_emulator.requests_to("POST", r"/\$/Provision")
    assert sf_emulator.requests_to("GET", r"/\$/GetProvisionedCodeVersions")[0].query["CodeVersion"] == "11.5.0.1"
    assert sf_cluster.cm.code_version == "11.5.0.1"


def test_a_package_of_another_sha256_is_refused_before_any_call(package, sf_emulator, sf_pki, capsys):
    called = []
    code = cli.main(["cluster", "upgrade", "--env", "dev", "--version", "11.5.0.1", "--package", str(package[0]),
                     "--package-sha256", "AB" * 32, "--endpoint", sf_emulator.endpoint,
                     "--client-cert", sf_pki.client.cert_path, "--client-key", sf_pki.client.key_path,
                     "--ca-bundle", sf_pki.ca_path], session_factory=called.append)  # fmt: skip

    assert code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    sha256 = hashlib.sha256(package[1]).hexdigest().upper()
    assert f"has SHA-256 {sha256}, not --package-sha256 {'AB' * 32}" in line and "Traceback" not in line
    assert called == [] and sf_emulator.requests == []  # neither AWS nor the cluster


def bad_package(kind: str, folder) -> str:
    """A --package argument that check_file refuses."""
    if kind == "missing":
        return str(folder / "absent.cab")
    if kind == "folder":
        return str(folder)
    path = folder / {"other version": "MicrosoftServiceFabric.11.4.300.1.cab"}.get(kind, f"{kind}.cab")
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "page":  # what a download link answers when it has moved
        path.write_bytes(b"<html>404</html>")
    elif kind == "cut":
        path.write_bytes(write_cab(path, 1000)[:600])
    else:
        write_cab(path)
    return str(path)


@pytest.mark.parametrize(("kind", "fragment"), [
    ("missing", "absent.cab: no such file"),
    ("folder", "not a file"),
    ("empty", "empty.cab is empty"),
    ("page", "page.cab is not a cabinet (.cab) file: it does not start with MSCF"),
    ("cut", "cut.cab has 600 bytes of the 1000 its header names: the download was cut off"),
    ("other version", "MicrosoftServiceFabric.11.4.300.1.cab is the runtime 11.4.300.1, not --version 11.5.0.1"),
])  # fmt: skip
def test_a_bad_package_is_one_line_and_exit_2_before_any_call(kind, fragment, tmp_path, capsys):
    called = []
    code = cli.main(["cluster", "upgrade", "--env", "dev", "--version", "11.5.0.1", "--package",
                     bad_package(kind, tmp_path)], session_factory=called.append)
    assert code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert fragment in line and line.startswith("telemetry: error: --package ")
    assert called == []


def test_the_dry_run_says_what_it_would_upload_offline(package, capsys):
    called = []
    code = cli.main(["cluster", "upgrade", "--env", "dev", "--version", "11.5.0.1", "--package", str(package[0]),
                     "--chunk-size", "64KiB", "--dry-run", "--format", "json"], session_factory=called.append)

    assert code == 0 and called == []
    plan = json.loads(capsys.readouterr().out)
    sha256 = hashlib.sha256(package[1]).hexdigest().upper()
    assert plan["package"] == {
        "path": str(package[0]), "bytes": 300 * 1024, "sha256": sha256, "store_path": CAB, "chunk_bytes": CHUNK,
        "chunks": 5, "session_id": plan["package"]["session_id"]}
    assert plan["would_change"][0].startswith(f"upload {CAB} (307200 bytes) into the image store at {CAB}")
    assert "PUT /ImageStore/MicrosoftServiceFabric.11.5.0.1.cab/$/UploadChunk x 5" in plan["would_change"][0]
    assert any("GetProvisionedCodeVersions" in line for line in plan["would_read"])
    # The session a run would open: the same file at the same path is the same session, whatever the chunk size.
    assert cli.main(["cluster", "upgrade", "--env", "dev", "--version", "11.5.0.1", "--package", str(package[0]),
                     "--dry-run", "--format", "json"]) == 0
    again = json.loads(capsys.readouterr().out)["package"]
    assert (again["session_id"], again["chunks"]) == (plan["package"]["session_id"], 1)
