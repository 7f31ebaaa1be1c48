"""`telemetry cluster bootstrap` (telemetry/commands/cluster/bootstrap.py) against moto's EC2, Secrets Manager and SSM, with the seed topology
of the synthesized prod template (its Seeds output, the network stack's subnets), and the stack
outputs served by CloudFormation's DescribeStacks through botocore's Stubber (which checks the
request and the response against the real API model)."""

from __future__ import annotations

import base64
import datetime
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from stacks.constructs.node_scripts import render_cluster_nodes_document, render_create_cluster_document
from telemetry import cli
from telemetry.commands.cluster import bootstrap as bootstrap_cluster
from telemetry.shared.cluster_inventory import thumbprint
from tests.conftest import MOTO_IMAGE
from tests.sf_emulator.certs import make_pki
from tests.telemetry.seed_commands import PREPARED, seeds_answer
from tests.telemetry.stack_outputs import StubbedStackSession, stack_id

REGION = "eu-west-1"
CLUSTER = "telemetry-prod-sf"
DOCUMENT = "telemetry-prod-create-sf-cluster"
STACK = "Telemetry-prod-ServiceFabric"
GATEWAY = "https://telemetry-prod-mgmt-0123456789.elb.eu-west-1.amazonaws.com:19080"


def template_seeds(synthesized) -> list[dict]:
    """name, address, subnet CIDR and zone of every seed, from the synthesized prod stacks."""
    subnets = {
        r["Properties"]["AvailabilityZone"]: r["Properties"]["CidrBlock"]
        for r in synthesized("prod").stacks["network"]["Resources"].values()
        if r["Type"] == "AWS::EC2::Subnet" and "Private" in json.dumps(r["Properties"]["Tags"])
    }
    seeds = json.loads(synthesized("prod").stacks["service_fabric"]["Outputs"]["Seeds"]["Value"])
    return [
        {"name": s["name"], "address": s["address"], "zone": s["availability_zone"], "cidr": subnets[s["availability_zone"]]}
        for s in seeds
    ]


def deployed_outputs(synthesized) -> list[dict]:
    """The outputs CloudFormation would return: the template's, references resolved to samples."""
    outputs = synthesized("prod").stacks["service_fabric"]["Outputs"]
    samples = {"HttpGatewayEndpoint": GATEWAY}
    return [
        {"OutputKey": k, "OutputValue": o["Value"] if isinstance(o["Value"], str) else samples.get(k, "sample")}
        for k, o in outputs.items()
    ]


def secret(issued, **extra) -> str:
    return json.dumps({"certificate": issued.cert_pem, "private_key": issued.key_pem, "pfx": "cGZ4",
                       "pfx_password": "pw", **extra})


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("bootstrap-pki"))


