"""`telemetry deploy`: an environment's first deployment as one ordered journey (steps.py runs
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
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# The synthesized app's readers live below the commands; their names stay importable from here.
from telemetry.shared.cloud_assembly import (  # noqa: F401
    add_cdk_out_argument,
    DIGEST_FILE,
    REPO,
    SYNTHESIS_INPUTS,
    Stack,
    environment_folder,
    environment_synthesis,
    in_dependency_order,
    read_cloud_assembly,
    record_synthesis,
    synthesis_inputs_digest,
    synthesize,
    synthesized_stacks,
)
from telemetry.shared.errors import UsageError

STEPS = ("preflight", "deploy", "topics", "bootstrap", "scale", "flink", "smoke")


@dataclass(frozen=True)
class Step:
    name: str
    does: list[str]


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
    add_cdk_out_argument(parser)


def run(args: argparse.Namespace, session_factory: Callable[[str], Any]) -> int:
    from stacks.config import load_environment, read_environments

    config = load_environment(read_environments(), args.env)
    if not args.dry_run:
        from botocore.exceptions import NoCredentialsError

        from stacks.placeholders import refusal

        placeholder = refusal(config)
        if placeholder:  # before any AWS call: the deployment would go to the example account
            raise UsageError(placeholder)

        from telemetry.deploy.steps import journey, run_command, run_journey

        session = session_factory(config.region)
        if session.get_credentials() is None:  # before a synthesis the run could not use
            raise NoCredentialsError()
        from telemetry.deploy.steps import Topics

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
        from telemetry.shared.output import document

        document({"environment": config.name, "account": config.account, "region": config.region,
                  "placeholders": shipped, "steps": [asdict(step) for step in steps]})
    else:
        print(describe(config, steps))
        if shipped:
            print(f"placeholders (a real run refuses them): {'; '.join(shipped)}")
    return 0


def _say(line: str) -> None:
    print(line, flush=True)


# -- the plan -----------------------------------------------------------------------------


def plan(config: Any, stacks: Sequence[Stack]) -> list[Step]:
    from telemetry.deploy.steps import (
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
