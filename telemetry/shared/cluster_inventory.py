"""What the Service Fabric operator tools share: the cluster as its stack outputs describe it, the
node instances as EC2 sees them, the certificate secrets, and how a tool reports a failure (one
line, no traceback).

The stack outputs (ClusterOutputs) come from CloudFormation for a deployed environment, or from
the synthesized template in cdk.out for a dry run without credentials; only the endpoints are
unknown until deployment.

Node identity: every node instance carries `sf:cluster` and `sf:nodetype` tags and, once it is a
member, `sf:nodename` (a seed has its name from the stack). A node's address in the cluster is the
instance's primary private address; a seed's is fixed by the stack (the `Seeds` output).
"""

from __future__ import annotations

import argparse
import datetime
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from stacks.naming import CLUSTER_TAG, NODE_NAME_TAG, NODE_TYPE_TAG
from stacks.seed_addresses import SeedPlacement, seeds_from_output
from telemetry import REPO
from telemetry.shared.errors import ToolError

# The stacks' names after the environment's prefix, as stacks/platform.py names them.
SERVICE_FABRIC_STACK_PART = "ServiceFabric"
DEVICE_GATEWAY_STACK_PART = "DeviceGateway"

CERTIFICATE_KEYS = ("certificate", "private_key", "pfx", "pfx_password")


# Run Command invocation statuses that may still change (SSM API Reference, CommandInvocation
# Status); any other is where the command ended.
RUN_COMMAND_UNFINISHED = frozenset({"Pending", "InProgress", "Delayed", "Cancelling"})


@dataclass(frozen=True)
class NodeInstance:
    instance_id: str
    state: str
    availability_zone: str
    primary_ip: str
    node_type: str
    node_name: str  # the sf:nodename tag: a seed's from the stack, a scaling node's once it joined
    tags: dict[str, str] = field(default_factory=dict, compare=False)
    launched: datetime.datetime | None = field(default=None, compare=False)  # LaunchTime: a start after a stop moves it

    @property
    def node_address(self) -> str:
        """The address the cluster knows the node by."""
        return self.primary_ip


@dataclass(frozen=True)
class ClusterOutputs:
    """The Service Fabric stack's outputs (stacks/service_fabric_stack.py)."""

    stack_name: str
    source: str  # where they were read, for messages
    values: dict[str, str]
    stack_id: str = ""  # the deployed stack's id: a stack deleted and deployed again has a new one
    created: datetime.datetime | None = None  # when the deployed stack was created

    def get(self, key: str) -> str:
        value = self.values.get(key)
        if not value:
            raise ToolError(f"{self.source} has no output {key}" + (
                " (known only once deployed)" if key in self.unresolved else "; redeploy the stack"
            ))
        return value

    @property
    def unresolved(self) -> set[str]:
        return {k for k, v in self.values.items() if v == ""}

    @property
    def seeds(self) -> list[SeedPlacement]:
        try:
            return seeds_from_output(self.get("Seeds"))
        except (TypeError, ValueError) as error:
            raise ToolError(f"{self.source}: output Seeds is not the seed list this tool knows: {error}") from None


def deployed_outputs(cloudformation, stack_name: str) -> ClusterOutputs:
    try:
        (stack,) = cloudformation.describe_stacks(StackName=stack_name)["Stacks"]
    except cloudformation.exceptions.ClientError as error:
        if "does not exist" in str(error):
            raise ToolError(f"stack {stack_name} is not deployed in this account and region; run make deploy") from None
        raise
    values = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    return ClusterOutputs(stack_name, f"stack {stack_name}", values, stack.get("StackId", ""), stack.get("CreationTime"))


def synthesized_outputs(cdk_out: Path | None, config) -> ClusterOutputs:
    """Outputs of the synthesized Service Fabric template, as deploy.synthesized_stacks finds it
    (cdk.out/<env>/ kept up to date, or --cdk-out); those that are references (endpoints) map to ''."""
    from telemetry.shared.cloud_assembly import read_cloud_assembly, synthesized_stacks

    stack_name = service_fabric_stack_name(config)
    folder = cdk_out if cdk_out is not None else REPO / "cdk.out" / config.name
    path = folder / f"{stack_name}.template.json"
    kept = cdk_out is None or any(s.name == stack_name for s in read_cloud_assembly(cdk_out, config.stack_prefix))
    stack = next((s for s in synthesized_stacks(cdk_out, config) if s.name == stack_name), None)
    if stack is None:
        raise ToolError(f"the synthesized app has no stack {stack_name}")
    values = {k: o["Value"] if isinstance(o["Value"], str) else "" for k, o in stack.template.get("Outputs", {}).items()}
    source = str(path.relative_to(REPO) if path.is_relative_to(REPO) else path) if kept else (
        f"a synthesis of {config.name} made now")
    return ClusterOutputs(stack_name, source, values)


def service_fabric_stack_name(config) -> str:
    return f"{config.stack_prefix}-{SERVICE_FABRIC_STACK_PART}"


