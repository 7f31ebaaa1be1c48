"""scripts/bootstrap_cluster.py against moto's EC2, Secrets Manager and SSM, with the seed topology
of the synthesized prod template (its seed interfaces, addresses and subnets)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys

import pytest

from scripts import bootstrap_cluster
from scripts.cluster_inventory import thumbprint
from stacks.constructs.node_scripts import render_create_cluster_document
from tests.conftest import REPO
from tests.sf_emulator.certs import make_pki

REGION = "eu-west-1"
CLUSTER = "telemetry-prod-sf"
DOCUMENT = "telemetry-prod-create-sf-cluster"


def template_seeds(synthesized) -> list[dict]:
    """(name, address, subnet CIDR, zone) of every seed interface in the synthesized prod stacks."""
    network = synthesized("prod").stacks["network"]["Resources"]
    service_fabric = synthesized("prod").stacks["service_fabric"]["Resources"]
    seeds = []
    for resource in service_fabric.values():
        if resource["Type"] != "AWS::EC2::NetworkInterface":
            continue
        props = resource["Properties"]
        (subnet,) = [r["Properties"] for k, r in network.items() if k in props["SubnetId"]["Fn::ImportValue"]]
        seeds.append({
            "name": next(t["Value"] for t in props["Tags"] if t["Key"] == "sf:nodename"),
            "address": props["PrivateIpAddress"],
            "cidr": subnet["CidrBlock"],
            "zone": subnet["AvailabilityZone"],
        })
    return sorted(seeds, key=lambda s: s["name"])


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
    image = ec2.describe_images()["Images"][0]["ImageId"]
    subnets = {}
    for seed in seeds:
        if seed["cidr"] not in subnets:
            subnets[seed["cidr"]] = ec2.create_subnet(
                VpcId=vpc, CidrBlock=seed["cidr"], AvailabilityZone=seed["zone"]
            )["Subnet"]["SubnetId"]
        cluster_tag = {"Key": "sf:cluster", "Value": CLUSTER}
        interface = ec2.create_network_interface(
            SubnetId=subnets[seed["cidr"]], PrivateIpAddress=seed["address"],
            TagSpecifications=[{"ResourceType": "network-interface",
                                "Tags": [cluster_tag, {"Key": "sf:nodename", "Value": seed["name"]}]}],
        )["NetworkInterface"]["NetworkInterfaceId"]
        instance = ec2.run_instances(
            ImageId=image, MinCount=1, MaxCount=1, InstanceType="m6i.2xlarge", SubnetId=subnets[seed["cidr"]],
            TagSpecifications=[{"ResourceType": "instance",
                                "Tags": [cluster_tag, {"Key": "sf:nodetype", "Value": "PrimaryNodeType"}]}],
        )["Instances"][0]["InstanceId"]
        ec2.attach_network_interface(NetworkInterfaceId=interface, InstanceId=instance, DeviceIndex=1)
        seed["instance_id"] = instance
    # A scaling node of the same cluster and a seed of another cluster: neither takes part.
    ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, SubnetId=next(iter(subnets.values())),
                      TagSpecifications=[{"ResourceType": "instance", "Tags": [
                          {"Key": "sf:cluster", "Value": CLUSTER}, {"Key": "sf:nodetype", "Value": "ScalingNodeType"}]}])
    ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, SubnetId=next(iter(subnets.values())),
                      TagSpecifications=[{"ResourceType": "instance", "Tags": [
                          {"Key": "sf:cluster", "Value": "telemetry-dev-sf"}, {"Key": "sf:nodetype", "Value": "PrimaryNodeType"}]}])
    sm = session.client("secretsmanager")
    sm.create_secret(Name="telemetry-prod/service-fabric/cluster-certificate",
                     SecretString=secret(pki.server, node_admin_password="Sample-Passw0rd"))
    sm.create_secret(Name="telemetry-prod/service-fabric/admin-certificate", SecretString=secret(pki.client))
    content = render_create_cluster_document({
        "statusFile": "C:\\ServiceFabric\\prepare-node.status.json",
        "certificateSecret": "telemetry-prod/service-fabric/cluster-certificate",
        "deploymentAccount": "sfdeploy", "region": REGION,
    })
    session.client("ssm").create_document(Name=DOCUMENT, Content=json.dumps(content),
                                          DocumentType="Command", DocumentFormat="JSON")
    yield session, seeds


def run(argv, session) -> int:
    return bootstrap_cluster.main(argv, session_factory=lambda region: session)


def sent_commands(session) -> list[dict]:
    sent: list[dict] = []
    session.events.register("provide-client-params.ssm.SendCommand", lambda params, **_: sent.append(dict(params)))
    return sent


def node_name_tags(session, seeds) -> dict:
    ids = [s["instance_id"] for s in seeds]
    reservations = session.client("ec2").describe_instances(InstanceIds=ids)["Reservations"]
    return {i["InstanceId"]: {t["Key"]: t["Value"] for t in i.get("Tags", [])}.get("sf:nodename")
            for r in reservations for i in r["Instances"]}


# The keys of Microsoft's ClusterConfig.X509.MultiMachine.json sample (apiVersion 10-2017).
SAMPLE_TOP = {"name", "clusterConfigurationVersion", "apiVersion", "nodes", "properties"}
SAMPLE_NODE = {"nodeName", "iPAddress", "nodeTypeRef", "faultDomain", "upgradeDomain"}
SAMPLE_PROPERTIES = {"diagnosticsStore", "security", "nodeTypes", "fabricSettings"}
SAMPLE_NODE_TYPE = {
    "name", "clientConnectionEndpointPort", "clusterConnectionEndpointPort", "leaseDriverEndpointPort",
    "serviceConnectionEndpointPort", "httpGatewayEndpointPort", "reverseProxyEndpointPort", "applicationPorts",
    "ephemeralPorts", "isPrimary",
}


def test_dry_run_writes_the_cluster_config_of_the_synthesized_topology(aws, pki, tmp_path, capsys):
    session, seeds = aws
    sent = sent_commands(session)
    output = tmp_path / "ClusterConfig.json"
    assert run(["--env", "prod", "--dry-run", "--output", str(output)], session) == 0
    config = json.loads(output.read_text())

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
    assert certificates["ClusterCertificate"] == {"Thumbprint": pki.server.sha1_thumbprint, "X509StoreName": "My"}
    assert certificates["ServerCertificate"] == certificates["ClusterCertificate"]
    assert certificates["ClientCertificateThumbprints"] == [
        {"CertificateThumbprint": pki.client.sha1_thumbprint, "IsAdmin": True}
    ]
    (setup,) = config["properties"]["fabricSettings"]
    assert {p["name"]: p["value"] for p in setup["parameters"]} == {"FabricDataRoot": "D:\\SF", "FabricLogRoot": "D:\\SF\\Log"}

    # Nothing changed: no tags, no command.
    assert sent == []
    assert set(node_name_tags(session, seeds).values()) == {None}
    assert "dry run" in capsys.readouterr().out


def test_creates_the_cluster_on_seed_0_and_tags_every_seed(aws, tmp_path, capsys):
    session, seeds = aws
    sent = sent_commands(session)
    assert run(["--env", "prod", "--output", str(tmp_path / "c.json"), "--poll-interval", "0"], session) == 0
    (command,) = sent
    assert command["DocumentName"] == DOCUMENT
    assert command["InstanceIds"] == [seeds[0]["instance_id"]]
    sent_config = json.loads(base64.b64decode(command["Parameters"]["clusterConfig"][0]))
    assert sent_config == json.loads((tmp_path / "c.json").read_text())
    assert node_name_tags(session, seeds) == {s["instance_id"]: s["name"] for s in seeds}
    out = capsys.readouterr().out
    assert "create cluster on" in out and "created with 5 seed nodes" in out


def refused(session, capsys, argv=("--env", "prod", "--dry-run")) -> str:
    assert run(list(argv), session) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    (line,) = captured.err.strip().splitlines()
    return line


def test_refuses_when_the_seed_count_does_not_match_config(aws, capsys):
    session, seeds = aws
    session.client("ec2").terminate_instances(InstanceIds=[seeds[4]["instance_id"]])
    line = refused(session, capsys)
    assert line == f"error: found 4 running seed instance(s) of {CLUSTER}, config says 5 (missing: seed-4)"


def test_refuses_a_seed_without_its_address(aws, capsys):
    session, seeds = aws
    ec2 = session.client("ec2")
    interface = ec2.describe_network_interfaces(
        Filters=[{"Name": "attachment.instance-id", "Values": [seeds[2]["instance_id"]]},
                 {"Name": "tag:sf:nodename", "Values": ["seed-2"]}])["NetworkInterfaces"][0]
    ec2.detach_network_interface(AttachmentId=interface["Attachment"]["AttachmentId"])
    line = refused(session, capsys)
    assert f"seed instance {seeds[2]['instance_id']} has no private IP on its seed network interface" in line


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
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "bootstrap_cluster.py"), "--help"],
                            capture_output=True, text=True, check=True)
    for option in ("--env", "--output", "--timeout", "--poll-interval", "--dry-run"):
        assert option in result.stdout
