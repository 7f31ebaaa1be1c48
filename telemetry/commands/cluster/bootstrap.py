"""`telemetry cluster bootstrap`: create the Service Fabric cluster of an environment on its seed nodes.

Reads the seed topology (names, fixed addresses, fault and upgrade domains) and the certificate
secret names from the Service Fabric stack's outputs, checks that every seed instance runs at its
address, builds ClusterConfig.json for an X.509-secured multi-machine cluster (the structure of
Microsoft's ClusterConfig.X509.MultiMachine.json sample), publishes the cluster certificate's
thumbprint to SSM (the node lifecycle functions pin the gateway by it) and, once every seed's SSM
agent is Online and every seed reports its preparation succeeded, runs the create-cluster Run
Command document on seed-0, printing its status until it finishes.

--dry-run needs no AWS credentials: it reads the synthesized template in cdk.out (synthesized into
a temporary folder when cdk.out lacks the environment, as deploy's plan does), builds the JSON with the certificate thumbprints left as placeholders naming their
secrets (only a real run reads the secrets), writes it only where --output says (never into the
checkout by default), and sends nothing.
Exit codes: 0 cluster created (or dry run written); 1 cluster creation failed or timed out;
2 refused (a seed not running at its address, a seed not ready yet: run again later, bad config); a failed AWS call is 1, missing credentials 2 (as every `telemetry` command).
"""

from __future__ import annotations

import argparse
import base64
import datetime
import functools
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from stacks.config import EnvironmentConfig, ServiceFabricConfig, load_environment, read_environments
from stacks.naming import (
    CLIENT_CONNECTION_PORT,
    HTTP_GATEWAY_PORT,
    SCALING_NODE_TYPE,
    SEED_NODE_TYPE,
    cluster_created_parameter_name,
    gateway_thumbprint_parameter_name,
    node_log_group_name,
    service_fabric_cluster_name,
)
from stacks.seed_addresses import SeedPlacement
from telemetry.shared.cluster_inventory import (
    REPO,
    ClusterOutputs,
    NodeInstance,
    deployed_outputs,
    node_instances,
    read_certificate_secret,
    service_fabric_stack_name,
    synthesized_outputs,
    thumbprint,
)
from telemetry.shared.errors import ToolError
from telemetry.shared.errors import OperationFailed
from telemetry.shared.run_command_output import cloudwatch_output, invocation, reason, whole_output

DATA_ROOT = "D:\\SF"  # the data volume userdata/prepare_node.ps1 formats
FINISHED = {"Success", "Failed", "Cancelled", "TimedOut", "Cancelling"}
CREATE_STEP = "createCluster"  # the create-cluster document's one step (stacks/documents/create_cluster.yaml)


def node_type(name: str, settings: ServiceFabricConfig, *, primary: bool) -> dict:
    return {
        "name": name,
        "clientConnectionEndpointPort": str(CLIENT_CONNECTION_PORT),
        "clusterConnectionEndpointPort": "19001",
        "leaseDriverEndpointPort": "19002",
        "serviceConnectionEndpointPort": "19003",
        "httpGatewayEndpointPort": str(HTTP_GATEWAY_PORT),
        "reverseProxyEndpointPort": "19081",
        "applicationPorts": {"startPort": str(settings.application_port_start), "endPort": str(settings.application_port_end)},
        "ephemeralPorts": {"startPort": str(settings.ephemeral_port_start), "endPort": str(settings.ephemeral_port_end)},
        "isPrimary": primary,
    }


