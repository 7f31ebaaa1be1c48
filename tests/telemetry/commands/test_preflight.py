"""`telemetry preflight` (telemetry/commands/preflight.py) against moto (STS, EC2, SSM, Secrets Manager, MSK) with Service Quotas
answered through botocore's Stubber, which checks requests and responses against the real model."""

from __future__ import annotations

import collections
import io
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from botocore.stub import ANY, Stubber

from stacks.config import load_environment, read_environments
from telemetry import cli
from telemetry.commands import preflight
from tests.conftest import MOTO_IMAGE, REPO

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


def run(session, capsys, quotas=QUOTAS, *flags: str, env: str = "dev") -> tuple[int, dict[str, tuple[str, str]], str]:
    stubbed = Session(session, quotas)
    code = cli.main(["preflight", "--env", env, *flags], session_factory=lambda region: stubbed)
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
        "tools": "ok", "cdk.json settings": "ok", "account": "ok", "your permissions": "ok", "zones": "ok", "cdk bootstrap": "ok",
        "secret telemetry-dev/service-fabric/cluster-certificate": "ok",
        "secret telemetry-dev/service-fabric/admin-certificate": "ok",
        "on-demand standard vCPUs": "ok", "Elastic IPs (NAT)": "ok", "MSK brokers": "ok",
        "MSK broker storage": "ok", "management CIDRs": "ok", "topic administrator (MFA)": "warning",
    }
    assert rows["MSK broker storage"][1] == "no cluster telemetry-dev yet: it starts with 300 GiB per broker"
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
    image = MOTO_IMAGE
    ec2.run_instances(ImageId=image, MinCount=2, MaxCount=2, InstanceType="m5.large")
    quota = needed + 2 * types["m5.large"] - 1  # one vCPU short
    tight = {**QUOTAS, "ec2": {**QUOTAS["ec2"], preflight.VCPU_QUOTA[1]: float(quota)}}
    code, rows, err = run(account, capsys, tight)
    assert code == 1
    result, detail = rows["on-demand standard vCPUs"]
    assert result == "BLOCKER"
    assert detail.startswith(f"needs {needed} vCPUs, 0 of them held by this environment already, "
                             f"{2 * types['m5.large']} in use elsewhere, quota {quota}")
    (line,) = err.strip().splitlines()
    assert line == f"blocker: on-demand standard vCPUs: {detail}"


def test_spot_instances_are_not_counted_against_the_on_demand_vcpu_quota(account, capsys):
    """Spot instances count against the Spot quotas ("Amazon EC2 service quotas"): two running as
    Spot leave the On-Demand row as it was (DescribeInstances: InstanceLifecycle "spot")."""
    ec2 = account.client("ec2")
    image = MOTO_IMAGE
    ec2.run_instances(ImageId=image, MinCount=2, MaxCount=2, InstanceType="m5.large",
                      InstanceMarketOptions={"MarketType": "spot"})
    _, rows, _ = run(account, capsys)
    assert ", 0 in use elsewhere, " in rows["on-demand standard vCPUs"][1]


def test_a_quota_without_an_applied_value_is_read_from_the_aws_default(account, capsys):
    """ListServiceQuotas leaves out a quota that has no applied value (Service Quotas API Reference);
    ListAWSDefaultServiceQuotas gives it, so the row is checked, not left "not readable"."""
    applied = {**QUOTAS, "ec2": {preflight.VCPU_QUOTA[1]: 512.0}}  # no applied Elastic IP value
    stubbed = Session(account, {})  # its refusals replaced below, in the order preflight asks
    stubbed.stubber.deactivate()
    stubbed.stubber = Stubber(stubbed.quotas)
    for operation, service, quotas in (("list_service_quotas", "ec2", applied["ec2"]),
                                       ("list_aws_default_service_quotas", "ec2", {preflight.EIP_QUOTA[1]: 5.0}),
                                       ("list_service_quotas", "kafka", applied["kafka"])):
        stubbed.stubber.add_response(operation, {"Quotas": [
            {"ServiceCode": service, "QuotaName": name, "QuotaCode": f"L-0000000{i}", "Value": value}
            for i, (name, value) in enumerate(quotas.items())]}, {"ServiceCode": service})
    stubbed.stubber.activate()
    assert cli.main(["preflight", "--env", "dev"], session_factory=lambda region: stubbed) == 0
    out = capsys.readouterr().out
    assert re.search(r"Elastic IPs \(NAT\)\s+ok\s+needs 1 addresses?, .*quota 5 \(AWS's default: Service Quotas "
                     r"lists no applied value\)", out), out
    stubbed.stubber.assert_no_pending_responses()


