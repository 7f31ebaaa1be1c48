"""Simulator fleet stack: hosts, their permissions, the Run Command document and results bucket."""

from __future__ import annotations

import json
import re
import shlex
import subprocess

import pytest

from stacks.constructs.simulator_fleet import render_run_document
from tests.conftest import REPO
from tests.msk_authorization import Elsewhere

HOSTS = {"dev": 1, "staging": 2, "prod": 3}


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_fleet_size_and_type_follow_config(synthesized, env):
    template = synthesized(env).template("simulator_fleet")
    (group,) = template.find_resources("AWS::AutoScaling::AutoScalingGroup").values()
    assert group["Properties"]["MinSize"] == group["Properties"]["MaxSize"] == str(HOSTS[env])
    tags = {t["Key"]: t for t in group["Properties"]["Tags"]}
    assert tags["telemetry:fleet"]["Value"] == f"telemetry-{env}-simulator"
    assert tags["telemetry:fleet"]["PropagateAtLaunch"] is True
    (launch,) = template.find_resources("AWS::EC2::LaunchTemplate").values()
    data = launch["Properties"]["LaunchTemplateData"]
    assert data["InstanceType"] == ("c7i.large" if env == "dev" else "c7i.xlarge")
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["Monitoring"] == {"Enabled": True}
    (root,) = data["BlockDeviceMappings"]
    assert root["Ebs"]["Encrypted"] is True
    # Amazon Linux 2023 from the public SSM parameter, resolved at deploy time.
    assert "al2023" in json.dumps(synthesized(env).stacks["simulator_fleet"]["Parameters"])


def test_hosts_are_private_with_no_inbound_and_reach_msk_through_its_client_group(synthesized):
    template = synthesized("dev").template("simulator_fleet")
    (group,) = template.find_resources("AWS::AutoScaling::AutoScalingGroup").values()
    assert all("Private" in json.dumps(s) for s in group["Properties"]["VPCZoneIdentifier"])
    (host_group,) = template.find_resources("AWS::EC2::SecurityGroup").values()
    assert "SecurityGroupIngress" not in host_group["Properties"]
    # HTTPS (AWS APIs, packages) and MQTT over TLS (AWS IoT Core, --transport mqtt).
    assert [(r["IpProtocol"], r["FromPort"]) for r in host_group["Properties"]["SecurityGroupEgress"]] == [("tcp", 443), ("tcp", 8883)]
    (launch,) = template.find_resources("AWS::EC2::LaunchTemplate").values()
    groups = json.dumps(launch["Properties"]["LaunchTemplateData"]["SecurityGroupIds"])
    assert "ClientSecurityGroup" in groups  # imported from the MSK stack


def statements(synthesized, env="dev") -> list[dict]:
    template = synthesized(env).template("simulator_fleet")
    return [s for p in template.find_resources("AWS::IAM::Policy").values() for s in p["Properties"]["PolicyDocument"]["Statement"]]


def test_host_role_may_produce_and_consume_its_topic_only(synthesized):
    by_action = {json.dumps(s["Action"]): json.dumps(s["Resource"]) for s in statements(synthesized)}
    assert by_action['["kafka-cluster:DescribeTopic", "kafka-cluster:WriteData"]'].endswith('"/telemetry"]]}')
    assert by_action['["kafka-cluster:DescribeTopic", "kafka-cluster:ReadData"]'].endswith('"/telemetry"]]}')
    assert ":group/telemetry-dev/*/simulator-*" in by_action['["kafka-cluster:AlterGroup", "kafka-cluster:DescribeGroup"]']
    assert by_action['"s3:PutObject"'].endswith('"/runs/*"]]}')
    assert by_action['"s3:GetObject"'].endswith('.zip"')  # the one package object
    actions = {a for s in statements(synthesized) for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert not {a for a in actions if a.endswith("*") or a in ("kafka-cluster:*", "s3:*")}


def test_results_bucket_is_private_encrypted_tls_only_logged_and_expiring(synthesized):
    template = synthesized("prod").template("simulator_fleet")
    buckets = template.find_resources("AWS::S3::Bucket")
    results = next(b for b in buckets.values() if "LoggingConfiguration" in b["Properties"])
    props = results["Properties"]
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True, "BlockPublicPolicy": True, "IgnorePublicAcls": True, "RestrictPublicBuckets": True
    }
    assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    assert props["LifecycleConfiguration"]["Rules"][0]["ExpirationInDays"] == 365
    assert results["DeletionPolicy"] == "RetainExceptOnCreate"
    policies = json.dumps(template.find_resources("AWS::S3::BucketPolicy"))
    assert policies.count('"aws:SecureTransport": "false"') == 2  # results and access-log buckets