def build_cluster_config(
    config: EnvironmentConfig, seeds: Sequence[SeedPlacement], *, cluster_thumbprint: str, admin_thumbprint: str
) -> dict:
    """ClusterConfig.json for the seeds; scaling nodes join later with AddNode.ps1."""
    settings = config.service_fabric
    nodes = [
        {
            "nodeName": seed.name,
            "iPAddress": seed.address,
            "nodeTypeRef": SEED_NODE_TYPE,
            "faultDomain": seed.fault_domain,
            "upgradeDomain": seed.upgrade_domain,
        }
        for seed in sorted(seeds, key=lambda s: s.index)
    ]
    certificate = {"Thumbprint": cluster_thumbprint, "X509StoreName": "My"}
    return {
        "name": service_fabric_cluster_name(config),
        "clusterConfigurationVersion": "1.0.0",
        "apiVersion": "10-2017",
        "nodes": nodes,
        "properties": {
            # The pinned runtime: setup refuses a runtime package of another version when codeVersion
            # names one (DeploymentManagerInternal.cs in microsoft/service-fabric), and a cluster left
            # to auto-upgrade (the default for multi-machine clusters, PropertyBase.cs) would move away
            # from the package every later node joins with. "To select a supported version ... set
            # fabricClusterAutoupgradeEnabled to false" (Upgrade a standalone cluster, Microsoft Learn).
            "codeVersion": settings.runtime_version,
            "fabricClusterAutoupgradeEnabled": False,
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
                },
                # Applications run as the account Fabric runs as (NETWORK SERVICE, which reads the
                # cluster certificate's key) unless their manifest names another in a RunAs policy
                # ("Run a service as a local user account or local system account", Microsoft
                # Learn); Hosting/RunAsPolicyEnabled lets Fabric honour one. Its built-in default is
                # false, and an application that declares Principals then fails to activate
                # (HostingConfig.h, EnvironmentManager.cpp SetupPrincipals in microsoft/service-fabric).
                # The standalone deployer's own ClusterSettings.json already sets it true and user
                # settings merge over it (FabricSettingsGeneratorBase.MergeSettings), so this says
                # what the cluster relies on rather than changing it. The README tells application
                # teams to declare a LocalUser DefaultRunAsPolicy.
                {"name": "Hosting", "parameters": [{"name": "RunAsPolicyEnabled", "value": "true"}]},
            ],
        },
    }


def seed_instances(
    config: EnvironmentConfig, seeds: Sequence[SeedPlacement], instances: Sequence[NodeInstance]
) -> dict[str, NodeInstance]:
    """Seed name -> its running instance, refusing unless every seed runs at its fixed address."""
    expected = config.service_fabric.seed_node_count
    if len(seeds) != expected:
        raise ToolError(f"the stack has {len(seeds)} seed(s), config says {expected}; deploy the stack first")
    running = {i.node_name: i for i in instances if i.node_type == SEED_NODE_TYPE and i.state == "running"}
    problems = []
    for seed in seeds:
        instance = running.get(seed.name)
        if instance is None:
            problems.append(f"{seed.name} has no running instance")
        elif instance.primary_ip != seed.address:
            problems.append(f"{seed.name} ({instance.instance_id}) runs at {instance.primary_ip}, not {seed.address}")
    if problems:
        raise ToolError(f"cannot create {service_fabric_cluster_name(config)}: " + "; ".join(problems))
    return {seed.name: running[seed.name] for seed in seeds}