def test_a_shortfall_against_a_default_quota_is_a_warning_and_an_applied_quota_without_a_value_is_not_read():
    """An increase may be applied where Service Quotas lists no applied value, so a shortfall
    against AWS's default is said, not blocked on; a quota answered with an ErrorReason and no Value
    (Value is optional in the model) is read as not listed."""
    short = preflight.check_quota("Elastic IPs (NAT)", 5.0, 3, (0, 3), "addresses", default=True)
    assert short.result == preflight.WARNING and short.detail.endswith("in Service Quotas, unless one was applied already")
    assert preflight.check_quota("Elastic IPs (NAT)", 5.0, 3, (0, 3), "addresses").result == preflight.BLOCKER

    class Listing:
        exceptions = type("exceptions", (), {"AccessDeniedException": KeyError, "NoSuchResourceException": KeyError})

        def get_paginator(self, operation):
            assert operation == "list_service_quotas"
            return self

        def paginate(self, ServiceCode):  # noqa: N803 - the API's parameter name
            return [{"Quotas": [{"ServiceCode": "ec2", "QuotaName": preflight.EIP_QUOTA[1], "QuotaCode": "L-0263D0A3",
                                 "ErrorReason": {"ErrorCode": "SERVICE_QUOTA_NOT_AVAILABLE_ERROR"}},
                                {"ServiceCode": "ec2", "QuotaName": preflight.VCPU_QUOTA[1], "QuotaCode": "L-1216C47A",
                                 "Value": 64.0}]}]

    quotas = preflight.ServiceQuotas(Listing())
    assert quotas.value(*preflight.VCPU_QUOTA) == 64.0


@pytest.mark.parametrize("instance_type, standard", [
    ("m6i.xlarge", True), ("c7gn.large", True), ("im4gn.large", True), ("t3.micro", True), ("r7iz.large", True),
    ("inf2.xlarge", False), ("trn1.2xlarge", False), ("dl1.24xlarge", False), ("hpc6a.48xlarge", False),
    ("p4d.24xlarge", False), ("g5.xlarge", False), ("x2idn.16xlarge", False),
])
def test_only_the_standard_families_count_against_the_standard_vcpu_quota(instance_type, standard):
    """DL, Inf, Trn and HPC begin with a standard family's letter but have On-Demand quotas of their
    own (EC2 User Guide, "Amazon EC2 service quotas")."""
    assert preflight.is_standard(instance_type) is standard


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
        "run: make bootstrap ENV=dev",
        "blocker: secret telemetry-dev/service-fabric/cluster-certificate: lacks pfx_password",
        "blocker: secret telemetry-dev/service-fabric/admin-certificate: does not exist; create it as docs/deploy.md describes",
        f"blocker: Elastic IPs (NAT): {rows['Elastic IPs (NAT)'][1]}",
    ]
    assert "request an increase" in rows["Elastic IPs (NAT)"][1]