def fleet_document(synthesized, name: str, env="dev") -> dict:
    template = synthesized(env).template("simulator_fleet")
    documents = template.find_resources("AWS::SSM::Document").values()
    assert sorted(d["Properties"]["Name"] for d in documents) == [
        f"telemetry-{env}-manage-topics", f"telemetry-{env}-run-simulator"
    ]
    (document,) = [d for d in documents if d["Properties"]["Name"] == f"telemetry-{env}-{name}"]
    assert document["Properties"]["DocumentType"] == "Command"
    return document["Properties"]["Content"]


def run_document(synthesized, env="dev") -> dict:
    return fleet_document(synthesized, "run-simulator", env)


def test_run_document_defaults_are_rendered(synthesized):
    content = run_document(synthesized)
    params = content["parameters"]
    assert "rendered" not in json.dumps(content)
    assert params["topic"]["default"] == "telemetry"
    assert params["region"]["default"] == "eu-west-1"
    assert "ImportValue" in json.dumps(params["bootstrapParameter"]["default"])
    assert "s3://" in json.dumps(params["simulatorPackage"]["default"])
    for name, spec in params.items():
        assert spec.get("allowedPattern"), f"{name} is substituted into a shell script unchecked"
        if isinstance(spec.get("default"), str):
            assert re.fullmatch(spec["allowedPattern"], spec["default"]), name


def test_run_document_script_is_valid_bash_once_substituted(synthesized, tmp_path):
    content = run_document(synthesized)
    (step,) = content["mainSteps"]
    assert step["action"] == "aws:runShellScript"
    script = "\n".join(step["inputs"]["runCommand"])
    sample = {
        "runId": "run-1", "ratePerHost": "5000", "durationSeconds": "60", "warmupSeconds": "5",
        "processes": "0", "messageBytes": "512", "devices": "1000", "topic": "telemetry",
        "bootstrapParameter": "/telemetry-dev/msk/bootstrap-brokers-iam", "resultsBucket": "results-bucket",
        "simulatorPackage": "s3://assets-bucket/abc.zip", "region": "eu-west-1",
        "transport": "mqtt", "firstDevice": "1001", "mqttEndpoint": "a1b2c3-ats.iot.eu-west-1.amazonaws.com",
        "devicesPath": "/telemetry-dev/devices", "thingPrefix": "telemetry-dev-device-", "environment": "dev",
        "share": "2/3", "connectRate": "125",
    }
    assert set(sample) == set(content["parameters"])
    for name, value in sample.items():
        assert re.fullmatch(content["parameters"][name]["allowedPattern"], value)
        script = script.replace("{{ " + name + " }}", value)
    assert "{{" not in script
    path = tmp_path / "run.sh"
    path.write_text(script)
    result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    # The script runs the simulator with the fixed CLI and uploads where telemetry/commands/simulate.py looks.
    assert "python -m simulator run" in script
    assert 's3://results-bucket/runs/run-1/$instance.json' in script
    assert "--share '2/3'" in script  # this host's partitions
    # Over MQTT the host first writes its own devices' certificates, then publishes as them.
    assert "python -m simulator.device_credentials" in script
    assert "--first '1001' --count '1000'" in script
    assert "--transport mqtt --mqtt-endpoint 'a1b2c3-ats.iot.eu-west-1.amazonaws.com'" in script
    assert "--connect-rate '125'" in script  # this host's share of the account's CONNECT quota
    assert "--environment 'dev'" in script  # its devices publish to telemetry/dev/<thing>/data