@pytest.fixture
def aws(moto_session, synthesized, pki):
    seeds = template_seeds(synthesized)
    session = moto_session
    ec2 = session.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.30.0.0/16")["Vpc"]["VpcId"]
    image = MOTO_IMAGE
    subnets = {}
    for seed in seeds:
        if seed["cidr"] not in subnets:
            subnets[seed["cidr"]] = ec2.create_subnet(
                VpcId=vpc, CidrBlock=seed["cidr"], AvailabilityZone=seed["zone"]
            )["Subnet"]["SubnetId"]
        # As the stack launches them: the fixed address as the primary one, name and type tags.
        seed["instance_id"] = ec2.run_instances(
            ImageId=image, MinCount=1, MaxCount=1, InstanceType="m6i.2xlarge", SubnetId=subnets[seed["cidr"]],
            PrivateIpAddress=seed["address"],
            TagSpecifications=[{"ResourceType": "instance", "Tags": [
                {"Key": "sf:cluster", "Value": CLUSTER}, {"Key": "sf:nodetype", "Value": "PrimaryNodeType"},
                {"Key": "sf:nodename", "Value": seed["name"]}]}],
        )["Instances"][0]["InstanceId"]
    # A scaling node of the same cluster and a seed of another cluster: neither takes part.
    ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, SubnetId=next(iter(subnets.values())),
                      TagSpecifications=[{"ResourceType": "instance", "Tags": [
                          {"Key": "sf:cluster", "Value": CLUSTER}, {"Key": "sf:nodetype", "Value": "ScalingNodeType"}]}])
    ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, SubnetId=next(iter(subnets.values())),
                      TagSpecifications=[{"ResourceType": "instance", "Tags": [
                          {"Key": "sf:cluster", "Value": "telemetry-dev-sf"}, {"Key": "sf:nodetype", "Value": "PrimaryNodeType"},
                          {"Key": "sf:nodename", "Value": "seed-0"}]}])
    sm = session.client("secretsmanager")
    sm.create_secret(Name="telemetry-prod/service-fabric/cluster-certificate",
                     SecretString=secret(pki.server))
    sm.create_secret(Name="telemetry-prod/service-fabric/admin-certificate", SecretString=secret(pki.client))
    content = render_create_cluster_document({
        "statusFile": "C:\\ServiceFabric\\prepare-node.status.json",
        "deploymentSecret": "telemetry-prod/service-fabric/seed-deployment-password",
        "deploymentAccount": "sfdeploy", "region": REGION,
        "runtimePackage": "C:\\ServiceFabric\\Package\\MicrosoftServiceFabric.11.4.268.1.cab",
    })
    session.client("ssm").create_document(Name=DOCUMENT, Content=json.dumps(content),
                                          DocumentType="Command", DocumentFormat="JSON")
    # Asked first whether a cluster answers: by default none does (the seeds answer NOCLUSTER).
    session.client("ssm").create_document(
        Name="telemetry-prod-sf-cluster-nodes", DocumentType="Command", DocumentFormat="JSON",
        Content=json.dumps(render_cluster_nodes_document({"statusFile": "C:\\ServiceFabric\\prepare-node.status.json"})))
    session.cluster_nodes = None  # or a list of nodes (Name, NodeStatus, IsSeedNode), as Get-ServiceFabricNode lists them
    session.installed = set()  # seeds with Service Fabric installed (FabricHostSvc)
    session.prepared = {}  # instance id -> its PREPARED=<state>|<detail> other than succeeded
    seeds_answer(session, lambda: session.cluster_nodes, lambda instance: instance in session.installed,
                 lambda instance: session.prepared.get(instance, PREPARED))
    yield StubbedStackSession(session, STACK, deployed_outputs(synthesized)), seeds


def run(argv, session) -> int:
    return cli.main(["cluster", "bootstrap", *argv], session_factory=lambda region: session)


def sent_commands(session) -> list[dict]:
    """The create-cluster commands sent (the read-only cluster-nodes one is the stand-in's)."""
    sent: list[dict] = []
    session.events.register("provide-client-params.ssm.SendCommand",
                            lambda params, **_: sent.append(dict(params)) if params["DocumentName"] == DOCUMENT else None)
    return sent


# The keys of Microsoft's ClusterConfig.X509.MultiMachine.json sample (apiVersion 10-2017).
SAMPLE_TOP = {"name", "clusterConfigurationVersion", "apiVersion", "nodes", "properties"}
SAMPLE_NODE = {"nodeName", "iPAddress", "nodeTypeRef", "faultDomain", "upgradeDomain"}
SAMPLE_PROPERTIES = {"diagnosticsStore", "security", "nodeTypes", "fabricSettings",
                     "codeVersion", "fabricClusterAutoupgradeEnabled"}
SAMPLE_NODE_TYPE = {
    "name", "clientConnectionEndpointPort", "clusterConnectionEndpointPort", "leaseDriverEndpointPort",
    "serviceConnectionEndpointPort", "httpGatewayEndpointPort", "reverseProxyEndpointPort", "applicationPorts",
    "ephemeralPorts", "isPrimary",
}


