#!/usr/bin/env python3
"""Create the Service Fabric cluster of an environment on its seed nodes.

Finds the environment's running seed instances by tag, reads each seed's name and fixed address
from its persistent network interface, builds ClusterConfig.json for an X.509-secured
multi-machine cluster (the structure of Microsoft's ClusterConfig.X509.MultiMachine.json sample),
tags every seed with its node name, and runs the create-cluster Run Command document on seed-0,
printing its status until it finishes.

--dry-run reads EC2 and the certificate secrets, writes the JSON and changes nothing.
Exit codes: 0 cluster created (or dry run written); 1 cluster creation failed or timed out;
2 refused (wrong seed count, a seed without its address, bad config) or AWS errors.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts.cluster_inventory import (  # noqa: E402
    REPO,
    NodeInstance,
    ToolError,
    aws_session,
    node_instances,
    read_certificate_secret,
    run_tool,
    thumbprint,
)
from stacks.config import EnvironmentConfig, ServiceFabricConfig, load_environment, read_environments  # noqa: E402
from stacks.naming import (  # noqa: E402
    NODE_NAME_TAG,
    SCALING_NODE_TYPE,
    SEED_NODE_TYPE,
    create_cluster_document_name,
    seed_node_name,
    service_fabric_cluster_name,
)

DATA_ROOT = "D:\\SF"  # the data volume userdata/prepare_node.ps1 formats
FINISHED = {"Success", "Failed", "Cancelled", "TimedOut", "Cancelling"}


def node_type(name: str, settings: ServiceFabricConfig, *, primary: bool) -> dict:
    return {
        "name": name,
        "clientConnectionEndpointPort": "19000",
        "clusterConnectionEndpointPort": "19001",
        "leaseDriverEndpointPort": "19002",
        "serviceConnectionEndpointPort": "19003",
        "httpGatewayEndpointPort": "19080",
        "reverseProxyEndpointPort": "19081",
        "applicationPorts": {"startPort": str(settings.application_port_start), "endPort": str(settings.application_port_end)},
        "ephemeralPorts": {"startPort": str(settings.ephemeral_port_start), "endPort": str(settings.ephemeral_port_end)},
        "isPrimary": primary,
    }


def build_cluster_config(
    config: EnvironmentConfig, seeds: Sequence[NodeInstance], *, cluster_thumbprint: str, admin_thumbprint: str
) -> dict:
    """ClusterConfig.json for the seeds; scaling nodes join later with AddNode.ps1."""
    settings = config.service_fabric
    nodes = [
        {
            "nodeName": seed.seed_name,
            "iPAddress": seed.seed_ip,
            "nodeTypeRef": SEED_NODE_TYPE,
            "faultDomain": f"fd:/{config.region}/{seed.availability_zone}",
            "upgradeDomain": f"UD{seed.seed_name.rsplit('-', 1)[-1]}",
        }
        for seed in sorted(seeds, key=lambda s: int(s.seed_name.rsplit("-", 1)[-1]))
    ]
    certificate = {"Thumbprint": cluster_thumbprint, "X509StoreName": "My"}
    return {
        "name": service_fabric_cluster_name(config),
        "clusterConfigurationVersion": "1.0.0",
        "apiVersion": "10-2017",
        "nodes": nodes,
        "properties": {
            "diagnosticsStore": {
                "metadata": "Each node keeps its own traces on its data volume.",
                "dataDeletionAgeInDays": "7",
                "storeType": "FileShare",
                "IsEncrypted": "false",
                "connectionstring": f"{DATA_ROOT}\\DiagnosticsStore",
            },
            "security": {
                "metadata": "X509: nodes and the HTTP gateway use the cluster certificate; the admin client certificate may manage the cluster.",
                "ClusterCredentialType": "X509",
                "ServerCredentialType": "X509",
                "CertificateInformation": {
                    "ClusterCertificate": dict(certificate),
                    "ServerCertificate": dict(certificate),
                    "ClientCertificateThumbprints": [{"CertificateThumbprint": admin_thumbprint, "IsAdmin": True}],
                },
            },
            "nodeTypes": [
                node_type(SEED_NODE_TYPE, settings, primary=True),
                node_type(SCALING_NODE_TYPE, settings, primary=False),
            ],
            "fabricSettings": [
                {
                    "name": "Setup",
                    "parameters": [
                        {"name": "FabricDataRoot", "value": DATA_ROOT},
                        {"name": "FabricLogRoot", "value": f"{DATA_ROOT}\\Log"},
                    ],
                }
            ],
        },
    }


def running_seeds(config: EnvironmentConfig, instances: Sequence[NodeInstance]) -> list[NodeInstance]:
    """The seeds to build the cluster from, refusing anything that would make a wrong cluster."""
    expected = config.service_fabric.seed_node_count
    seeds = [i for i in instances if i.node_type == SEED_NODE_TYPE and i.state == "running"]
    for seed in seeds:
        if not seed.seed_ip:
            raise ToolError(
                f"seed instance {seed.instance_id} has no private IP on its seed network interface yet "
                f"(not attached?); see C:\\ServiceFabric\\Logs\\prepare-node.log on it"
            )
    names = sorted(s.seed_name for s in seeds)
    wanted = [seed_node_name(i) for i in range(expected)]
    if len(seeds) != expected or names != wanted:
        missing = sorted(set(wanted) - set(names))
        raise ToolError(
            f"found {len(seeds)} running seed instance(s) of {service_fabric_cluster_name(config)}, config says "
            f"{expected}" + (f" (missing: {', '.join(missing)})" if missing else f" (names: {', '.join(names)})")
        )
    return seeds


class Bootstrap:
    """The AWS calls the bootstrap makes (EC2, Secrets Manager, SSM)."""

    def __init__(self, session) -> None:
        self.ec2 = session.client("ec2")
        self.secrets = session.client("secretsmanager")
        self.ssm = session.client("ssm")

    def tag_node_names(self, seeds: Sequence[NodeInstance]) -> None:
        for seed in seeds:
            self.ec2.create_tags(Resources=[seed.instance_id], Tags=[{"Key": NODE_NAME_TAG, "Value": seed.seed_name}])

    def send_create(self, document: str, instance_id: str, cluster_config: dict, timeout_s: int) -> str:
        encoded = base64.b64encode(json.dumps(cluster_config).encode()).decode()
        response = self.ssm.send_command(
            DocumentName=document,
            InstanceIds=[instance_id],
            Parameters={"clusterConfig": [encoded], "timeoutSeconds": [str(timeout_s)]},
            TimeoutSeconds=600,
            Comment=f"create Service Fabric cluster {cluster_config['name']}"[:100],
        )
        return response["Command"]["CommandId"]

    def invocation(self, command_id: str, instance_id: str) -> tuple[str, str, str]:
        try:
            result = self.ssm.get_command_invocation(CommandId=command_id, InstanceId=instance_id)
        except self.ssm.exceptions.InvocationDoesNotExist:
            return "Pending", "", ""  # SSM takes a moment to register a new invocation
        return result["Status"], result.get("StandardOutputContent") or "", result.get("StandardErrorContent") or ""


def wait_for_command(
    aws: Bootstrap,
    command_id: str,
    instance_id: str,
    *,
    timeout_s: float,
    poll_interval_s: float,
    say: Callable[[str], None] = print,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[str, str, str]:
    started = clock()
    while True:
        status, out, err = aws.invocation(command_id, instance_id)
        elapsed = clock() - started
        say(f"[{elapsed:5.0f} s] create cluster on {instance_id}: {status}")
        if status in FINISHED:
            return status, out, err
        if elapsed >= timeout_s:
            return f"still {status} after {timeout_s:.0f} s", out, err
        sleep(poll_interval_s)


def bootstrap(args: argparse.Namespace, session_factory: Callable[[str], object]) -> int:
    config = load_environment(read_environments(), args.env)
    aws = Bootstrap(session_factory(config.region))
    seeds = running_seeds(config, node_instances(aws.ec2, service_fabric_cluster_name(config)))
    settings = config.service_fabric
    cluster_config = build_cluster_config(
        config,
        seeds,
        cluster_thumbprint=thumbprint(read_certificate_secret(aws.secrets, settings.cluster_certificate_secret)["certificate"]),
        admin_thumbprint=thumbprint(read_certificate_secret(aws.secrets, settings.admin_certificate_secret)["certificate"]),
    )
    output = args.output or REPO / "cluster-config" / f"{config.name}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(cluster_config, indent=2) + "\n")
    for node in cluster_config["nodes"]:
        print(f"{node['nodeName']}: {node['iPAddress']} {node['faultDomain']} {node['upgradeDomain']}")
    print(f"wrote {output}")
    if args.dry_run:
        print("dry run: no tags written, no command sent")
        return 0

    first = next(s for s in seeds if s.seed_name == seed_node_name(0))
    aws.tag_node_names(seeds)
    document = create_cluster_document_name(config)
    command_id = aws.send_create(document, first.instance_id, cluster_config, int(args.timeout))
    print(f"sent {document} to {first.instance_id} ({first.seed_name}), command {command_id}")
    status, out, err = wait_for_command(
        aws, command_id, first.instance_id, timeout_s=args.timeout, poll_interval_s=args.poll_interval
    )
    if out.strip():
        print(out.rstrip())
    if status != "Success":
        detail = err.strip().splitlines()[-1] if err.strip() else "see C:\\ServiceFabric\\Logs\\create-cluster.log"
        print(f"error: cluster creation {status}: {detail}", file=sys.stderr)
        return 1
    print(f"cluster {cluster_config['name']} created with {len(seeds)} seed nodes")
    return 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Create an environment's Service Fabric cluster on its seed nodes.",
        epilog="Exit codes: 0 created (or dry run written); 1 creation failed or timed out; 2 refused or AWS errors.",
    )
    parser.add_argument("--env", required=True, help="environment name in cdk.json")
    parser.add_argument("--output", type=Path, help="where to write ClusterConfig.json (default cluster-config/<env>.json)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for cluster creation (default 3600)")
    parser.add_argument("--poll-interval", type=float, default=15.0, help="seconds between status lines (default 15)")
    parser.add_argument("--dry-run", action="store_true", help="write ClusterConfig.json only; tag nothing, send nothing")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None, session_factory: Callable[[str], object] | None = None) -> int:
    args = parse_args(argv)

    return run_tool(lambda: bootstrap(args, session_factory or aws_session))


if __name__ == "__main__":
    sys.exit(main())