def test_render_refuses_unknown_or_missing_values():
    with pytest.raises(ValueError, match="no parameters \\['nope'\\]"):
        render_run_document({"nope": "x"})
    with pytest.raises(ValueError, match="no value given for"):
        render_run_document({"topic": "telemetry"})


def test_dashboard_shows_simulator_metrics(synthesized):
    template = synthesized("dev").template("monitoring")
    (dashboard,) = template.find_resources("AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for metric in ("ThroughputMsgsPerSec", "E2eLatencyP99Ms", "LostMessages"):
        assert metric in body


def test_topics_document_runs_the_hosts_reconcile_with_flags_it_accepts(synthesized, tmp_path):
    """The script of the document `telemetry topics` sends, substituted as SSM would with what the
    workstation sends: valid bash, and its python line parses with the host program's own parser."""
    from telemetry.commands.topics import Declaration, declared_environment
    from simulator.topic_admin import parse_args

    content = fleet_document(synthesized, "manage-topics")
    params = content["parameters"]
    assert "rendered" not in json.dumps(content)
    assert params["tokenParameter"]["default"] == "/telemetry-dev/msk/topics-token"
    # Systems Manager fills in a default for a parameter a command leaves out (the install-only
    # command sends installOnly alone): each must pass its own pattern.
    for name, spec in params.items():
        if isinstance(spec.get("default"), str):
            assert re.fullmatch(spec["allowedPattern"], spec["default"]), name
    assert Declaration.from_text(params["declaration"]["default"]) == Declaration([], [])
    environment = declared_environment("prod")
    sample = {
        "declaration": Declaration(environment.topics, environment.acls).text(), "dryRun": "true",
        "timeoutSeconds": "30", "tokenParameter": "/telemetry-dev/msk/topics-token/5b1d2c3e", "installOnly": "false",
        "bootstrapParameter": "/telemetry-dev/msk/bootstrap-brokers-iam",
        "simulatorPackage": "s3://assets-bucket/abc.zip", "region": "eu-west-1",
    }  # fmt: skip
    assert set(sample) == set(params)
    (step,) = content["mainSteps"]
    script = "\n".join(step["inputs"]["runCommand"])
    for name, value in sample.items():
        assert re.fullmatch(params[name]["allowedPattern"], value), name
        script = script.replace("{{ " + name + " }}", value)
    assert "{{" not in script
    path = tmp_path / "topics.sh"
    path.write_text(script)
    result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    # The token is read from the parameter into the environment, never passed on a command line.
    assert "--with-decryption" in script and "export MSK_IAM_TOKEN" in script
    assert "/opt/telemetry-simulator/" in script  # the shared install, rendered in
    command = script[script.index("python -m simulator.topic_admin") :].replace("\\\n", " ")
    words = shlex.split(command.replace('"$brokers"', "b-1:9098").replace('"${dry_run[@]}"', "--dry-run"))
    args = parse_args(words[3:])
    assert Declaration.from_text(args.declaration) == Declaration(environment.topics, environment.acls)
    assert (args.region, args.timeout, args.dry_run, args.security_protocol) == ("eu-west-1", 30.0, True, "SASL_SSL")


def test_a_failed_install_on_a_host_exits_3_naming_the_command(synthesized, tmp_path):
    """The topics document's script as SSM runs it (bash, set -euo pipefail), on a host where dnf
    fails: it stops with exit 3 and says what failed, before any Kafka work; telemetry topics
    reports that as an install failure, not as a topic Kafka cannot change (which is exit 1)."""
    content = fleet_document(synthesized, "manage-topics")
    script = "\n".join(content["mainSteps"][0]["inputs"]["runCommand"])
    package = f"s3://assets-bucket/{tmp_path.name}.zip"  # an install folder no run has made
    for name, value in {"simulatorPackage": package, "region": "eu-west-1", "dryRun": "false",
                        "bootstrapParameter": "/b", "tokenParameter": "/t", "declaration": "e30=",
                        "timeoutSeconds": "30", "installOnly": "true"}.items():
        script = script.replace("{{ " + name + " }}", value)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "dnf").write_text("#!/bin/sh\necho 'Error: Failed to download metadata for repo amazonlinux' >&2\nexit 1\n")
    (fake / "dnf").chmod(0o755)
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                            env={"PATH": f"{fake}:/usr/bin:/bin"})
    assert result.returncode == 3, result.stderr
    assert result.stderr.strip().splitlines()[-1] == "install failed (exit 1): dnf install -y -q python3.11 unzip"