class Bootstrap:
    """The AWS calls the bootstrap makes (EC2, Secrets Manager, SSM; CloudWatch Logs for an output
    GetCommandInvocation cut short). `log_group`: where the seed writes the document's whole output
    (the nodes' log group, which their role may write)."""

    def __init__(self, session, log_group: str = "") -> None:
        self.ec2 = session.client("ec2")
        self.secrets = session.client("secretsmanager")
        self.ssm = session.client("ssm")
        self.log_group = log_group
        self._session = session

    def publish_thumbprint(self, parameter: str, value: str) -> None:
        self.ssm.put_parameter(
            Name=parameter,
            Value=value,
            Type="String",  # a certificate thumbprint is no secret
            Overwrite=True,  # re-running after a certificate rotation publishes the new one
            Description="SHA-1 thumbprint of the Service Fabric cluster certificate (HTTP gateway identity)",
        )

    def record_created(self, parameter: str, how: str, stack_id: str) -> None:
        """Tells `telemetry deploy` the cluster of this ServiceFabric stack exists (Run Command's
        own history of the create command is not kept forever). The stack's id names which
        stack: one deleted and deployed again has a new id and a cluster still to create."""
        stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        self.ssm.put_parameter(
            Name=parameter, Value=f"{stamp} {how} stack {stack_id}", Type="String", Overwrite=True,
            Description="When telemetry cluster bootstrap created the Service Fabric cluster",
        )  # fmt: skip
        print(f"recorded in {parameter}")

    def send_create(self, document: str, instance_id: str, cluster_config: dict, timeout_s: int) -> str:
        encoded = base64.b64encode(json.dumps(cluster_config).encode()).decode()
        response = self.ssm.send_command(
            DocumentName=document,
            # The version the stack deployed last: CloudFormation's UpdateMethod NewVersion is
            # reported not to move $DEFAULT (cloudformation-coverage-roadmap#2539), which a send
            # without a version runs; the other documents are sent the same way.
            DocumentVersion="$LATEST",
            InstanceIds=[instance_id],
            Parameters={"clusterConfig": [encoded], "timeoutSeconds": [str(timeout_s)]},
            TimeoutSeconds=600,
            Comment=f"create Service Fabric cluster {cluster_config['name']}"[:100],
            **({"CloudWatchOutputConfig": cloudwatch_output(self.log_group)} if self.log_group else {}),
        )
        return response["Command"]["CommandId"]

    def running_create(self, document: str, instance_id: str) -> str:
        """The id of a create of this document still running for the seed, or "". A rerun after an
        interrupt must not send a second one: the running command's scheduled task outlives it, and
        the second would register its task over it. ListCommands' ExecutionStage Executing "returns
        a list of command executions that are currently still running" (Pending and Cancelling
        included); no InstanceId, which a Pending command has not reached yet (API Reference,
        CommandFilter and ListCommands)."""
        pages = self.ssm.get_paginator("list_commands").paginate(
            Filters=[{"key": "DocumentName", "value": document}, {"key": "ExecutionStage", "value": "Executing"}]
        )
        for page in pages:
            for command in page["Commands"]:
                # The filter already keeps this document's; moto's ListCommands ignores filters.
                if command["DocumentName"] == document and instance_id in command.get("InstanceIds", []):
                    return command["CommandId"]
        return ""

    def invocation(self, command_id: str, instance_id: str) -> tuple[str, str, str]:
        result = invocation(self.ssm, command_id, instance_id)
        out, err = result.get("StandardOutputContent") or "", result.get("StandardErrorContent") or ""
        if self.log_group and result["Status"] in FINISHED:
            logs = functools.partial(self._session.client, "logs")
            out = whole_output(logs, self.log_group, command_id, instance_id, CREATE_STEP, "stdout", out)
            err = whole_output(logs, self.log_group, command_id, instance_id, CREATE_STEP, "stderr", err)
        return result["Status"], out, err


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


def cluster_answers(session, config: EnvironmentConfig, outputs: ClusterOutputs, seeds: dict[str, NodeInstance]) -> bool:
    """Whether the cluster already runs with every seed Up, as the seeds answer (telemetry/
    shared/cluster_nodes.py): then nothing is sent. False only when no seed reached a cluster, none has
    Service Fabric installed and every seed is ready (ready_for_create): a fresh create. Anything
    between stops the run without a create: a cluster whose seeds are not all Up, or Service Fabric
    installed where no cluster answers (a cluster that is down, or a create that stopped half way) is
    for an operator to look at, and CleanFabric.ps1 would remove a running cluster's node as well."""
    from telemetry.shared.cluster_nodes import SeedsOffline, ask_the_seeds, describe, seed_statuses

    try:
        seen = ask_the_seeds(session, config, outputs)
    except SeedsOffline as offline:  # typical right after the stack: the seeds' agents have not registered yet
        raise not_ready(seeds, {seed: f"SSM agent {status}" for seed, status in offline.offline.items()}) from None
    except ToolError as error:
        raise OperationFailed(f"cannot ask the seeds whether a cluster runs, so no create is sent: {error}") from None
    if seen.fresh:
        print(f"no seed asked has Service Fabric installed and no cluster answered ({seen.why_not()})")
        ready_for_create(seen, seeds)
        return False
    if not seen.exists:
        print(cleanup_advice(config, [a.instance_id for a in seen.answers if a.unreachable]))
        raise OperationFailed(
            f"Service Fabric is installed on a seed but no cluster answered ({seen.why_not()}): either the cluster is "
            "down (see the seeds' FabricHostSvc and C:\\ServiceFabric\\Logs) or a create stopped half way (then the "
            "cleanup above, and bootstrap again); no create was sent")
    listed, not_up = seed_statuses(seen)
    print(f"{seen.listing.seed} lists a cluster of {describe(seen.nodes or [])}: {len(listed) - len(not_up)} of "
          f"{len(seeds)} seeds Up" + (f" ({', '.join(not_up)})" if not_up else ""))
    if not not_up and len(listed) == len(seeds):
        print("the cluster already exists: nothing to create")
        return True
    raise OperationFailed(f"the cluster runs without every seed Up ({len(listed) - len(not_up)} of {len(seeds)}): "
                          "see telemetry cluster status; no create was sent and nothing recorded")


