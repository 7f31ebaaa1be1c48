"""`telemetry preflight` (scripts/preflight.py) against moto (STS, EC2, SSM, Secrets Manager, MSK) with Service Quotas
answered through botocore's Stubber, which checks requests and responses against the real model."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from botocore.stub import ANY, Stubber

from scripts import preflight
from stacks.config import load_environment, read_environments
from scripts.telemetry import cli

ACCOUNT = "111111111111"  # the dev environment's account in cdk.json
QUOTAS = {
    "ec2": {
        "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances": 512.0,
        "EC2-VPC Elastic IPs": 5.0,
    },
    "kafka": {"Number of brokers per account": 90.0},
}


class Session:
    """moto's clients, except Service Quotas (moto does not list them): served by a Stubber."""

    def __init__(self, session, quotas: dict[str, dict[str, float]]):
        self.session = session
        self.quotas = session.client("service-quotas")
        self.stubber = Stubber(self.quotas)
        for service in ("ec2", "kafka"):  # the order preflight asks in
            if service not in quotas:
                self.stubber.add_client_error(
                    "list_service_quotas", "AccessDeniedException", "not authorized", 400, {"ServiceCode": service}
                )
                continue
            self.stubber.add_response(
                "list_service_quotas",
                {"Quotas": [
                    {"ServiceCode": service, "QuotaName": name, "QuotaCode": "L-0000000" + str(i), "Value": value}
                    for i, (name, value) in enumerate(quotas[service].items())
                ]},
                {"ServiceCode": service},
            )
        self.stubber.activate()

    def client(self, name):
        return self.quotas if name == "service-quotas" else self.session.client(name)

    def __getattr__(self, name):  # get_partition_for_region, events: the moto session's
        return getattr(self.session, name)


@pytest.fixture
def account(monkeypatch, moto_session):
    """A bootstrapped account with both secrets, nothing running."""
    monkeypatch.setenv("MOTO_ACCOUNT_ID", ACCOUNT)
    session = moto_session
    session.client("ssm").put_parameter(Name="/cdk-bootstrap/hnb659fds/version", Value="27", Type="String")
    secrets = session.client("secretsmanager")
    keys = {"certificate": "PEM", "private_key": "PEM", "pfx": "cGZ4", "pfx_password": "pw"}
    secrets.create_secret(Name="telemetry-dev/service-fabric/cluster-certificate",
                          SecretString=json.dumps(keys))
    secrets.create_secret(Name="telemetry-dev/service-fabric/admin-certificate", SecretString=json.dumps(keys))
    return session


def run(session, capsys, quotas=QUOTAS, *flags: str) -> tuple[int, dict[str, tuple[str, str]], str]:
    stubbed = Session(session, quotas)
    code = cli.main(["preflight", "--env", "dev", *flags], session_factory=lambda region: stubbed)
    out, err = capsys.readouterr()
    rows = {}
    for line in out.strip().splitlines()[1:-1]:
        name, result, detail = [part.strip() for part in _split(line)]
        rows[name] = (result, detail)
    return code, rows, err


def _split(line: str) -> list[str]:
    """The table's columns are separated by two or more spaces."""
    import re

    return re.split(r"\s{2,}", line, maxsplit=2)


def test_a_ready_account_has_no_blocker(account, capsys):
    code, rows, err = run(account, capsys)
    assert code == 0, err
    assert {name: result for name, (result, _) in rows.items()} == {
        "tools": "ok", "account": "ok", "your permissions": "ok", "zones": "ok", "cdk bootstrap": "ok",
        "secret telemetry-dev/service-fabric/cluster-certificate": "ok",
        "secret telemetry-dev/service-fabric/admin-certificate": "ok",
        "on-demand standard vCPUs": "ok", "Elastic IPs (NAT)": "ok", "MSK brokers": "ok",
        "MSK broker storage": "ok", "management CIDRs": "ok", "topic administrator (MFA)": "warning",
    }
    assert rows["MSK broker storage"][1] == "no cluster telemetry-dev yet: it starts with 150 GiB per broker"
    assert rows["topic administrator (MFA)"][1] == (
        "not checked: pass --mfa-serial ARN and preflight assumes telemetry-dev-msk-topic-admin once with a code")
    assert err == ""


MFA_SERIAL = f"arn:aws:iam::{ACCOUNT}:mfa/operator"