def test_both_documents_install_the_simulator_the_same_way(synthesized):
    scripts = [
        "\n".join(fleet_document(synthesized, name)["mainSteps"][0]["inputs"]["runCommand"])
        for name in ("run-simulator", "manage-topics")
    ]
    install = [line.strip() for line in (REPO / "stacks" / "documents" / "install_simulator.sh").read_text().splitlines()]
    for script in scripts:
        lines = [line.strip() for line in script.splitlines()]
        start = lines.index(install[0])
        assert lines[start : start + len(install)] == install


def fleet_role_policy(synthesized, env: str) -> str:
    """The fleet hosts' instance role's identity policy as IAM receives it: the synthesized
    statements with their intrinsics resolved for the environment's account and region."""
    from stacks.config import load_environment, read_environments
    from tests.msk_authorization import resolve, role_policy_statements

    config = load_environment(read_environments(), env)
    template = synthesized(env).stacks["simulator_fleet"]
    (role,) = [
        logical_id for logical_id, r in template["Resources"].items()
        if r["Type"] == "AWS::IAM::Role" and "ec2.amazonaws.com" in json.dumps(r["Properties"]["AssumeRolePolicyDocument"])
    ]  # fmt: skip
    pseudo = {"AWS::Partition": "aws", "AWS::Region": config.region, "AWS::AccountId": config.account, "AWS::URLSuffix": "amazonaws.com"}
    elsewhere = Elsewhere()
    statements = [
        resolve(s, pseudo=pseudo, imports=elsewhere, attributes=elsewhere)
        for s in role_policy_statements(template, role)
        # the Kafka, S3 and CloudWatch statements cannot concern SSM (and name the brokers by
        # pieces of an imported ARN); any statement that might is kept
        if any(a.startswith("ssm:") or "*" in a for a in as_list(s.get("Action", "*")))
    ]
    return json.dumps({"Version": "2012-10-17", "Statement": statements})


