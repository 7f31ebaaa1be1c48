"""A deployed environment's seeds in moto, and what they answer to the cluster-nodes document.

The seeds run in moto's EC2 as the ServiceFabric stack launches them (their fixed addresses, the
sf:* tags), the document exists in moto's SSM as the stack renders it, and GetCommandInvocation of
that document is answered with the lines stacks/documents/cluster_nodes.yaml prints (its script is
the source of every line here): first PREPARED=<state>|<detail>, the seed's node preparation as
userdata/prepare_node.ps1 leaves it in its status file (a seed not yet succeeded prints only that
and NOCLUSTER, or UNREACHABLE where Service Fabric is installed); then, for the nodes
the Service Fabric emulator lists, NODE=<NodeName>|<NodeStatus>|<IsSeedNode> per node
(Get-ServiceFabricNode lists the Failover Manager's view, the same one the REST API's
GetNodeInfoList returns: tests/sf_emulator, EmulatedCluster.list_nodes), or, when no cluster
answers, UNREACHABLE=<reason> on a seed with Service Fabric installed and NOCLUSTER=<reason> on
one without. PowerShell cannot run here: that the script prints these lines is a claim
(its syntax is parsed by tree-sitter in tests/stacks/test_userdata.py); the Service
Fabric cmdlets' behaviour is Microsoft's PowerShell reference, not run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from stacks.constructs.node_scripts import render_cluster_nodes_document
from stacks.naming import NODE_PREPARATION_STATUS_FILE
from tests.conftest import MOTO_IMAGE

PREPARED = "succeeded|"  # what a seed whose preparation succeeded prints after PREPARED=


def launch_seeds(session, synthesized, env: str) -> dict[str, str]:
    """The environment's seeds as running instances at their fixed addresses: seed name -> id."""
    ec2 = session.client("ec2")
    seeds = json.loads(synthesized(env).stacks["service_fabric"]["Outputs"]["Seeds"]["Value"])
    first = seeds[0]["address"].split(".")
    vpc = ec2.create_vpc(CidrBlock=f"{first[0]}.{first[1]}.0.0/16")["Vpc"]["VpcId"]
    image = MOTO_IMAGE
    subnets: dict[str, str] = {}
    launched = {}
    for seed in seeds:
        cidr = ".".join(seed["address"].split(".")[:3]) + ".0/24"
        if cidr not in subnets:
            subnets[cidr] = ec2.create_subnet(VpcId=vpc, CidrBlock=cidr, AvailabilityZone=seed["availability_zone"])[
                "Subnet"]["SubnetId"]
        launched[seed["name"]] = ec2.run_instances(
            ImageId=image, MinCount=1, MaxCount=1, SubnetId=subnets[cidr], PrivateIpAddress=seed["address"],
            TagSpecifications=[{"ResourceType": "instance", "Tags": [
                {"Key": "sf:cluster", "Value": f"telemetry-{env}-sf"}, {"Key": "sf:nodetype", "Value": "PrimaryNodeType"},
                {"Key": "sf:nodename", "Value": seed["name"]}]}],
        )["Instances"][0]["InstanceId"]
    session.client("ssm").create_document(
        Name=f"telemetry-{env}-sf-cluster-nodes",
        Content=json.dumps(render_cluster_nodes_document({"statusFile": NODE_PREPARATION_STATUS_FILE})),
        DocumentType="Command", DocumentFormat="JSON")
    return launched


def service_fabric_outputs(synthesized, env: str) -> dict[str, str]:
    """The ServiceFabric stack's literal outputs (what DescribeStacks returns for them)."""
    outputs = synthesized(env).stacks["service_fabric"]["Outputs"]
    return {key: o["Value"] for key, o in outputs.items() if isinstance(o["Value"], str)}


def seeds_answer(session, listed: Callable[[], list[dict[str, Any]] | None],
                 installed: Callable[[str], bool] = lambda instance: False,
                 prepared: Callable[[str], str] = lambda instance: PREPARED) -> list[dict]:
    """Registers, on `session` before its clients are made, the seeds' answer to the cluster-nodes
    document, as stacks/documents/cluster_nodes.yaml prints it on each seed: `prepared(instance_id)`
    is what follows PREPARED= (<state>|<detail>, state running, succeeded or failed); a seed whose
    state is not succeeded stops there. `listed()` gives the nodes of the cluster that runs
    (Name/NodeName, NodeStatus, IsSeedNode), which every seed reaches through any seed's endpoint,
    or None when no cluster answers; then a seed answers UNREACHABLE where Service Fabric is
    installed (`installed(instance_id)`, FabricHostSvc exists), else NOCLUSTER. Returns the
    SendCommand requests of that document, as they were made."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ssm.models import ssm_backends

    from tests.conftest import keep_params, model_answer

    sent: list[dict] = []

    def record(params, **_):
        if params.get("DocumentName", "").endswith("-sf-cluster-nodes"):
            sent.append(dict(params))

    def answer(model, context, **_):
        params = context["api_params"]
        account = os.environ.get("MOTO_ACCOUNT_ID", DEFAULT_ACCOUNT_ID)  # moto's account, as the test set it
        command = ssm_backends[account]["eu-west-1"].get_command_by_id(params["CommandId"])
        if not command.document_name.endswith("-sf-cluster-nodes"):
            return None  # moto answers every other document
        state = prepared(params["InstanceId"])
        no_cluster = "UNREACHABLE" if installed(params["InstanceId"]) else "NOCLUSTER"
        nodes = listed()
        # The message Connect-ServiceFabricCluster throws when nothing listens (CommonCmdletBase.cs).
        unreachable = "No cluster endpoint is reachable, please check if there is connectivity/firewall/DNS issue."
        if not state.startswith("succeeded|"):
            lines = [f"PREPARED={state}", f"{no_cluster}=this node is not prepared ({state.partition('|')[0]})"]
        elif nodes is not None:
            lines = [f"PREPARED={state}",
                     *(f"NODE={n.get('Name') or n['NodeName']}|{n['NodeStatus']}|{n['IsSeedNode']}" for n in nodes)]
        else:
            lines = [f"PREPARED={state}", f"{no_cluster}={unreachable}"]
        return model_answer(model, {
            "CommandId": params["CommandId"], "InstanceId": params["InstanceId"], "DocumentName": command.document_name,
            "PluginName": "clusterNodes", "ResponseCode": 0, "Status": "Success", "StatusDetails": "Success",
            "StandardOutputContent": "\r\n".join(lines) + "\r\n", "StandardErrorContent": ""})  # Windows line ends

    session.events.register("provide-client-params.ssm.SendCommand", record)
    session.events.register("provide-client-params.ssm.GetCommandInvocation", keep_params)
    session.events.register("before-call.ssm.GetCommandInvocation", answer)
    return sent