@pytest.fixture
def topic_admin_role(account):
    """The role as the Msk stack creates it: trusting the account with MFA (its statements: the
    stack's tests; STS's answer is what this check reads)."""
    trust = {"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"}, "Action": "sts:AssumeRole",
        "Condition": {"Bool": {"aws:MultiFactorAuthPresent": "true"}}}]}
    account.client("iam").create_role(RoleName="telemetry-dev-msk-topic-admin", AssumeRolePolicyDocument=json.dumps(trust))
    return account


def test_the_mfa_device_assumes_the_topic_administrator_once(topic_admin_role, capsys, monkeypatch):
    asked: list[dict] = []
    topic_admin_role.events.register("provide-client-params.sts.AssumeRole", lambda params, **_: asked.append(params))
    monkeypatch.setattr("sys.stdin", io.StringIO("123456\n"))
    code, rows, err = run(topic_admin_role, capsys, QUOTAS, "--mfa-serial", MFA_SERIAL)
    assert code == 0, err
    assert rows["topic administrator (MFA)"] == ("ok", f"{MFA_SERIAL} assumed telemetry-dev-msk-topic-admin (the credentials "
                                                       "were dropped; telemetry topics needs the next code)")
    (request,) = asked
    assert (request["SerialNumber"], request["TokenCode"], request["DurationSeconds"]) == (MFA_SERIAL, "123456", 900)
    assert request["RoleArn"] == f"arn:aws:iam::{ACCOUNT}:role/telemetry-dev-msk-topic-admin"
    assert err == f"MFA code for {MFA_SERIAL}: "


def test_a_refused_mfa_assumption_is_a_blocker_with_what_sts_said(topic_admin_role, capsys, monkeypatch):
    """STS answers a refused AssumeRole with AccessDenied, HTTP 403 (STS API Reference, AssumeRole
    and Common Errors): here through botocore's own parsing of that answer."""
    from botocore.awsrequest import AWSResponse

    message = (f"User: arn:aws:iam::{ACCOUNT}:user/operator is not authorized to perform: sts:AssumeRole on "
               f"resource: arn:aws:iam::{ACCOUNT}:role/telemetry-dev-msk-topic-admin")
    topic_admin_role.events.register("before-call.sts.AssumeRole", lambda **_: (
        AWSResponse(None, 403, {}, None), {"Error": {"Code": "AccessDenied", "Message": message}}))
    monkeypatch.setattr("sys.stdin", io.StringIO("654321\n"))
    code, rows, err = run(topic_admin_role, capsys, QUOTAS, "--mfa-serial", MFA_SERIAL)
    assert code == 1
    assert rows["topic administrator (MFA)"][0] == "BLOCKER"
    assert err.rstrip().endswith(f"blocker: topic administrator (MFA): cannot assume "
                                    f"arn:aws:iam::{ACCOUNT}:role/telemetry-dev-msk-topic-admin: AccessDenied: {message}")