def as_list(value) -> list:
    return value if isinstance(value, list) else [value]


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_hosts_may_read_the_token_parameter_the_workstation_writes_and_nothing_near_it(synthesized, env):
    """Evaluated by moto's IAM policy evaluator (moto/iam/access_control.py, IAMPolicy and
    IAMPolicyStatement.is_action_permitted: Deny first, then Allow, `*` globs in Action and
    Resource), with the ARN of the very name `telemetry topics` writes, not read back from our
    policy. SecureString with the AWS managed key aws/ssm needs no kms:Decrypt in the role: that
    key's policy admits every principal of the account through SSM ("AWS managed keys",
    https://docs.aws.amazon.com/kms/latest/developerguide/concepts.html#aws-managed-cmk). The
    evaluator matches actions case-sensitively and knows no `?` wildcard; neither appears here."""
    from moto.iam.access_control import IAMPolicy, PermissionResult

    from telemetry.commands.topics import declared_environment

    environment = declared_environment(env)
    policy = IAMPolicy(fleet_role_policy(synthesized, env))
    arn = f"arn:aws:ssm:{environment.region}:{environment.account}:parameter"

    def permitted(action: str, name: str) -> bool:
        return policy.is_action_permitted(action, f"{arn}{name}") == PermissionResult.PERMITTED

    assert environment.token_parameter == f"/telemetry-{env}/msk/topics-token"
    run = f"{environment.token_parameter}/0f1e2d3c4b5a69788796a5b4c3d2e1f0"  # a run's, as reconcile_on_fleet names it
    assert permitted("ssm:GetParameter", run)
    assert not permitted("ssm:PutParameter", run)
    assert not permitted("ssm:DeleteParameter", run)
    other = "prod" if env == "dev" else "dev"
    for name in (f"/telemetry-{other}/msk/topics-token/x", environment.token_parameter, f"{environment.token_parameter}-old/x",
                 "/telemetry-certificates"):
        assert not permitted("ssm:GetParameter", name), name
    # The document the workstation sends reads that same parameter by default.
    assert fleet_document(synthesized, "manage-topics", env)["parameters"]["tokenParameter"]["default"] == environment.token_parameter


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_hosts_may_write_run_command_output_to_their_commands_log_group_alone(synthesized, env):
    """Where the workstation's SendCommand sends the documents' whole output (CloudWatchOutputConfig,
    telemetry/shared/run_command_output.py): the SSM agent creates one stream per command, instance and step
    in that existing group and writes it (aws/amazon-ssm-agent, CloudWatchLogsService.StreamData:
    CreateLogStream, PutLogEvents). Evaluated by moto's IAM policy evaluator against the stream ARN
    the agent writes, the group's Arn attribute as CloudFormation documents it for AWS::Logs::LogGroup
    (arn:...:log-group:NAME:*)."""
    from moto.iam.access_control import IAMPolicy, PermissionResult

    from telemetry.shared.run_command_output import stream_name
    from stacks.config import load_environment, read_environments
    from tests.msk_authorization import resolve, role_policy_statements

    config = load_environment(read_environments(), env)
    template = synthesized(env).stacks["simulator_fleet"]
    name = f"/telemetry-{env}/simulator-fleet/commands"
    (group,) = [lid for lid, r in template["Resources"].items()
                if r["Type"] == "AWS::Logs::LogGroup" and r["Properties"].get("LogGroupName") == name]
    assert template["Resources"][group]["Properties"]["RetentionInDays"] == config.simulator_fleet.results_retention_days
    arn = f"arn:aws:logs:{config.region}:{config.account}:log-group:"
    (role,) = [lid for lid, r in template["Resources"].items() if r["Type"] == "AWS::IAM::Role"
               and "ec2.amazonaws.com" in json.dumps(r["Properties"]["AssumeRolePolicyDocument"])]
    pseudo = {"AWS::Partition": "aws", "AWS::Region": config.region, "AWS::AccountId": config.account,
              "AWS::URLSuffix": "amazonaws.com"}
    attributes = _Known({f"{group}.Arn": f"{arn}{name}:*"})
    statements = [resolve(s, pseudo=pseudo, imports=Elsewhere(), attributes=attributes)
                  for s in role_policy_statements(template, role)
                  if any(a.startswith("logs:") for a in as_list(s.get("Action", [])))]
    assert statements, "no logs statement"
    policy = IAMPolicy(json.dumps({"Version": "2012-10-17", "Statement": statements}))

    def permitted(action: str, resource: str) -> bool:
        return policy.is_action_permitted(action, resource) == PermissionResult.PERMITTED

    stream = stream_name("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "i-0aaaaaaaaaaaaaaaa", "manageTopics", "stderr")
    assert permitted("logs:CreateLogStream", f"{arn}{name}:log-stream:{stream}")
    assert permitted("logs:PutLogEvents", f"{arn}{name}:log-stream:{stream}")
    assert not permitted("logs:DeleteLogStream", f"{arn}{name}:log-stream:{stream}")
    assert permitted("logs:DescribeLogStreams", f"{arn}{name}:*")
    # The agent's first call, CreateLogGroup, is refused; it then finds the group with
    # DescribeLogGroups (a list call, on log-group:*) and writes. Without both it sends nothing.
    assert permitted("logs:DescribeLogGroups", f"{arn}*")
    assert not permitted("logs:CreateLogGroup", f"{arn}{name}") and not permitted("logs:CreateLogGroup", f"{arn}{name}:*")
    assert not permitted("logs:CreateLogStream", f"{arn}/telemetry-{env}/simulator-runs:log-stream:{stream}")


class _Known(dict):
    """The attributes given, and anything else as Elsewhere names it."""

    def __init__(self, known: dict) -> None:
        super().__init__(known)

    def __contains__(self, name) -> bool:
        return True

    def __getitem__(self, name: str) -> str:
        return dict.get(self, name) or f"elsewhere:{name}"


def fleet_kms_policy(synthesized, env: str, key_arn: str) -> tuple[dict, object, list[dict]]:
    """The fleet role's KMS statements as IAM receives them, the token key's Arn given."""
    from moto.iam.access_control import IAMPolicy

    from stacks.config import load_environment, read_environments
    from tests.msk_authorization import resolve, role_policy_statements

    config = load_environment(read_environments(), env)
    template = synthesized(env).stacks["simulator_fleet"]
    (key,) = [lid for lid, r in template["Resources"].items() if r["Type"] == "AWS::KMS::Key" and lid.startswith("FleetTopicsTokenKey")]
    (role,) = [lid for lid, r in template["Resources"].items() if r["Type"] == "AWS::IAM::Role"
               and "ec2.amazonaws.com" in json.dumps(r["Properties"]["AssumeRolePolicyDocument"])]
    pseudo = {"AWS::Partition": "aws", "AWS::Region": config.region, "AWS::AccountId": config.account,
              "AWS::URLSuffix": "amazonaws.com"}
    statements = [resolve(s, pseudo=pseudo, imports=Elsewhere(), attributes=_Known({f"{key}.Arn": key_arn}))
                  for s in role_policy_statements(template, role)
                  if any(a.startswith("kms:") for a in as_list(s.get("Action", [])))
                  # not its log groups' key, which it may use through CloudWatch Logs only
                  and "logs.eu-west-1.amazonaws.com" not in json.dumps(s.get("Condition", {}))]
    return template, IAMPolicy(json.dumps({"Version": "2012-10-17", "Statement": statements})), statements


def test_only_the_environments_fleet_may_decrypt_the_topics_token(synthesized):
    """telemetry topics encrypts the token with the fleet's key (alias as naming.py gives it), not
    aws/ssm, whose policy admits every principal in the account. The key's policy leaves it to IAM
    (CDK's default: the account root), so who may decrypt is who IAM allows: evaluated with moto's
    IAM evaluator for this fleet's role and another environment's; Service Fabric node roles hold no
    KMS action but their log group key's through CloudWatch Logs
    (test_service_fabric_stack.test_node_roles_hold_only_what_a_node_needs)."""
    from moto.iam.access_control import PermissionResult

    dev_key = "arn:aws:kms:eu-west-1:111111111111:key/0a1b2c3d-0000-4000-8000-000000000001"
    template, dev, statements = fleet_kms_policy(synthesized, "dev", dev_key)
    (key,) = [r for lid, r in template["Resources"].items() if r["Type"] == "AWS::KMS::Key" and lid.startswith("FleetTopicsTokenKey")]
    assert key["Properties"]["EnableKeyRotation"] is True
    (alias,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::KMS::Alias"]
    assert alias["Properties"]["AliasName"] == "alias/telemetry-dev-topics-token"  # what the workstation names
    assert [s["Principal"] for s in key["Properties"]["KeyPolicy"]["Statement"]] == [{"AWS": "arn:aws:iam::111111111111:root"}]
    assert dev.is_action_permitted("kms:Decrypt", dev_key) == PermissionResult.PERMITTED
    (decrypt,) = statements
    assert decrypt["Action"] == "kms:Decrypt"
    assert decrypt["Condition"] == {
        "StringEquals": {"kms:ViaService": "ssm.eu-west-1.amazonaws.com"},
        "StringLike": {"kms:EncryptionContext:PARAMETER_ARN":
                       "arn:aws:ssm:eu-west-1:111111111111:parameter/telemetry-dev/msk/topics-token/*"},
    }
    _, prod, _ = fleet_kms_policy(synthesized, "prod", "arn:aws:kms:eu-west-1:333333333333:key/prod-key")
    assert prod.is_action_permitted("kms:Decrypt", dev_key) != PermissionResult.PERMITTED