def check_cluster_config(config, seeds, *, cluster_thumbprint, admin_thumbprint):
    assert set(config) == SAMPLE_TOP and set(config["properties"]) == SAMPLE_PROPERTIES
    assert (config["name"], config["apiVersion"], config["clusterConfigurationVersion"]) == (CLUSTER, "10-2017", "1.0.0")
    assert all(set(node) == SAMPLE_NODE for node in config["nodes"])
    assert [(n["nodeName"], n["iPAddress"], n["faultDomain"]) for n in config["nodes"]] == [
        (s["name"], s["address"], f"fd:/eu-west-1/{s['zone']}") for s in seeds
    ]
    assert [n["upgradeDomain"] for n in config["nodes"]] == ["UD0", "UD1", "UD2", "UD3", "UD4"]
    assert {n["nodeTypeRef"] for n in config["nodes"]} == {"PrimaryNodeType"}

    types = {t["name"]: t for t in config["properties"]["nodeTypes"]}
    assert set(types) == {"PrimaryNodeType", "ScalingNodeType"}
    assert all(set(t) == SAMPLE_NODE_TYPE for t in types.values())
    assert types["PrimaryNodeType"]["isPrimary"] is True and types["ScalingNodeType"]["isPrimary"] is False
    assert types["ScalingNodeType"]["applicationPorts"] == {"startPort": "20000", "endPort": "30000"}
    assert types["ScalingNodeType"]["ephemeralPorts"] == {"startPort": "49152", "endPort": "65534"}

    security = config["properties"]["security"]
    assert (security["ClusterCredentialType"], security["ServerCredentialType"]) == ("X509", "X509")
    certificates = security["CertificateInformation"]
    assert certificates["ClusterCertificate"] == {"Thumbprint": cluster_thumbprint, "X509StoreName": "My"}
    assert certificates["ServerCertificate"] == certificates["ClusterCertificate"]
    assert certificates["ClientCertificateThumbprints"] == [{"CertificateThumbprint": admin_thumbprint, "IsAdmin": True}]
    # The pinned runtime, and no auto-upgrade away from it.
    assert config["properties"]["codeVersion"] == "11.4.268.1"
    assert config["properties"]["fabricClusterAutoupgradeEnabled"] is False
    setup, hosting = config["properties"]["fabricSettings"]
    assert {p["name"]: p["value"] for p in setup["parameters"]} == {"FabricDataRoot": "D:\\SF", "FabricLogRoot": "D:\\SF\\Log"}
    # Applications' RunAs policies are honoured (docs/service-fabric.md: run them as a low-privilege account; #33).
    assert hosting == {"name": "Hosting", "parameters": [{"name": "RunAsPolicyEnabled", "value": "true"}]}