def test_before_the_msk_stack_the_mfa_check_waits_for_the_role(account, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # never asked for a code
    code, rows, err = run(account, capsys, QUOTAS, "--mfa-serial", MFA_SERIAL)
    assert code == 0, err
    assert rows["topic administrator (MFA)"] == (
        "warning", "telemetry-dev-msk-topic-admin does not exist yet (the Msk stack creates it): check again after deploying")


def test_vcpus_needed_are_the_environment_at_its_largest_plus_what_runs(account, capsys):
    """dev: 3 seeds and up to scaling_max_nodes scaling nodes and the fleet's hosts, at their
    types' vCPUs (moto's instance type catalogue), plus every standard instance already running."""
    from stacks.config import load_environment
    from tests.conftest import cdk_context

    config = load_environment(cdk_context()["environments"], "dev")
    ec2 = account.client("ec2")
    types = {t["InstanceType"]: t["VCpuInfo"]["DefaultVCpus"] for t in ec2.describe_instance_types(
        InstanceTypes=sorted({config.service_fabric.seed_instance_type, config.service_fabric.node_instance_type,
                              config.simulator_fleet.instance_type, "m5.large"}))["InstanceTypes"]}
    fabric, fleet = config.service_fabric, config.simulator_fleet
    needed = (types[fabric.seed_instance_type] * fabric.seed_node_count
              + types[fabric.node_instance_type] * fabric.scaling_max_nodes
              + types[fleet.instance_type] * fleet.host_count)
    image = ec2.describe_images()["Images"][0]["ImageId"]
    ec2.run_instances(ImageId=image, MinCount=2, MaxCount=2, InstanceType="m5.large")
    quota = needed + 2 * types["m5.large"] - 1  # one vCPU short
    tight = {**QUOTAS, "ec2": {**QUOTAS["ec2"], preflight.VCPU_QUOTA[1]: float(quota)}}
    code, rows, err = run(account, capsys, tight)
    assert code == 1
    result, detail = rows["on-demand standard vCPUs"]
    assert result == "BLOCKER"
    assert detail.startswith(f"needs {needed} vCPUs, {2 * types['m5.large']} in use, quota {quota}")
    (line,) = err.strip().splitlines()
    assert line == f"blocker: on-demand standard vCPUs: {detail}"


def test_each_missing_piece_is_one_blocker_line(account, capsys):
    account.client("ssm").delete_parameter(Name="/cdk-bootstrap/hnb659fds/version")
    # The cluster secret holds the certificate alone: no node password is asked of operators (#33).
    account.client("secretsmanager").put_secret_value(
        SecretId="telemetry-dev/service-fabric/cluster-certificate",
        SecretString=json.dumps({"certificate": "PEM", "private_key": "PEM", "pfx": "cGZ4"}),
    )
    account.client("secretsmanager").delete_secret(
        SecretId="telemetry-dev/service-fabric/admin-certificate", ForceDeleteWithoutRecovery=True
    )
    few_ips = {**QUOTAS, "ec2": {**QUOTAS["ec2"], "EC2-VPC Elastic IPs": 0.0}}
    code, rows, err = run(account, capsys, few_ips)
    assert code == 1
    assert err.strip().splitlines() == [
        "blocker: cdk bootstrap: not bootstrapped (/cdk-bootstrap/hnb659fds/version missing); "
        "run: cdk bootstrap aws://111111111111/eu-west-1",
        "blocker: secret telemetry-dev/service-fabric/cluster-certificate: lacks pfx_password",
        "blocker: secret telemetry-dev/service-fabric/admin-certificate: does not exist; create it as the README describes",
        f"blocker: Elastic IPs (NAT): {rows['Elastic IPs (NAT)'][1]}",
    ]
    assert "request an increase" in rows["Elastic IPs (NAT)"][1]


def test_credentials_for_another_account_are_a_blocker(account, monkeypatch, capsys):
    monkeypatch.setenv("MOTO_ACCOUNT_ID", "999999999999")
    code, rows, _ = run(account, capsys, {})
    assert code == 1
    assert rows["account"] == ("BLOCKER", "credentials are for 999999999999; dev deploys to 111111111111")
    # Quotas not readable are a warning that names what is needed, not a silent pass.
    assert rows["MSK brokers"][0] == "warning" and "needs" in rows["MSK brokers"][1]


def test_no_credentials_is_one_line_and_exit_2(monkeypatch, tmp_path, capsys):
    import boto3

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    code = cli.main(["preflight", "--env", "dev"], session_factory=lambda region: boto3.Session(region_name=region))
    assert code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("telemetry: error: Unable to locate credentials: this command calls AWS; pass --profile")


def test_an_unknown_environment_is_one_line(capsys):
    assert cli.main(["preflight", "--env", "nope"], session_factory=lambda region: ANY) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("telemetry: error: ") and "nope" in line


def test_help_describes_the_tool():
    result = subprocess.run([str(Path(sys.executable).parent / "telemetry"), "preflight", "--help"],
                            capture_output=True, text=True, check=True)
    assert "--env" in result.stdout and "changes nothing" in result.stdout


def test_a_machine_without_maven_or_the_cdk_cli_is_told_what_to_install(monkeypatch, tmp_path):
    """What deploying runs: the pinned CDK CLI on the checkout's Node, Maven and Java."""
    from scripts import preflight
    from scripts.telemetry import cdk_cli

    monkeypatch.setenv("PATH", str(tmp_path))  # neither mvn nor java
    monkeypatch.setattr(cdk_cli, "VENV_BIN", tmp_path)
    check = preflight.check_tools()
    assert check.result == preflight.BLOCKER
    assert "mvn not found on PATH (Maven builds the telemetry sink's jar" in check.detail
    assert "java not found on PATH" in check.detail
    monkeypatch.setattr(cdk_cli, "CDK_JS", tmp_path / "missing" / "cdk")
    assert preflight.check_tools().detail.startswith("the CDK CLI and its Node in .venv: run make synth")


def test_calls_the_callers_policies_explicitly_deny_are_a_blocker(account, capsys):
    """IAM's policy simulation of the caller (moto answers it as tests/conftest.py says)."""
    account.iam_denied.update({"ssm:SendCommand": "explicitDeny", "sts:AssumeRole": "explicitDeny"})
    code, rows, _ = run(account, capsys)
    assert code == 1
    result, detail = rows["your permissions"]
    assert result == "BLOCKER"
    assert "is explicitly denied ssm:SendCommand, sts:AssumeRole on arn:aws:iam::" in detail
    assert "role/telemetry-dev-msk-topic-admin" in detail and "role/cdk-hnb659fds-deploy-role-" in detail


def test_calls_no_policy_allows_on_any_resource_are_a_warning(account, capsys):
    """An implicit deny against "*" may be a policy scoped to the resources the journey names, or
    to conditions (MFA) the simulation is not told: the run is not blocked on it."""
    account.iam_denied.update({"ssm:SendCommand": "implicitDeny"})
    code, rows, _ = run(account, capsys)
    assert code == 0
    result, detail = rows["your permissions"]
    assert result == "warning" and "is not allowed ssm:SendCommand on any resource" in detail


def test_an_assumed_role_is_simulated_as_its_role_with_its_path(moto_session):
    from scripts.preflight import caller_principal

    iam = moto_session.client("iam")
    arn = iam.create_role(RoleName="platform-ops", Path="/team/", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    assert caller_principal(iam, "arn:aws:sts::123456789012:assumed-role/platform-ops/alice") == arn
    assert caller_principal(iam, "arn:aws:iam::123456789012:user/bob") == "arn:aws:iam::123456789012:user/bob"
    assert caller_principal(iam, "arn:aws:iam::123456789012:root") is None


def test_a_caller_that_may_not_simulate_itself_gets_a_warning_not_a_blocker(moto_session):
    from scripts import preflight

    iam = moto_session.client("iam")
    stubber = Stubber(iam)
    stubber.add_client_error("simulate_principal_policy", "AccessDenied", "not authorized to perform "
                             "iam:SimulatePrincipalPolicy", 403)

    class OwnIam:
        def client(self, name):
            return iam if name == "iam" else moto_session.client(name)

    with stubber:
        check = preflight.check_permissions(OwnIam(), load_environment(read_environments(), "dev"))
    assert check.result == preflight.WARNING
    assert check.detail.startswith("cannot simulate them (An error occurred (AccessDenied)")


def deployed_msk(session, template_gib: int, current_gib: int) -> None:
    """The Msk stack as deployed (its template's broker VolumeSize) and the cluster as MSK holds it
    now, after storage auto scaling grew it (moto keeps both as given)."""
    template = {"Resources": {"KafkaCluster": {"Type": "AWS::MSK::Cluster", "Properties": {
        "ClusterName": "telemetry-dev", "KafkaVersion": "3.9.x", "NumberOfBrokerNodes": 3,
        "BrokerNodeGroupInfo": {"InstanceType": "kafka.m7g.large", "ClientSubnets": ["a", "b", "c"],
                                "StorageInfo": {"EBSStorageInfo": {"VolumeSize": template_gib}}}}}}}
    session.client("cloudformation").create_stack(StackName="Telemetry-dev-Msk", TemplateBody=json.dumps(template))
    session.client("kafka").create_cluster_v2(ClusterName="telemetry-dev", Provisioned={
        "KafkaVersion": "3.9.x", "NumberOfBrokerNodes": 3,
        "BrokerNodeGroupInfo": {"InstanceType": "kafka.m7g.large", "ClientSubnets": ["a", "b", "c"],
                                "StorageInfo": {"EbsStorageInfo": {"VolumeSize": current_gib}}}})


def test_a_grown_volume_the_template_does_not_change_is_left_alone(account, capsys):
    deployed_msk(account, template_gib=150, current_gib=330)  # cdk.json's 150, grown by auto scaling
    code, rows, err = run(account, capsys)
    assert code == 0, err
    assert rows["MSK broker storage"] == (
        "ok", "330 GiB per broker; auto scaling grew it from the template's 150; the deployment leaves it alone")


def test_a_changed_volume_below_what_auto_scaling_reached_is_a_blocker(account, capsys):
    """CloudFormation would send cdk.json's 150 GiB (the deployed template has 100); MSK holds 330
    and refuses anything below 340 ("Scale up Amazon MSK Standard broker storage")."""
    deployed_msk(account, template_gib=100, current_gib=330)
    code, rows, err = run(account, capsys)
    assert code == 1
    assert rows["MSK broker storage"][0] == "BLOCKER"
    assert ("blocker: MSK broker storage: msk.ebs_volume_gib 150 would be sent to MSK, whose brokers hold 330 GiB: "
            "MSK refuses less than 340; set at least that, or put back the deployed 100") in err


def test_a_cluster_retained_outside_its_stack_is_a_blocker(account, capsys):
    """prod's cluster outlives a deleted Msk stack (removal.py): the deployment would create another
    of the same name, not change this one's storage."""
    account.client("kafka").create_cluster_v2(ClusterName="telemetry-dev", Provisioned={
        "KafkaVersion": "3.9.x", "NumberOfBrokerNodes": 3,
        "BrokerNodeGroupInfo": {"InstanceType": "kafka.m7g.large", "ClientSubnets": ["a", "b", "c"],
                                "StorageInfo": {"EbsStorageInfo": {"VolumeSize": 150}}}})
    code, rows, err = run(account, capsys)
    assert code == 1
    assert rows["MSK broker storage"] == ("BLOCKER", "cluster telemetry-dev exists outside stack Telemetry-dev-Msk: "
                                          "the deployment would create another of the same name; delete or rename it first")


def test_clusters_msk_will_not_list_leave_their_two_rows_unchecked_not_the_run_ended():
    """ListClustersV2 refused (MSK's ForbiddenException, botocore's model): the broker and storage rows
    say so; the permissions row is where the missing action is named."""
    import boto3
    from botocore.stub import Stubber

    from scripts.preflight import WARNING, check_broker_storage, check_brokers, msk_clusters
    from stacks.config import load_environment, read_environments

    kafka = boto3.client("kafka", region_name="eu-west-1", aws_access_key_id="a", aws_secret_access_key="b")
    with Stubber(kafka) as stubber:
        stubber.add_client_error("list_clusters_v2", "ForbiddenException", "not allowed", 403)
        found = msk_clusters(kafka)
    config = load_environment(read_environments(), "dev")
    brokers = check_brokers(found, quotas=None, config=config)
    storage = check_broker_storage(found, cloudformation=None, config=config)
    assert brokers.result == storage.result == WARNING
    assert storage.detail.startswith("not checked: ListClustersV2 refused: An error occurred (ForbiddenException)")


def test_a_volume_auto_scaling_grew_past_the_configured_ceiling_is_a_blocker(account, capsys):
    """dev's ceiling is 400 GiB; auto scaling already grew the volumes to 500 (a ceiling lowered in
    cdk.json since): Application Auto Scaling cannot honour a maximum below the volume."""
    deployed_msk(account, template_gib=150, current_gib=500)
    code, rows, err = run(account, capsys)
    assert code == 1
    assert rows["MSK broker storage"] == ("BLOCKER", "msk.storage_autoscaling_max_gib 400 is below the 500 GiB the "
                                          "brokers already hold (volumes never shrink); set at least that")


def test_a_tiered_cluster_whose_configuration_dropped_tiered_storage_is_a_blocker():
    """MSK cannot turn tiered storage off: a cluster ListClustersV2 reports TIERED (botocore's
    Provisioned.StorageMode) against a configuration without msk.tiered_storage (dev's)."""
    import boto3
    from botocore.stub import Stubber

    from scripts.preflight import BLOCKER, check_broker_storage, msk_clusters
    from stacks.config import load_environment, read_environments

    kafka = boto3.client("kafka", region_name="eu-west-1", aws_access_key_id="a", aws_secret_access_key="b")
    cluster = {"ClusterName": "telemetry-dev", "ClusterType": "PROVISIONED", "Provisioned": {
        "StorageMode": "TIERED", "NumberOfBrokerNodes": 3,
        "BrokerNodeGroupInfo": {"InstanceType": "kafka.m7g.large", "ClientSubnets": ["a", "b", "c"],
                                "StorageInfo": {"EbsStorageInfo": {"VolumeSize": 150}}}}}
    with Stubber(kafka) as stubber:
        stubber.add_response("list_clusters_v2", {"ClusterInfoList": [cluster]})
        found = msk_clusters(kafka)
    storage = check_broker_storage(found, cloudformation=None, config=load_environment(read_environments(), "dev"))
    assert (storage.result, storage.detail) == (BLOCKER, "cluster telemetry-dev uses tiered storage, which MSK cannot "
                                                "turn off: keep msk.tiered_storage (removing it would also set guards "
                                                "Kafka refuses on its tiered topics)")
