"""What the Service Fabric operator tools share: the cluster's node instances as EC2 sees them, the
certificate secrets, and how a tool reports a failure (one line, no traceback).

Node identity: every node instance carries `sf:cluster` and `sf:nodetype` tags (from its Auto
Scaling group) and, once it is a member, `sf:nodename`. A seed node's address in the cluster is
the fixed address of its persistent network interface (tagged with the seed's name), not the
instance's own primary address.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
for path in (REPO, REPO / "lambdas"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from stacks.naming import CLUSTER_TAG, NODE_NAME_TAG, NODE_TYPE_TAG  # noqa: E402

CERTIFICATE_KEYS = ("certificate", "private_key", "pfx", "pfx_password")


class ToolError(Exception):
    """A problem worded for the operator: one line, no traceback."""


@dataclass(frozen=True)
class NodeInstance:
    instance_id: str
    state: str
    availability_zone: str
    primary_ip: str
    node_type: str
    node_name: str  # the sf:nodename tag, '' before the node joined
    seed_name: str = ""  # name on the attached seed interface, '' for scaling nodes
    seed_ip: str = ""
    tags: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def node_address(self) -> str:
        """The address the cluster knows the node by."""
        return self.seed_ip or self.primary_ip


def node_instances(ec2, cluster_name: str) -> list[NodeInstance]:
    """Every instance of the cluster EC2 still lists (terminated ones for a while), by id."""
    interfaces: dict[str, tuple[str, str]] = {}
    for page in ec2.get_paginator("describe_network_interfaces").paginate(
        Filters=[{"Name": f"tag:{CLUSTER_TAG}", "Values": [cluster_name]}]
    ):
        for interface in page["NetworkInterfaces"]:
            tags = {t["Key"]: t["Value"] for t in interface.get("TagSet", [])}
            attached_to = (interface.get("Attachment") or {}).get("InstanceId")
            if attached_to and tags.get(NODE_NAME_TAG):
                interfaces[attached_to] = (tags[NODE_NAME_TAG], interface.get("PrivateIpAddress", ""))
    found = []
    for page in ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": f"tag:{CLUSTER_TAG}", "Values": [cluster_name]}]
    ):
        for reservation in page["Reservations"]:
            for item in reservation["Instances"]:
                tags = {t["Key"]: t["Value"] for t in item.get("Tags", [])}
                seed_name, seed_ip = interfaces.get(item["InstanceId"], ("", ""))
                found.append(
                    NodeInstance(
                        instance_id=item["InstanceId"],
                        state=item["State"]["Name"],
                        availability_zone=item.get("Placement", {}).get("AvailabilityZone", ""),
                        primary_ip=item.get("PrivateIpAddress", ""),
                        node_type=tags.get(NODE_TYPE_TAG, ""),
                        node_name=tags.get(NODE_NAME_TAG, ""),
                        seed_name=seed_name,
                        seed_ip=seed_ip,
                        tags=tags,
                    )
                )
    return sorted(found, key=lambda i: i.instance_id)


def read_certificate_secret(secrets, name: str) -> dict:
    try:
        text = secrets.get_secret_value(SecretId=name)["SecretString"]
        value = json.loads(text)
    except secrets.exceptions.ResourceNotFoundException:
        raise ToolError(f"secret {name} does not exist; create it as the README describes") from None
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


def aws_session(region: str):
    """The boto3 session a tool uses unless a test hands it another."""
    import boto3

    return boto3.Session(region_name=region)


def run_tool(body: Callable[[], int]) -> int:
    """Runs a tool's body; configuration, AWS and Service Fabric errors become one line and exit 2."""
    from botocore.exceptions import BotoCoreError, ClientError
    from sf_rest import FabricError

    from stacks.config import ConfigError

    try:
        return body()
    except (ToolError, ConfigError) as error:
        message = str(error)
    except (BotoCoreError, ClientError) as error:
        message = f"AWS call failed: {error}"
    except FabricError as error:
        message = f"Service Fabric call failed: {error}"
    except KeyboardInterrupt:
        message = "interrupted"
    print(f"error: {message}", file=sys.stderr)
    return 2


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(c)) for c in column) for column in zip(headers, *rows)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in (headers, *rows)]
    return "\n".join(lines)