def test_dry_run_needs_no_credentials_and_writes_the_synthesized_topology(synthesized, monkeypatch, tmp_path, capsys):
    """As the help says: from cdk.out alone. No session is ever asked for, and with no
    credentials in the environment any AWS call would fail."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))

    def no_session(region):
        raise AssertionError("a dry run asked for an AWS session")

    output = tmp_path / "ClusterConfig.json"
    argv = ["--env", "prod", "--dry-run", "--output", str(output), "--cdk-out", str(synthesized("prod").outdir)]
    assert cli.main(["cluster", "bootstrap", *argv], session_factory=no_session) == 0
    check_cluster_config(
        json.loads(output.read_text()), template_seeds(synthesized),
        cluster_thumbprint="<thumbprint of the certificate in secret telemetry-prod/service-fabric/cluster-certificate>",
        admin_thumbprint="<thumbprint of the certificate in secret telemetry-prod/service-fabric/admin-certificate>",
    )
    assert "no AWS call made" in capsys.readouterr().out


def test_dry_run_without_a_synthesized_template_synthesizes_as_deploy_does_and_writes_nothing(
        synthesized, monkeypatch, tmp_path, capsys):
    """cdk.out without the environment: the synthesis deploy's plan makes (into a temporary
    folder; the session's own synthesis stands in for it here), and, without --output, the
    ClusterConfig in the plan only."""
    import shutil

    from telemetry.shared import cloud_assembly

    made = []

    def synthesize(config, outdir):
        made.append(config.name)
        shutil.copytree(synthesized("prod").outdir, outdir, dirs_exist_ok=True)

    monkeypatch.setattr(cloud_assembly, "synthesize", synthesize)
    (tmp_path / "cdk.out").mkdir()  # a folder without prod's synthesis (a missing one is refused)
    argv = ["--env", "prod", "--dry-run", "--cdk-out", str(tmp_path / "cdk.out"), "--format", "json"]
    assert cli.main(["cluster", "bootstrap", *argv], session_factory=lambda region: None) == 0
    plan = json.loads(capsys.readouterr().out)
    assert made == ["prod"] and plan["source"] == "a synthesis of prod made now" and plan["written"] is None
    assert [node["nodeName"] for node in plan["cluster_config"]["nodes"]] == [s["name"] for s in template_seeds(synthesized)]
    assert plan["would_change"][0] == f"write ClusterConfig.json to {bootstrap_cluster.REPO / 'cluster-config' / 'prod.json'}"
    assert list((tmp_path / "cdk.out").iterdir()) == []


def test_creates_the_cluster_on_seed_0_from_the_stack_outputs(aws, pki, tmp_path, capsys):
    session, seeds = aws
    sent = sent_commands(session)
    assert run(["--env", "prod", "--output", str(tmp_path / "c.json"), "--poll-interval", "0"], session) == 0
    session.stubber.assert_no_pending_responses()  # the topology came from DescribeStacks
    (command,) = sent
    assert command["DocumentName"] == DOCUMENT
    assert command["InstanceIds"] == [seeds[0]["instance_id"]]
    # Its whole output goes to the nodes' log group, which the seed role may write.
    assert command["CloudWatchOutputConfig"] == {"CloudWatchLogGroupName": "/telemetry-prod/service-fabric/nodes",
                                                 "CloudWatchOutputEnabled": True}
    sent_config = json.loads(base64.b64decode(command["Parameters"]["clusterConfig"][0]))
    assert sent_config == json.loads((tmp_path / "c.json").read_text())
    check_cluster_config(sent_config, seeds, cluster_thumbprint=pki.server.sha1_thumbprint,
                         admin_thumbprint=pki.client.sha1_thumbprint)
    # The node lifecycle functions pin the gateway by this, instead of reading the cluster secret.
    parameter = session.client("ssm").get_parameter(Name="/telemetry-prod/service-fabric/gateway-thumbprint")
    assert parameter["Parameter"]["Value"] == pki.server.sha1_thumbprint
    out = capsys.readouterr().out
    assert "all 5 seeds are Online and their node preparation succeeded" in out  # asked before the create
    assert "create cluster on" in out and "created with 5 seed nodes" in out
    # telemetry deploy's bootstrap step is done for as long as this parameter exists.
    created = session.client("ssm").get_parameter(Name="/telemetry-prod/service-fabric/cluster-created")
    (create,) = [c for c in session.client("ssm").list_commands()["Commands"] if c["DocumentName"] == DOCUMENT]
    assert created["Parameter"]["Value"].endswith(f" command {create['CommandId']} stack {stack_id(STACK)}")


def test_a_failed_create_records_nothing_for_telemetry_deploy(aws, tmp_path, monkeypatch, capsys):
    """The create stopped half way: it had installed Service Fabric on three seeds (they answer
    UNREACHABLE when asked again), so the cleanup is advised for those three."""
    session, _seeds = aws
    half_way = {s["instance_id"] for s in _seeds[:3]}

    def failed(self, command, instance):
        session.session.installed = half_way
        return "Failed", "", "boom"

    monkeypatch.setattr(bootstrap_cluster.Bootstrap, "invocation", failed)
    assert run(["--env", "prod", "--output", str(tmp_path / "c.json"), "--poll-interval", "0"], session) == 1
    ssm = session.client("ssm")
    with pytest.raises(ssm.exceptions.ParameterNotFound):
        ssm.get_parameter(Name="/telemetry-prod/service-fabric/cluster-created")
    captured = capsys.readouterr()
    assert captured.err.strip() == "telemetry: error: cluster creation Failed: boom"
    # The way out of a half-made cluster, as a command to paste: CleanFabric.ps1 on the seeds holding part of it.
    (advice,) = [line for line in captured.out.splitlines() if line.startswith("  aws ssm send-command")]
    words = shlex.split(advice)
    assert words[words.index("--document-name") + 1] == "AWS-RunPowerShellScript"
    assert words[words.index("--instance-ids") + 1:words.index("--parameters")] == [s["instance_id"] for s in _seeds[:3]]
    assert json.loads(words[words.index("--parameters") + 1]) == {"commands": ["& C:\\ServiceFabric\\Package\\CleanFabric.ps1"]}


def test_a_create_that_failed_before_installing_advises_no_cleanup(aws, tmp_path, monkeypatch, capsys):
    """Asked again, no seed has Service Fabric installed: CleanFabric.ps1 has nothing to remove there."""
    session, _seeds = aws
    monkeypatch.setattr(bootstrap_cluster.Bootstrap, "invocation", lambda self, command, instance: ("Failed", "", "boom"))
    assert run(["--env", "prod", "--output", str(tmp_path / "c.json"), "--poll-interval", "0"], session) == 1
    captured = capsys.readouterr()
    assert captured.err.strip() == "telemetry: error: cluster creation Failed: boom"
    assert "CleanFabric" not in captured.out and "send-command" not in captured.out
    assert "no seed asked has Service Fabric installed" in captured.out and "nothing to clean up" in captured.out


def test_a_rerun_while_the_create_still_runs_waits_for_it_and_sends_nothing(aws, tmp_path, monkeypatch, capsys):
    """An interrupted bootstrap left its command running (it may wait its delivery timeout and its
    execution timeout, and its scheduled task outlives it): the rerun follows that command."""
    from tests.conftest import keep_params, model_answer

    session, seeds = aws
    running = "0a1b2c3d-4e5f-4a6b-8c9d-0e1f2a3b4c5d"
    asked = []

    def list_commands(model, context, **_):
        """ListCommands as SSM answers while the create runs; checked against the ssm model."""
        asked.append(context["api_params"])
        response = {"Commands": [
            {"CommandId": "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a", "DocumentName": DOCUMENT, "Status": "InProgress",
             "InstanceIds": ["i-0123456789abcdef0"]},  # another environment's seed, say: not ours
            {"CommandId": running, "DocumentName": DOCUMENT, "Status": "Pending", "InstanceIds": [seeds[0]["instance_id"]]},
        ]}
        return model_answer(model, response)

    session.session.events.register("provide-client-params.ssm.ListCommands", keep_params)
    session.session.events.register("before-call.ssm.ListCommands", list_commands)
    followed = []
    monkeypatch.setattr(bootstrap_cluster.Bootstrap, "invocation",
                        lambda self, command, instance: followed.append(command) or ("Success", "", ""))
    sent = sent_commands(session)
    assert run(["--env", "prod", "--output", str(tmp_path / "c.json"), "--poll-interval", "0"], session) == 0
    assert sent == [] and followed == [running]
    assert asked == [{"Filters": [{"key": "DocumentName", "value": DOCUMENT}, {"key": "ExecutionStage", "value": "Executing"}]}]
    assert f"command {running}: waiting for it instead of sending another" in capsys.readouterr().out


def refused(session, capsys, argv=("--env", "prod")) -> str:
    assert run(list(argv), session) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    (line,) = captured.err.strip().splitlines()
    return line


def test_seeds_whose_agents_are_not_online_get_no_create_and_are_asked_again_later(aws, tmp_path, capsys):
    """Right after the stack completes the seeds are still booting: their SSM agents have not
    registered, or lost their connection. A create then would wait out its delivery timeout on an
    unprepared seed; instead the run stops, names them and says when to run again."""
    session, seeds = aws
    session.session.ping_status.update({seeds[3]["instance_id"]: "ConnectionLost", seeds[4]["instance_id"]: "Inactive"})
    sent = sent_commands(session.session)
    line = refused(session, capsys, ("--env", "prod", "--output", str(tmp_path / "c.json")))
    assert sent == []
    assert line.startswith("telemetry: error: the seeds are not ready for the cluster create: "
                           f"seed-3 ({seeds[3]['instance_id']}) SSM agent ConnectionLost; "
                           f"seed-4 ({seeds[4]['instance_id']}) SSM agent Inactive; no create was sent: run again in ")
    # The seeds launched just now (moto's LaunchTime): the 30 minutes add_node.yaml gives a node's preparation.
    assert "run again in 30 minutes (a seed is prepared within 30 minutes of its launch)" in line


def test_no_seed_online_is_a_refusal_to_run_again_not_a_failure(aws, tmp_path, capsys):
    session, seeds = aws
    session.session.ping_status.update({s["instance_id"]: "Inactive" for s in seeds})
    sent = sent_commands(session.session)
    line = refused(session, capsys, ("--env", "prod", "--output", str(tmp_path / "c.json")))
    assert sent == []
    assert line.startswith("telemetry: error: the seeds are not ready for the cluster create: seed-0 (")
    assert all(f"{s['name']} ({s['instance_id']}) SSM agent Inactive" in line for s in seeds)
    assert "run again in 30 minutes" in line


def test_seeds_still_preparing_get_no_create(aws, tmp_path, capsys):
    """Online but prepare_node.ps1 not done: the create would find no deployment account, package or
    runtime on them. Their answer says how far each has come."""
    session, seeds = aws
    session.session.prepared = {seeds[2]["instance_id"]: "running|download Service Fabric runtime",
                                seeds[4]["instance_id"]: "running|no status file yet"}
    sent = sent_commands(session.session)
    line = refused(session, capsys, ("--env", "prod", "--output", str(tmp_path / "c.json")))
    assert sent == []
    assert line.startswith("telemetry: error: the seeds are not ready for the cluster create: "
                           f"seed-2 ({seeds[2]['instance_id']}) preparation running (download Service Fabric runtime); "
                           f"seed-4 ({seeds[4]['instance_id']}) preparation running (no status file yet); "
                           "no create was sent: run again in 30 minutes")


def test_a_seed_whose_preparation_failed_is_a_failure_naming_it_and_its_log(aws, tmp_path, capsys):
    """Waiting will not mend a failed preparation, so it is exit 1 even while another seed still prepares."""
    session, seeds = aws
    session.session.prepared = {
        seeds[1]["instance_id"]: "failed|download Service Fabric standalone package: standalone package SHA-256 "
                                 "mismatch: expected AB12, actual CD34",
        seeds[3]["instance_id"]: "running|install CloudWatch agent"}
    sent = sent_commands(session.session)
    assert run(["--env", "prod", "--output", str(tmp_path / "c.json")], session) == 1
    assert sent == []
    captured = capsys.readouterr()
    assert "CleanFabric" not in captured.out  # nothing is installed on any seed
    assert captured.err.strip() == (
        f"telemetry: error: node preparation failed on seed-1 ({seeds[1]['instance_id']}) in step download Service "
        "Fabric standalone package: standalone package SHA-256 mismatch: expected AB12, actual CD34; its log is "
        "C:\\ServiceFabric\\Logs\\prepare-node.log on the instance (Session Manager: the CloudWatch agent that would "
        "ship it is installed last); no create was sent")


def test_when_to_run_again_follows_the_last_seed_launched():
    """The wait is until the youngest seed not ready has had preparation's 30 minutes; a seed older
    than that is named as one to look at, and the wait is never under 5 minutes."""
    from telemetry.shared.cluster_inventory import NodeInstance

    now = datetime.datetime(2026, 11, 30, 12, 0, tzinfo=datetime.timezone.utc)

    def seed(name, minutes_ago):
        return NodeInstance(f"i-{name}", "running", "eu-west-1a", "10.0.0.1", "PrimaryNodeType", name,
                            launched=now - datetime.timedelta(minutes=minutes_ago))

    seeds = {"seed-0": seed("seed-0", 12), "seed-1": seed("seed-1", 3), "seed-2": seed("seed-2", 45)}
    message = str(bootstrap_cluster.not_ready(seeds, {"seed-0": "SSM agent Inactive"}, now))
    assert "run again in 18 minutes (a seed is prepared within 30 minutes of its launch)" in message
    message = str(bootstrap_cluster.not_ready(seeds, {"seed-0": "x", "seed-1": "y", "seed-2": "z"}, now))
    assert "run again in 27 minutes" in message and "; seed-2 launched longer ago than that: look at it first" in message
    message = str(bootstrap_cluster.not_ready(seeds, {"seed-2": "preparation running (mount shared storage)"}, now))
    assert "run again in 5 minutes" in message and "seed-2 launched longer ago" in message


def test_a_cluster_that_already_answers_with_every_seed_is_recorded_and_nothing_is_sent(aws, tmp_path, capsys):
    """A rerun after the create succeeded but before it was recorded (or Run Command forgot it):
    the first seed Online lists every seed, so no second create is sent."""
    session, seeds = aws
    session.session.cluster_nodes = [{"Name": s["name"], "NodeStatus": "Up", "IsSeedNode": True} for s in seeds] + [
        {"Name": "scale-0", "NodeStatus": "Up", "IsSeedNode": False}]
    sent = sent_commands(session.session)
    assert run(["--env", "prod", "--output", str(tmp_path / "c.json"), "--poll-interval", "0", "--format", "json"],
               session) == 0
    assert sent == []
    out, err = capsys.readouterr()  # --format json: what it says on the way on stderr, its answer on stdout
    assert "seed-0 lists a cluster of 6 node(s), 6 Up: 5 of 5 seeds" in err and "nothing to create" in err
    assert json.loads(out) == {"environment": "prod", "cluster": "telemetry-prod-sf", "seeds": [s["name"] for s in seeds],
                               "cluster_config": str(tmp_path / "c.json"), "command_id": None, "result": "found running"}
    created = session.client("ssm").get_parameter(Name="/telemetry-prod/service-fabric/cluster-created")
    assert created["Parameter"]["Value"].endswith(f" found running stack {stack_id(STACK)}")


def test_a_cluster_without_every_seed_up_is_neither_recorded_nor_created_again(aws, tmp_path, capsys):
    """The node query lists every seed of the manifest, Down or not (Service Fabric's
    GetNodeListQuerySpecification merges them): a seed not Up is for an operator to look at."""
    session, seeds = aws
    session.session.cluster_nodes = [{"Name": s["name"], "NodeStatus": "Down" if s["name"] == "seed-3" else "Up",
                                      "IsSeedNode": True} for s in seeds]
    sent = sent_commands(session.session)
    assert run(["--env", "prod", "--output", str(tmp_path / "c.json"), "--poll-interval", "0"], session) == 1
    assert sent == []
    captured = capsys.readouterr()
    assert "CleanFabric.ps1" not in captured.out
    assert captured.err.strip() == ("telemetry: error: the cluster runs without every seed Up (4 of 5): see telemetry "
                                    "cluster status; no create was sent and nothing recorded")
    with pytest.raises(Exception, match="ParameterNotFound"):
        session.client("ssm").get_parameter(Name="/telemetry-prod/service-fabric/cluster-created")


def test_service_fabric_installed_where_no_cluster_answers_stops_with_both_ways_out(aws, tmp_path, capsys):
    """A create that stopped half way, or a cluster that is down: FabricHostSvc exists on a seed, no
    cluster answers. A create would fail in TestConfiguration, and CleanFabric.ps1 is only for the
    first case: the run stops, says both, and sends nothing."""
    session, seeds = aws
    session.session.installed = {seeds[1]["instance_id"]}
    sent = sent_commands(session.session)
    assert run(["--env", "prod", "--output", str(tmp_path / "c.json"), "--poll-interval", "0"], session) == 1
    assert sent == []
    captured = capsys.readouterr()
    assert "CleanFabric.ps1" in captured.out and "never while a cluster runs" in captured.out
    assert captured.err.startswith("telemetry: error: Service Fabric is installed on a seed but no cluster answered (")
    assert "seed-1 (Service Fabric installed): No cluster endpoint" in captured.err
    assert "seed-0, seed-2, seed-3, seed-4: No cluster endpoint" in captured.err
    assert captured.err.rstrip().endswith("no create was sent")


def test_refuses_when_a_seed_is_not_running(aws, capsys):
    session, seeds = aws
    session.client("ec2").terminate_instances(InstanceIds=[seeds[4]["instance_id"]])
    line = refused(session, capsys)
    assert line == f"telemetry: error: cannot create {CLUSTER}: seed-4 has no running instance"


def test_refuses_a_seed_that_is_not_at_its_fixed_address(aws, capsys):
    session, seeds = aws
    ec2 = session.client("ec2")
    ec2.terminate_instances(InstanceIds=[seeds[2]["instance_id"]])
    (subnet,) = ec2.describe_subnets(Filters=[{"Name": "cidr-block", "Values": [seeds[2]["cidr"]]}])["Subnets"]
    stray = ec2.run_instances(
        ImageId=MOTO_IMAGE, MinCount=1, MaxCount=1, SubnetId=subnet["SubnetId"],
        TagSpecifications=[{"ResourceType": "instance", "Tags": [
            {"Key": "sf:cluster", "Value": CLUSTER}, {"Key": "sf:nodetype", "Value": "PrimaryNodeType"},
            {"Key": "sf:nodename", "Value": "seed-2"}]}],
    )["Instances"][0]
    line = refused(session, capsys)
    assert line == (f"telemetry: error: cannot create {CLUSTER}: seed-2 ({stray['InstanceId']}) runs at "
                    f"{stray['PrivateIpAddress']}, not {seeds[2]['address']}")


def test_an_environment_not_deployed_is_one_clear_line(aws, capsys):
    session, _ = aws
    line = refused(StubbedStackSession(session.session, STACK, None), capsys)
    assert line == f"telemetry: error: stack {STACK} is not deployed in this account and region; run make deploy"


def test_a_missing_certificate_secret_is_one_clear_line(aws, capsys):
    session, _ = aws
    session.client("secretsmanager").delete_secret(
        SecretId="telemetry-prod/service-fabric/admin-certificate", ForceDeleteWithoutRecovery=True
    )
    assert "secret telemetry-prod/service-fabric/admin-certificate does not exist" in refused(session, capsys)


class ScriptedInvocations:
    def __init__(self, statuses):
        self.statuses = list(statuses)

    def invocation(self, command_id, instance_id):
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        return status, "log tail" if status == "Failed" else "", "TestConfiguration.ps1 reported problems"


def test_waiting_prints_progress_until_the_command_finishes():
    lines, now = [], [0.0]
    status, _, err = bootstrap_cluster.wait_for_command(
        ScriptedInvocations(["Pending", "InProgress", "InProgress", "Failed"]), "c-1", "i-1",
        timeout_s=3600, poll_interval_s=30, say=lines.append, clock=lambda: now[0],
        sleep=lambda s: now.__setitem__(0, now[0] + s),
    )
    assert status == "Failed" and "TestConfiguration" in err
    assert lines == [
        "[    0 s] create cluster on i-1: Pending", "[   30 s] create cluster on i-1: InProgress",
        "[   60 s] create cluster on i-1: InProgress", "[   90 s] create cluster on i-1: Failed",
    ]
    status, _, _ = bootstrap_cluster.wait_for_command(
        ScriptedInvocations(["InProgress"]), "c-1", "i-1", timeout_s=60, poll_interval_s=30,
        say=lines.append, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s),
    )
    assert status == "still InProgress after 60 s"


def test_thumbprint_is_windows_sha1_of_the_certificate(pki):
    assert thumbprint(pki.server.cert_pem) == pki.server.sha1_thumbprint


def test_help_describes_every_option():
    result = subprocess.run([str(Path(sys.executable).parent / "telemetry"), "cluster", "bootstrap", "--help"],
                            capture_output=True, text=True, check=True)
    for option in ("--env", "--output", "--timeout", "--poll-interval", "--dry-run", "--cdk-out"):
        assert option in result.stdout


def test_the_deploy_journeys_bootstrap_step_runs_the_command_to_its_end(aws, monkeypatch, tmp_path, capsys):
    """telemetry deploy's bootstrap step hands `cluster bootstrap` what its command line would, every
    option's default included: a Namespace built by hand once lacked --format, and every first
    deployment stopped here with "internal error" after the cluster was created."""
    from telemetry.deploy.steps import Bootstrap
    from stacks.config import load_environment, read_environments

    session, seeds = aws
    monkeypatch.setattr(bootstrap_cluster, "REPO", tmp_path)  # ClusterConfig.json goes to REPO/cluster-config/
    step = Bootstrap(load_environment(read_environments(), "prod"), session, print)
    step.run()
    assert json.loads((tmp_path / "cluster-config" / "prod.json").read_text())["name"] == CLUSTER
    assert "created with 5 seed nodes" in capsys.readouterr().out
    created = session.client("ssm").get_parameter(Name="/telemetry-prod/service-fabric/cluster-created")
    assert created["Parameter"]["Value"].endswith(f" stack {stack_id(STACK)}")