# The seeds' readiness is checked here, not awaited by CloudFormation (a CreationPolicy on the seed
# instances and a cfn-signal at the end of prepare_node.ps1): that would tie the stack to a Windows
# boot path no test here can run, a failed preparation would roll the whole stack back, and a seed
# rebuilt later would still need this check before any create.
PREPARE_LOG = "C:\\ServiceFabric\\Logs\\prepare-node.log"  # userdata/prepare_node.ps1's $LogFile
MIN_WAIT_MIN = 5  # the shortest "run again in": a Windows first boot moves in steps of minutes


def preparation_budget_s() -> int:
    """How long a node's preparation may take after its launch: what the add-node document waits
    for it (stacks/documents/add_node.yaml, preparationTimeoutSeconds; docs/service-fabric.md says it takes
    about 10-20 minutes)."""
    import yaml

    from stacks.constructs.node_scripts import ADD_NODE_DOCUMENT

    document = yaml.safe_load(ADD_NODE_DOCUMENT.read_text(encoding="utf-8"))
    return int(document["parameters"]["preparationTimeoutSeconds"]["default"])


def ready_for_create(seen, seeds: dict[str, NodeInstance]) -> None:
    """A create needs every seed prepared: CreateServiceFabricCluster.ps1 on seed-0 administers each
    with the deployment account prepare_node.ps1 makes, and installs the runtime it downloaded.
    OperationFailed when a seed's preparation failed (waiting will not mend it); ToolError (exit 2)
    while a seed's agent is not Online (so it was not asked) or its preparation has not succeeded."""
    failed = [a for a in seen.answers if a.prepared == "failed"]
    if failed:
        raise OperationFailed(
            "node preparation failed on " + "; ".join(f"{a.seed} ({a.instance_id}) in step {a.preparation}" for a in failed)
            + f"; its log is {PREPARE_LOG} on the instance (Session Manager: the CloudWatch agent that would ship it is "
            "installed last); no create was sent")
    waiting = {seed: f"SSM agent {status}" for seed, status in seen.offline.items()}
    for a in seen.answers:
        if a.prepared != "succeeded":
            waiting[a.seed] = (f"preparation {a.prepared}" + (f" ({a.preparation})" if a.preparation else "") if a.prepared
                               else "reports no preparation (its cluster-nodes document is older: deploy the stack)")
    if waiting:
        raise not_ready(seeds, waiting)
    print(f"all {len(seeds)} seeds are Online and their node preparation succeeded")