def device_gateway_stack_name(config) -> str:
    return f"{config.stack_prefix}-{DEVICE_GATEWAY_STACK_PART}"


def node_instances(ec2, cluster_name: str) -> list[NodeInstance]:
    """Every instance of the cluster EC2 still lists (terminated ones for a while), by id."""
    found = []
    for page in ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": f"tag:{CLUSTER_TAG}", "Values": [cluster_name]}]
    ):
        for reservation in page["Reservations"]:
            for item in reservation["Instances"]:
                tags = {t["Key"]: t["Value"] for t in item.get("Tags", [])}
                found.append(
                    NodeInstance(
                        instance_id=item["InstanceId"],
                        state=item["State"]["Name"],
                        availability_zone=item.get("Placement", {}).get("AvailabilityZone", ""),
                        primary_ip=item.get("PrivateIpAddress", ""),
                        node_type=tags.get(NODE_TYPE_TAG, ""),
                        node_name=tags.get(NODE_NAME_TAG, ""),
                        tags=tags,
                        launched=item.get("LaunchTime"),
                    )
                )
    return sorted(found, key=lambda i: i.instance_id)


def read_certificate_secret(secrets, name: str) -> dict:
    try:
        text = secrets.get_secret_value(SecretId=name)["SecretString"]
        value = json.loads(text)
    except secrets.exceptions.ResourceNotFoundException:
        raise ToolError(f"secret {name} does not exist; create it as docs/deploy.md describes") from None
    except (KeyError, ValueError):
        raise ToolError(f"secret {name} is not a JSON object with {', '.join(CERTIFICATE_KEYS)}") from None
    missing = [key for key in CERTIFICATE_KEYS if not value.get(key)]
    if missing:
        raise ToolError(f"secret {name} lacks {', '.join(missing)}")
    return value


def thumbprint(certificate_pem: str) -> str:
    """SHA-1 of the first certificate's DER bytes, upper-case hex: how Windows names certificates."""
    from sf_rest import certificate_thumbprint

    try:
        return certificate_thumbprint(certificate_pem)
    except ValueError as error:
        raise ToolError(str(error)) from None


def add_gateway_arguments(parser: argparse.ArgumentParser) -> None:
    """How a tool reaches the HTTP gateway; every default comes from the stack outputs of --env."""
    parser.add_argument("--endpoint", help="HTTP gateway, https://HOST:19080 (default: the stack's HttpGatewayEndpoint output)")
    parser.add_argument("--client-cert", metavar="PEM", help="admin client certificate (default: from the admin certificate secret)")
    parser.add_argument("--client-key", metavar="PEM", help="its private key")
    verify = parser.add_mutually_exclusive_group()
    verify.add_argument("--ca-bundle", metavar="PEM", help="verify the gateway against this CA bundle")
    verify.add_argument(
        "--server-thumbprint", metavar="HEX", help="pin this gateway certificate thumbprint (default: the cluster certificate's)"
    )
    verify.add_argument("--insecure", action="store_true", help="do not verify the gateway (testing only)")


def check_gateway_arguments(args: argparse.Namespace) -> None:
    """The flag combinations a tool refuses before it calls anything."""
    if bool(args.client_cert) != bool(args.client_key):
        raise ToolError("pass both --client-cert and --client-key, or neither (to use the admin certificate secret)")


def gateway_client(args: argparse.Namespace, outputs: ClusterOutputs, secrets_client_factory: Callable[[], object]):
    """The REST client, its certificate files, and a cleanup for the files it wrote."""
    from sf_rest import ServiceFabricClient, remove_client_certificate, write_client_certificate

    secrets = None
    if args.client_cert and args.client_key:
        certificate, cleanup = (args.client_cert, args.client_key), (lambda: None)
    elif args.client_cert or args.client_key:
        raise ToolError("pass both --client-cert and --client-key, or neither (to use the admin certificate secret)")
    else:
        secrets = secrets_client_factory()
        admin = read_certificate_secret(secrets, outputs.get("AdminCertificateSecret"))
        written = write_client_certificate(admin["certificate"], admin["private_key"])
        certificate, cleanup = written, (lambda: remove_client_certificate(written))
    verification: dict = {}
    if args.ca_bundle:
        verification["ca_bundle"] = args.ca_bundle
    elif args.insecure:
        verification["insecure"] = True
    else:
        secrets = secrets or secrets_client_factory()
        cluster = read_certificate_secret(secrets, outputs.get("ClusterCertificateSecret"))
        verification["server_thumbprint"] = args.server_thumbprint or thumbprint(cluster["certificate"])
    try:
        client = ServiceFabricClient(
            args.endpoint or outputs.get("HttpGatewayEndpoint"), client_certificate=certificate, **verification
        )
    except ValueError as error:
        cleanup()
        raise ToolError(str(error)) from None
    return client, cleanup


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(c)) for c in column) for column in zip(headers, *rows)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in (headers, *rows)]
    return "\n".join(lines)
