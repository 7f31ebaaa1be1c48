"""`telemetry cluster status` (telemetry/commands/cluster/status.py): nodes from the HTTPS Service Fabric gateway emulator, instances from
moto's EC2, certificates from moto's Secrets Manager."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from telemetry import cli
from tests.conftest import MOTO_IMAGE
from tests.telemetry.stack_outputs import StubbedStackSession, dev_gateway

REGION = "eu-west-1"
CLUSTER = "telemetry-dev-sf"
STACK = "Telemetry-dev-ServiceFabric"


@pytest.fixture
def aws(moto_session, sf_pki, sf_emulator):
    """EC2 as the emulated cluster has it: seeds at their fixed primary addresses, scale-0 running,
    scale-1's instance terminated, and one running scaling instance that never joined; the stack
    outputs name the emulator's gateway and the certificate secrets."""
    session = moto_session
    ec2 = session.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    image = MOTO_IMAGE
    seeds_subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24", AvailabilityZone="eu-west-1a")["Subnet"]["SubnetId"]
    nodes_subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.2.0/24", AvailabilityZone="eu-west-1b")["Subnet"]["SubnetId"]

    def instance(subnet, node_type, name=None, ip=None) -> str:
        tags = [{"Key": "sf:cluster", "Value": CLUSTER}, {"Key": "sf:nodetype", "Value": node_type}]
        if name:
            tags.append({"Key": "sf:nodename", "Value": name})
        extra = {"PrivateIpAddress": ip} if ip else {}
        return ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, SubnetId=subnet,
                                 TagSpecifications=[{"ResourceType": "instance", "Tags": tags}], **extra)["Instances"][0]["InstanceId"]

    ids = {}
    for index in range(3):
        ids[f"seed-{index}"] = instance(seeds_subnet, "PrimaryNodeType", f"seed-{index}", f"10.0.1.{10 + index}")
    ids["scale-0"] = instance(nodes_subnet, "ScalingNodeType", "scale-0", "10.0.2.10")
    ids["scale-1"] = instance(nodes_subnet, "ScalingNodeType", "scale-1", "10.0.2.11")
    ids["never-joined"] = instance(nodes_subnet, "ScalingNodeType", ip="10.0.2.20")
    yield session, ids, dev_gateway(session, sf_pki, sf_emulator.endpoint)


def run(argv, aws) -> int:
    session, _, outputs = aws
    stubbed = StubbedStackSession(session, STACK, outputs)
    return cli.main(["cluster", "status", *argv], session_factory=lambda region: stubbed)


def rows_by_node(output: str) -> dict[str, list[str]]:
    lines = output.strip().splitlines()
    assert lines[0].split()[:2] == ["NODE", "SF"]
    return {line.split()[0] + (line.split()[4] if line.startswith("-") else ""): line for line in lines[1:-1]}


def test_flags_zombies_and_instances_that_never_joined(aws, sf_cluster, sf_emulator, capsys):
    session, ids, _ = aws
    session.client("ec2").terminate_instances(InstanceIds=[ids["scale-1"]])
    sf_cluster.stop_host("scale-1")
    # Defaults: the gateway from the stack outputs, the admin certificate from its secret, the
    # gateway pinned to the cluster certificate.
    assert run(["--env", "dev"], aws) == 1
    out = capsys.readouterr().out
    rows = rows_by_node(out)
    assert set(rows) == {"seed-0", "seed-1", "seed-2", "scale-0", "scale-1", f"-{ids['never-joined']}"}
    seed = rows["seed-1"].split()
    assert seed[:8] == ["seed-1", "Up", "yes", "PrimaryNodeType", ids["seed-1"], "running", "eu-west-1a", "10.0.1.11"]
    assert rows["scale-0"].split()[:6] == ["scale-0", "Up", "no", "ScalingNodeType", ids["scale-0"], "running"]
    zombie = rows["scale-1"].split()
    assert zombie[:2] == ["scale-1", "Down"] and zombie[5] == "terminated" and zombie[-1] == "ZOMBIE"
    unjoined = rows[f"-{ids['never-joined']}"]
    assert unjoined.endswith("10.0.2.20  NOT JOINED")
    assert out.strip().splitlines()[-1] == "6 row(s): 1 zombie node(s), 1 instance(s) not joined"


def test_a_healthy_cluster_exits_0(aws, sf_emulator, sf_pki, capsys):
    session, ids, _ = aws
    session.client("ec2").terminate_instances(InstanceIds=[ids["never-joined"]])
    argv = ["--env", "dev", "--endpoint", sf_emulator.endpoint, "--client-cert", sf_pki.client.cert_path,
            "--client-key", sf_pki.client.key_path, "--ca-bundle", sf_pki.ca_path, "--format", "json"]
    assert run(argv, aws) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["node"] for r in rows] == ["seed-0", "seed-1", "seed-2", "scale-0", "scale-1"]
    assert not any(r["flag"] for r in rows)
    # A node down whose instance still runs is not a zombie (a restart, not a leftover).
    assert {r["node"]: r["instance_id"] for r in rows}["scale-1"] == ids["scale-1"]


def test_a_down_node_with_a_running_instance_is_not_a_zombie(aws, sf_cluster, sf_emulator, capsys):
    session, _, _ = aws
    sf_cluster.stop_host("scale-0")
    assert run(["--env", "dev", "--endpoint", sf_emulator.endpoint], aws) == 1  # only the unjoined instance
    assert "ZOMBIE" not in capsys.readouterr().out


def test_half_a_client_certificate_is_refused(aws, sf_emulator, sf_pki, capsys):
    session, _, _ = aws
    assert run(["--env", "dev", "--endpoint", sf_emulator.endpoint, "--client-cert", sf_pki.client.cert_path], aws) == 2
    err = capsys.readouterr().err
    assert err.strip() == "telemetry: error: pass both --client-cert and --client-key, or neither (to use the admin certificate secret)"


def test_a_gateway_that_refuses_the_client_is_one_line(aws, sf_emulator, sf_pki, capsys):
    session, _, _ = aws
    # The server certificate is no client certificate the gateway accepts.
    argv = ["--env", "dev", "--endpoint", sf_emulator.endpoint, "--client-cert", sf_pki.server.cert_path,
            "--client-key", sf_pki.server.key_path, "--ca-bundle", sf_pki.ca_path]
    assert run(argv, aws) == 1
    err = capsys.readouterr().err
    assert err.startswith("telemetry: error: Service Fabric call failed") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_help_describes_every_option():
    result = subprocess.run([str(Path(sys.executable).parent / "telemetry"), "cluster", "status", "--help"],
                            capture_output=True, text=True, check=True)
    for option in ("--env", "--endpoint", "--client-cert", "--client-key", "--ca-bundle", "--server-thumbprint",
                   "--insecure", "--format {text,json}"):
        assert option in result.stdout