def test_the_bootstrap_advice_runs_as_typed(account, capsys):
    """What the blocker says to run is a make target of this checkout, which refuses the shipped
    placeholders before the CDK CLI makes any AWS call, as make diff and deploy do."""
    account.client("ssm").delete_parameter(Name="/cdk-bootstrap/hnb659fds/version")
    _, rows, _ = run(account, capsys)
    argv = shlex.split(rows["cdk bootstrap"][1].split("; run: ", 1)[1])
    assert argv == ["make", "bootstrap", "ENV=dev"]
    # -o: the virtual environment is taken as made (make would otherwise rebuild a stale stamp).
    typed = ["make", "-o", ".venv/.installed", *argv[1:]]
    # As typed, not as a sub-make of `make test` (MAKELEVEL, MAKEFLAGS: make[1]'s lines).
    env = {name: value for name, value in os.environ.items() if not name.startswith(("MAKE", "MFLAGS"))}
    planned = subprocess.run([*typed, "-n"], cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert planned.returncode == 0, planned.stderr
    refusal, *_, cli_line = planned.stdout.strip().splitlines()
    assert refusal.endswith("python -m stacks.placeholders dev")
    assert cli_line.endswith("/.venv/bin/cdk bootstrap -c env=dev --output cdk.out/dev")
    refused = subprocess.run(typed, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert refused.returncode == 2
    line, trailer = refused.stderr.strip().splitlines()  # the one line, then make's own
    assert line.startswith("error: cdk.json still holds shipped placeholders: environments.dev.account"), line
    assert trailer.startswith("make: ***"), trailer


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
    from telemetry.commands import preflight
    from telemetry.shared import cdk_cli

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
    from telemetry.commands.preflight import caller_principal

    iam = moto_session.client("iam")
    arn = iam.create_role(RoleName="platform-ops", Path="/team/", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    assert caller_principal(iam, "arn:aws:sts::123456789012:assumed-role/platform-ops/alice") == arn
    assert caller_principal(iam, "arn:aws:iam::123456789012:user/bob") == "arn:aws:iam::123456789012:user/bob"
    assert caller_principal(iam, "arn:aws:iam::123456789012:root") is None


def test_a_caller_that_may_not_simulate_itself_gets_a_warning_not_a_blocker(moto_session):
    from telemetry.commands import preflight

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
    deployed_msk(account, template_gib=300, current_gib=330)  # cdk.json's 300, grown by auto scaling
    code, rows, err = run(account, capsys)
    assert code == 0, err
    assert rows["MSK broker storage"] == (
        "ok", "330 GiB per broker; auto scaling grew it from the template's 300; the deployment leaves it alone")


def test_a_changed_volume_below_what_auto_scaling_reached_is_a_blocker(account, capsys):
    """CloudFormation would send cdk.json's 300 GiB (the deployed template has 100); MSK holds 330
    and refuses anything below 340 ("Scale up Amazon MSK Standard broker storage")."""
    deployed_msk(account, template_gib=100, current_gib=330)
    code, rows, err = run(account, capsys)
    assert code == 1
    assert rows["MSK broker storage"][0] == "BLOCKER"
    assert ("blocker: MSK broker storage: msk.ebs_volume_gib 300 would be sent to MSK, whose brokers hold 330 GiB: "
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

    from telemetry.commands.preflight import WARNING, check_broker_storage, check_brokers, msk_clusters
    from stacks.config import load_environment, read_environments

    kafka = boto3.client("kafka", region_name="eu-west-1", aws_access_key_id="a", aws_secret_access_key="b")
    with Stubber(kafka) as stubber:
        stubber.add_client_error("list_clusters_v2", "ForbiddenException", "not allowed", 403)
        found = msk_clusters(kafka)
    config = load_environment(read_environments(), "dev")
    brokers = check_brokers(found, cloudformation=None, quotas=None, config=config)
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

    from telemetry.commands.preflight import BLOCKER, check_broker_storage, msk_clusters
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


PROD_ACCOUNT = "333333333333"  # prod's account in cdk.json


@pytest.fixture
def prod_account(monkeypatch, moto_session):
    """prod's account, bootstrapped, with both secrets."""
    monkeypatch.setenv("MOTO_ACCOUNT_ID", PROD_ACCOUNT)
    moto_session.client("ssm").put_parameter(Name="/cdk-bootstrap/hnb659fds/version", Value="27", Type="String")
    keys = {"certificate": "PEM", "private_key": "PEM", "pfx": "cGZ4", "pfx_password": "pw"}
    for name in ("cluster-certificate", "admin-certificate"):
        moto_session.client("secretsmanager").create_secret(Name=f"telemetry-prod/service-fabric/{name}",
                                                            SecretString=json.dumps(keys))
    return moto_session


def system_tags(stack_id: str, logical_id: str) -> list[dict]:
    """The tags CloudFormation gives what a stack creates ("CloudFormation resource tagging")."""
    return [{"Key": "aws:cloudformation:stack-name", "Value": stack_id.split("/")[1]},
            {"Key": "aws:cloudformation:stack-id", "Value": stack_id},
            {"Key": "aws:cloudformation:logical-id", "Value": logical_id}]


def deploy_prod(session, synthesis) -> dict[str, str]:
    """prod as deployed and at its largest: each stack that creates what a quota counts, in moto with
    an inert template (moto cannot create the real resources; the Msk stack's holds its cluster, which
    the storage check reads), and what its synthesized template declares made as CloudFormation and
    Auto Scaling make it: every Elastic IP, every instance (each Auto Scaling group at its MaxSize,
    its launch template's type) and the MSK cluster, each with its template's tags and CloudFormation's.
    Returns part -> stack id."""
    ec2, kafka = session.client("ec2"), session.client("kafka")
    cloudformation = session.client("cloudformation")
    image = MOTO_IMAGE
    ids = {}
    for part, template in synthesis.stacks.items():
        resources = template["Resources"]
        msk = {lid: r for lid, r in resources.items() if r["Type"] == "AWS::MSK::Cluster"}
        body = {"Resources": msk or {"Nothing": {"Type": "AWS::CloudFormation::WaitConditionHandle"}}}
        stack_id = cloudformation.create_stack(StackName=synthesis.artifacts[part], TemplateBody=json.dumps(body))["StackId"]
        ids[part] = stack_id

        def tags(lid: str, resource: dict) -> list[dict]:
            declared = resource["Properties"].get("Tags", [])
            declared = [{"Key": k, "Value": v} for k, v in declared.items()] if isinstance(declared, dict) else declared
            return [{"Key": t["Key"], "Value": t["Value"]} for t in declared] + system_tags(stack_id, lid)

        for lid, resource in resources.items():
            kind, properties = resource["Type"], resource["Properties"]
            if kind == "AWS::EC2::EIP":
                ec2.allocate_address(Domain="vpc", TagSpecifications=[{"ResourceType": "elastic-ip", "Tags": tags(lid, resource)}])
            elif kind in ("AWS::EC2::Instance", "AWS::AutoScaling::AutoScalingGroup"):
                launch = resources[properties["LaunchTemplate"]["LaunchTemplateId"]["Ref"]]
                count = int(properties.get("MaxSize", 1))
                extra = [{"Key": "aws:autoscaling:groupName", "Value": properties.get("AutoScalingGroupName", lid)}] \
                    if kind == "AWS::AutoScaling::AutoScalingGroup" else []  # fmt: skip
                ec2.run_instances(ImageId=image, MinCount=count, MaxCount=count,
                                  InstanceType=launch["Properties"]["LaunchTemplateData"]["InstanceType"],
                                  TagSpecifications=[{"ResourceType": "instance", "Tags": tags(lid, resource) + extra}])
            elif kind == "AWS::MSK::Cluster":
                info = properties["BrokerNodeGroupInfo"]
                kafka.create_cluster_v2(
                    ClusterName=properties["ClusterName"], Tags={t["Key"]: t["Value"] for t in tags(lid, resource)},
                    Provisioned={"KafkaVersion": properties["KafkaVersion"],
                                 "NumberOfBrokerNodes": properties["NumberOfBrokerNodes"],
                                 "BrokerNodeGroupInfo": {"InstanceType": info["InstanceType"], "ClientSubnets": ["a", "b", "c"],
                                                         "StorageInfo": {"EbsStorageInfo": {
                                                             "VolumeSize": info["StorageInfo"]["EBSStorageInfo"]["VolumeSize"]}}}})
    return ids


def foreign_usage(session, addresses: int, m5_larges: int, brokers: int) -> None:
    """What others run in the account: untagged, or made by a stack of another name."""
    ec2 = session.client("ec2")
    for _ in range(addresses):
        ec2.allocate_address(Domain="vpc", TagSpecifications=[{"ResourceType": "elastic-ip", "Tags": system_tags(
            f"arn:aws:cloudformation:eu-west-1:{PROD_ACCOUNT}:stack/Other-Network/1", "Eip")}])
    if m5_larges:
        ec2.run_instances(ImageId=MOTO_IMAGE, MinCount=m5_larges,
                          MaxCount=m5_larges, InstanceType="m5.large")
    if brokers:
        session.client("kafka").create_cluster_v2(ClusterName="someone-else", Provisioned={
            "KafkaVersion": "3.9.x", "NumberOfBrokerNodes": brokers,
            "BrokerNodeGroupInfo": {"InstanceType": "kafka.m7g.large", "ClientSubnets": ["a", "b", "c"]}})


# Elastic IPs: 5 per Region unless raised (Amazon VPC quotas).
DEFAULT_EIP_QUOTA = 5


def prod_quotas(session, m5_larges: int, brokers: int, short: int = 0, addresses: float = DEFAULT_EIP_QUOTA) -> dict:
    """Quotas holding prod's whole need and others' `m5_larges` and `brokers`, less `short` of each."""
    config = load_environment(read_environments(), "prod")
    fabric, fleet = config.service_fabric, config.simulator_fleet
    types = {t["InstanceType"]: t["VCpuInfo"]["DefaultVCpus"] for t in session.client("ec2").describe_instance_types(
        InstanceTypes=sorted({fabric.seed_instance_type, fabric.node_instance_type, fleet.instance_type, "m5.large"})
    )["InstanceTypes"]}
    vcpus = (types[fabric.seed_instance_type] * fabric.seed_node_count + types[fabric.node_instance_type]
             * fabric.scaling_max_nodes + types[fleet.instance_type] * fleet.host_count + types["m5.large"] * m5_larges)
    return {"ec2": {preflight.VCPU_QUOTA[1]: float(vcpus - short), preflight.EIP_QUOTA[1]: float(addresses)},
            "kafka": {preflight.BROKER_QUOTA[1]: float(config.msk.broker_count + brokers - short)}}


QUOTA_ROWS = ("Elastic IPs (NAT)", "on-demand standard vCPUs", "MSK brokers")


def test_a_rerun_of_deployed_prod_does_not_count_its_own_resources_against_the_quotas(prod_account, synthesized, capsys):
    """prod deployed (3 NAT addresses, 5 seeds, 12 scaling nodes, 3 fleet hosts, 6 brokers) beside
    one address, two m5.large and a 3-broker cluster of others, in quotas that hold exactly prod's
    need and the others': the environment's own are part of its need, not "in use" on top of it."""
    deploy_prod(prod_account, synthesized("prod"))
    foreign_usage(prod_account, addresses=1, m5_larges=2, brokers=3)
    code, rows, err = run(prod_account, capsys, prod_quotas(prod_account, m5_larges=2, brokers=3), env="prod")
    assert {name: rows[name][0] for name in QUOTA_ROWS} == dict.fromkeys(QUOTA_ROWS, "ok"), err
    assert rows["Elastic IPs (NAT)"][1] == (
        "needs 3 addresses, 3 of them held by this environment already, 1 in use elsewhere, quota 5")
    assert rows["MSK brokers"][1] == "needs 6 brokers, 6 of them held by this environment already, 3 in use elsewhere, quota 9"
    needed, own, others = map(int, re.findall(r"\d+", rows["on-demand standard vCPUs"][1])[:3])
    assert (own, others) == (needed, 2 * 2), rows["on-demand standard vCPUs"]  # m5.large: 2 vCPUs


def test_others_usage_and_the_environments_whole_need_over_a_quota_is_a_blocker(prod_account, synthesized, capsys):
    deploy_prod(prod_account, synthesized("prod"))
    foreign_usage(prod_account, addresses=3, m5_larges=2, brokers=3)
    code, rows, err = run(prod_account, capsys, prod_quotas(prod_account, m5_larges=2, brokers=3, short=1), env="prod")
    assert code == 1
    assert {name: rows[name][0] for name in QUOTA_ROWS} == dict.fromkeys(QUOTA_ROWS, "BLOCKER")
    assert rows["Elastic IPs (NAT)"][1] == (
        "needs 3 addresses, 3 of them held by this environment already, 3 in use elsewhere, quota 5: "
        "request an increase of at least 1 in Service Quotas")
    assert f"blocker: MSK brokers: {rows['MSK brokers'][1]}" in err


def test_what_a_deleted_stack_retained_is_not_the_environments_own(prod_account, synthesized, capsys):
    """A production Network stack deleted and deployed again: the addresses the old one left keep
    its stack id (and name); the new stack makes its own beside them, so the old ones count as
    in use elsewhere."""
    ids = deploy_prod(prod_account, synthesized("prod"))
    cloudformation = prod_account.client("cloudformation")
    network = ids["network"].split("/")[1]
    cloudformation.delete_stack(StackName=network)
    cloudformation.create_stack(StackName=network, TemplateBody=json.dumps(
        {"Resources": {"Nothing": {"Type": "AWS::CloudFormation::WaitConditionHandle"}}}))
    code, rows, err = run(prod_account, capsys, prod_quotas(prod_account, m5_larges=0, brokers=0), env="prod")
    assert rows["Elastic IPs (NAT)"] == ("BLOCKER", "needs 3 addresses, 0 of them held by this environment already, "
                                         "3 in use elsewhere, quota 5: request an increase of at least 1 in Service Quotas")


def test_the_stacks_counted_as_the_environments_own_are_those_that_create_what_each_quota_counts(synthesized):
    """Every Elastic IP, instance, Auto Scaling group and MSK cluster of the synthesized app is in
    the stack preflight looks for it in."""
    synthesis = synthesized("prod")
    where = {"AWS::EC2::EIP": preflight.NAT_STACKS, "AWS::EC2::Instance": preflight.INSTANCE_STACKS,
             "AWS::AutoScaling::AutoScalingGroup": preflight.INSTANCE_STACKS, "AWS::MSK::Cluster": preflight.MSK_STACKS}
    found = {kind: set() for kind in where}
    for part, template in synthesis.stacks.items():
        for resource in template["Resources"].values():
            if resource["Type"] in where:
                found[resource["Type"]].add(synthesis.artifacts[part].removeprefix("Telemetry-prod-"))
    assert all(found[kind] <= set(parts) for kind, parts in where.items()), found
    # ...and each of those stacks holds some (none is looked up for nothing).
    assert found["AWS::EC2::Instance"] | found["AWS::AutoScaling::AutoScalingGroup"] == set(preflight.INSTANCE_STACKS)
    assert (found["AWS::EC2::EIP"], found["AWS::MSK::Cluster"]) == (set(preflight.NAT_STACKS), set(preflight.MSK_STACKS))


def test_prod_with_its_placeholders_edited_and_its_package_unpinned_is_a_blocker_naming_the_digest(prod_account, capsys):
    """cdk.json's prod as a new user leaves it after editing the placeholders (tests/conftest.py):
    the synthesis a real run makes refuses the unpinned package (app.py), so preflight says so."""
    from stacks.placeholders import synthesis_refusals

    code, rows, err = run(prod_account, capsys, env="prod")
    assert code == 1
    (unpinned,) = synthesis_refusals(load_environment(read_environments(), "prod"))
    assert rows["cdk.json settings"] == ("BLOCKER", unpinned)
    assert unpinned.startswith("service_fabric.standalone_package_sha256 is not pinned for environment 'prod'")
    assert f"blocker: cdk.json settings: {unpinned}" in err


def test_each_client_is_made_once_however_often_the_checks_ask_for_it(account, capsys, monkeypatch):
    """The checks ask for STS twice (the caller whose permissions are simulated, then the
    account); the command's session (telemetry/shared/sessions.py) makes each client once."""
    from telemetry.shared.sessions import CommandSession

    stubbed = Session(account, QUOTAS)
    asked: collections.Counter[str] = collections.Counter()
    made: collections.Counter[str] = collections.Counter()
    client = stubbed.client
    stubbed.client = lambda name: made.update([name]) or client(name)
    given = CommandSession.client
    monkeypatch.setattr(CommandSession, "client",
                        lambda self, name, **kw: asked.update([name]) or given(self, name, **kw))  # fmt: skip
    assert cli.main(["preflight", "--env", "dev"], session_factory=lambda region: stubbed) == 0, capsys.readouterr()
    assert asked["sts"] >= 2, asked
    assert {"iam", "sts", "ec2", "ssm"} <= made.keys() and set(made.values()) == {1}, made