def not_ready(seeds: dict[str, NodeInstance], waiting: dict[str, str],
              now: datetime.datetime | None = None) -> ToolError:
    """The refusal while seeds are not ready, with when to run again: when the last of them has had
    the time preparation is given since its launch, MIN_WAIT_MIN at least."""
    budget = preparation_budget_s()
    now = now or datetime.datetime.now(datetime.timezone.utc)
    age = {seed: (now - seeds[seed].launched).total_seconds() if seeds[seed].launched else 0.0 for seed in waiting}
    overdue = [seed for seed in waiting if age[seed] > budget]
    left = max((budget - age[seed] for seed in waiting if seed not in overdue), default=0.0)
    minutes = max(MIN_WAIT_MIN, -(-int(left) // 60))
    why = f"a seed is prepared within {budget // 60} minutes of its launch"
    if overdue:
        why += (f"; {', '.join(overdue)} launched longer ago than that: look at it first (EC2 console: its system log; "
                f"Session Manager: {PREPARE_LOG})")
    listed = "; ".join(f"{seed} ({seeds[seed].instance_id}) {state}" for seed, state in waiting.items())
    return ToolError(f"the seeds are not ready for the cluster create: {listed}; no create was sent: run again in "
                     f"{minutes} minutes ({why})")


def after_failed_create(session, config: EnvironmentConfig, outputs: ClusterOutputs, seed_ids: Sequence[str]) -> str:
    """What to do about what a failed create left, from the seeds' own answer: CleanFabric.ps1 only
    for the seeds that have Service Fabric installed (a create that failed before installing left
    nothing to clean), never while a cluster answers."""
    from telemetry.shared.cluster_nodes import ask_the_seeds

    try:
        seen = ask_the_seeds(session, config, outputs)
    except ToolError as error:
        print(f"could not ask the seeds what the create left ({error})")
        return cleanup_advice(config, seed_ids)  # worded for "if the seeds hold part of a cluster"
    if seen.exists:
        return f"{seen.listing.seed} lists a cluster after all: run bootstrap again to check and record it"
    holding = [a.instance_id for a in seen.answers if a.unreachable]
    if holding:
        return cleanup_advice(config, holding)
    return (f"no seed asked has Service Fabric installed ({seen.why_not()}): nothing to clean up; bootstrap again once "
            "the cause is fixed")


# Where userdata/prepare_node.ps1 unpacks the standalone package on every node.
STANDALONE_PACKAGE = "C:\\ServiceFabric\\Package"


def cleanup_advice(config: EnvironmentConfig, seed_instance_ids: Sequence[str]) -> str:
    """What to run when a create failed part way: the seeds may then hold part of a cluster, and
    every rerun fails in TestConfiguration. CleanFabric.ps1 "cleans a standalone Service Fabric
    installation off the current machine" (Microsoft, "Contents of Service Fabric Standalone
    package for Windows Server"), so it runs on each seed, under Run Command's own account."""
    command = f"& {STANDALONE_PACKAGE}\\CleanFabric.ps1"  # no spaces in the path: no quotes inside the shell's
    return (
        "if the seeds hold part of a cluster that never ran (a rerun then fails in TestConfiguration), clean each "
        "seed with this (a POSIX shell's quoting; never while a cluster runs: it removes the node from it), wait "
        "until its invocations succeed (aws ssm list-command-invocations --command-id ID), then run bootstrap "
        "again:\n"
        f"  aws ssm send-command --region {config.region} --document-name AWS-RunPowerShellScript "
        f"--instance-ids {' '.join(seed_instance_ids)} --parameters '{json.dumps({'commands': [command]})}'"
    )


def placeholder_thumbprint(secret: str) -> str:
    return f"<thumbprint of the certificate in secret {secret}>"


def write_cluster_config(args: argparse.Namespace, config: EnvironmentConfig, cluster_config: dict) -> None:
    output = args.output or REPO / "cluster-config" / f"{config.name}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(cluster_config, indent=2) + "\n")
    for node in cluster_config["nodes"]:
        print(f"{node['nodeName']}: {node['iPAddress']} {node['faultDomain']} {node['upgradeDomain']}")
    print(f"wrote {output}")


def dry_run(args: argparse.Namespace, config: EnvironmentConfig) -> int:
    from telemetry.shared.output import dry_run_plan

    outputs = synthesized_outputs(args.cdk_out, config)
    cluster_secret, admin_secret = outputs.get("ClusterCertificateSecret"), outputs.get("AdminCertificateSecret")
    cluster_config = build_cluster_config(
        config,
        outputs.seeds,
        cluster_thumbprint=placeholder_thumbprint(cluster_secret),
        admin_thumbprint=placeholder_thumbprint(admin_secret),
    )
    if args.output:  # only where asked: a dry run writes nothing into the checkout by itself
        write_cluster_config(args, config, cluster_config)
    else:
        for node in cluster_config["nodes"]:
            print(f"{node['nodeName']}: {node['iPAddress']} {node['faultDomain']} {node['upgradeDomain']}")
    first = min(outputs.seeds, key=lambda s: s.index).name
    default_output = REPO / "cluster-config" / f"{config.name}.json"
    return dry_run_plan(
        args, config,
        summary=[f"dry run from {outputs.source}: no AWS call made; thumbprints are read from the secrets by a real "
                 "run" + ("" if args.output else "; ClusterConfig.json not written (--output FILE writes it)")],
        would_read=[
            f"the outputs of stack {outputs.stack_name} (CloudFormation): the deployed seed addresses and names, "
            "which this plan takes from the synthesized template",
            f"the seed instances (EC2, tag sf:cluster={service_fabric_cluster_name(config)}): each must run at its "
            "address",
            f"the certificates in secrets {cluster_secret} and {admin_secret} (Secrets Manager), for their thumbprints",
            f"whether the create-cluster document still runs on {first}, or the cluster already answers, or every "
            "seed's SSM agent is Online and its node preparation succeeded (the seeds' cluster-nodes document)",
        ],
        would_change=[
            f"write ClusterConfig.json to {args.output or default_output}",
            f"put the gateway's certificate thumbprint in SSM parameter {gateway_thumbprint_parameter_name(config)}",
            f"send the create-cluster document ({outputs.get('CreateClusterDocumentName')}) to {first} and wait up "
            f"to {args.timeout:.0f} s for it",
            f"record the creation in SSM parameter {cluster_created_parameter_name(config)}",
        ],
        source=outputs.source, cluster_config=cluster_config, written=str(args.output) if args.output else None,
    )


def bootstrap(args: argparse.Namespace, session_factory: Callable[[str], object]) -> int:
    config = load_environment(read_environments(), args.env)
    if args.dry_run:
        return dry_run(args, config)
    session = session_factory(config.region)
    aws = Bootstrap(session, node_log_group_name(config))
    outputs: ClusterOutputs = deployed_outputs(session.client("cloudformation"), service_fabric_stack_name(config))
    seeds = outputs.seeds
    instances = seed_instances(config, seeds, node_instances(aws.ec2, service_fabric_cluster_name(config)))
    cluster_thumbprint = thumbprint(read_certificate_secret(aws.secrets, outputs.get("ClusterCertificateSecret"))["certificate"])
    cluster_config = build_cluster_config(
        config,
        seeds,
        cluster_thumbprint=cluster_thumbprint,
        admin_thumbprint=thumbprint(read_certificate_secret(aws.secrets, outputs.get("AdminCertificateSecret"))["certificate"]),
    )
    write_cluster_config(args, config, cluster_config)
    parameter = gateway_thumbprint_parameter_name(config)
    aws.publish_thumbprint(parameter, cluster_thumbprint)
    print(f"published the gateway thumbprint to {parameter} (the node lifecycle functions pin it)")

    first_seed = min(seeds, key=lambda s: s.index)
    first = instances[first_seed.name]
    document = outputs.get("CreateClusterDocumentName")
    seed_ids = [instances[s.name].instance_id for s in sorted(seeds, key=lambda s: s.index)]
    # A create still running first: while it runs the seeds may list part of a cluster.
    command_id = aws.running_create(document, first.instance_id)
    if command_id:
        print(f"{document} is still running on {first.instance_id} ({first_seed.name}), command {command_id}: "
              "waiting for it instead of sending another")
    elif cluster_answers(session, config, outputs, instances):
        aws.record_created(cluster_created_parameter_name(config), "found running", outputs.stack_id)
        answer(args, config, cluster_config, "", "found running")
        return 0
    else:
        command_id = aws.send_create(document, first.instance_id, cluster_config, int(args.timeout))
        print(f"sent {document} to {first.instance_id} ({first_seed.name}), command {command_id}")
    status, out, err = wait_for_command(
        aws, command_id, first.instance_id, timeout_s=args.timeout, poll_interval_s=args.poll_interval
    )
    if out.strip():
        print(out.rstrip())
    if status != "Success":
        detail = reason(err) or "see C:\\ServiceFabric\\Logs\\create-cluster.log"
        if not status.startswith("still "):
            print(after_failed_create(session, config, outputs, seed_ids))
        raise OperationFailed(f"cluster creation {status}: {detail}")
    print(f"cluster {cluster_config['name']} created with {len(seeds)} seed nodes")
    aws.record_created(cluster_created_parameter_name(config), f"command {command_id}", outputs.stack_id)
    answer(args, config, cluster_config, command_id, "created")
    return 0


def answer(args: argparse.Namespace, config: EnvironmentConfig, cluster_config: dict, command_id: str,
           result: str) -> None:
    """--format json: what the run did, as one document."""
    if args.format == "json":
        from telemetry.shared.output import document

        document({"environment": config.name, "cluster": cluster_config["name"],
                  "seeds": [node["nodeName"] for node in cluster_config["nodes"]],
                  "cluster_config": str(args.output or REPO / "cluster-config" / f"{config.name}.json"),
                  "command_id": command_id or None, "result": result})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", type=Path, help="where to write ClusterConfig.json (default cluster-config/<env>.json)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for cluster creation (default 3600)")
    parser.add_argument("--poll-interval", type=float, default=15.0, help="seconds between status lines (default 15)")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="no AWS credentials needed: build ClusterConfig.json from the synthesized template (cdk.out, or "
        "a synthesis made now) with placeholder thumbprints, write it only to --output, and say what a run would read and "
        "change; send nothing",
    )
    from telemetry.shared.cloud_assembly import add_cdk_out_argument

    add_cdk_out_argument(parser, when="for --dry-run, ")


def run(args: argparse.Namespace, session_factory: Callable[[str], object]) -> int:
    return bootstrap(args, session_factory)


if __name__ == "__main__":  # run by path, as before the one front door
    from telemetry.shared.errors import moved

    raise SystemExit(moved("cluster bootstrap"))
