"""The first deployment, executed: each step finds out whether it is already done (from the
account itself, not from a file on this machine), does its part if not, and says so. A run that
stops on a failure is resumed by running `telemetry deploy` again: the steps done are skipped.

The steps and how each knows it is done:

    preflight  never "done": it reads the account every time, and any blocker stops the run
    deploy     every stack of the environment is in a complete CloudFormation state; a missing
               stack is deployed with the CDK CLI, one at a time in dependency order
    topics     the SSM parameter `telemetry topics` writes after a reconcile that left nothing to
               change, for the cluster whose brokers are published now; the Kafka work runs on a
               simulator fleet host over Run Command, as the topic administrator role (MFA:
               deploy's --mfa-serial)
    bootstrap  the SSM parameter `telemetry cluster bootstrap` writes once the create-cluster
               command has succeeded, for the ServiceFabric stack deployed now (or that
               command's Success since the stack was created, in Run Command's history)
    flink      the Flink application is RUNNING; a READY one is started
    smoke      never "done": a short simulator fleet run through the platform must lose
               nothing, and every seed node must be Up at the cluster's gateway
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from scripts.telemetry.errors import OperationFailed

REPO = Path(__file__).resolve().parent.parent.parent
COMPLETE = frozenset({"CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE", "IMPORT_COMPLETE"})
SMOKE_RATE, SMOKE_SECONDS = 1000, 30

Say = Callable[[str], None]
Runner = Callable[[Sequence[str]], int]  # runs a command with this terminal, returns its exit code


class Step(Protocol):
    name: str

    def done(self) -> str:
        """Why the step is already done, or "" when it has work to do."""

    def run(self) -> None:
        """Do the step; raise OperationFailed with what to do when it cannot."""


def run_command(command: Sequence[str]) -> int:
    """The real runner: the command's own output goes straight to the operator."""
    return subprocess.run(list(command), cwd=REPO, check=False).returncode


def run_journey(steps: Sequence[Step], say: Say) -> int:
    for number, step in enumerate(steps, 1):
        label = f"[{number}/{len(steps)}] {step.name}"
        why = step.done()
        if why:
            say(f"{label}: already done ({why})")
            continue
        say(f"{label}: running")
        try:
            step.run()
        except OperationFailed as failure:
            raise OperationFailed(f"{step.name}: {failure} (run telemetry deploy again to go on from here)") from None
        say(f"{label}: done")
    say("the environment is deployed: every step is done")
    return 0


@dataclass
class Preflight:
    config: Any
    session: Any
    say: Say
    name: str = "preflight"

    def done(self) -> str:
        return ""

    def run(self) -> None:
        from scripts.preflight import BLOCKER, preflight

        blockers = [c for c in preflight(self.config, self.session) if c.result == BLOCKER]
        if blockers:
            listed = "; ".join(f"{c.name}: {c.detail}" for c in blockers)
            raise OperationFailed(f"{len(blockers)} blocker(s): {listed}")


@dataclass
class Stacks:
    """Every stack, in dependency order; `stacks` as deploy.synthesized_stacks gives them."""

    config: Any
    session: Any
    stacks: Sequence[Any]
    runner: Runner
    say: Say
    name: str = "deploy"

    def _status(self, name: str) -> str:
        cloudformation = self.session.client("cloudformation")
        try:
            (stack,) = cloudformation.describe_stacks(StackName=name)["Stacks"]
        except cloudformation.exceptions.ClientError as error:
            if "does not exist" in str(error):
                return ""
            raise
        return str(stack["StackStatus"])

    def done(self) -> str:
        statuses = [self._status(stack.name) for stack in self.stacks]
        return f"all {len(statuses)} stacks deployed" if all(s in COMPLETE for s in statuses) else ""

    def run(self) -> None:
        cdk = REPO / ".venv" / "bin" / "cdk"
        for stack in self.stacks:
            status = self._status(stack.name)
            if status in COMPLETE:
                self.say(f"  {stack.name}: {status}")
                continue
            if status.endswith("_IN_PROGRESS"):
                raise OperationFailed(f"stack {stack.name} is {status}; wait until it settles")
            if status:  # ROLLBACK_COMPLETE, *_FAILED: CloudFormation will not update it
                raise OperationFailed(
                    f"stack {stack.name} is {status}: see its events in the CloudFormation console, delete "
                    f"it (aws cloudformation delete-stack --stack-name {stack.name}) and fix the cause"
                )
            self.say(f"  {stack.name}: deploying")
            command = [str(cdk), "deploy", stack.name, "-c", f"env={self.config.name}",
                       "--exclusively", "--require-approval", "never"]
            code = self.runner(command)
            if code != 0:
                raise OperationFailed(f"cdk deploy {stack.name} exited {code} (its output is above)")


@dataclass
class Topics:
    config: Any
    session: Any
    mfa_serial: str | None = None
    read_code: Callable[[str], str] | None = None  # the MFA code; the terminal by default
    name: str = "topics"

    def done(self) -> str:
        """The record `telemetry topics` leaves after a reconcile with nothing left to change, for
        the cluster whose brokers are in the bootstrap parameter now (not one deleted since)."""
        from scripts.manage_topics import brokers_fingerprint
        from stacks.naming import bootstrap_parameter_name, topics_reconciled_parameter_name

        ssm = self.session.client("ssm")
        try:
            record = ssm.get_parameter(Name=topics_reconciled_parameter_name(self.config))["Parameter"]["Value"]
            brokers = ssm.get_parameter(Name=bootstrap_parameter_name(self.config))["Parameter"]["Value"]
        except ssm.exceptions.ParameterNotFound:
            return ""
        stamp, _, fingerprint = record.partition(" brokers ")
        if fingerprint != brokers_fingerprint(brokers):
            return ""
        return f"telemetry topics reconciled them at {stamp}"

    def run(self) -> None:
        import argparse

        from scripts.manage_topics import declared_environment, reconcile_on_fleet, record_reconciled

        if not self.mfa_serial:
            raise OperationFailed(
                "the topics are reconciled as the topic administrator role, which requires MFA: run "
                f"telemetry deploy --env {self.config.name} --mfa-serial ARN (your MFA device)"
            )
        environment = declared_environment(self.config.name)
        args = argparse.Namespace(mfa_serial=self.mfa_serial, dry_run=False, timeout=30.0)
        if reconcile_on_fleet(environment, args, self.session, read_code=self.read_code) != 0:
            raise OperationFailed(
                "a topic differs from cdk.json in a way Kafka cannot change in place (above): fix the "
                "declaration or the topic, then run again"
            )
        record_reconciled(environment, ssm=self.session.client("ssm"))


@dataclass
class Bootstrap:
    config: Any
    session: Any
    say: Say
    name: str = "bootstrap"

    def done(self) -> str:
        """The record `telemetry cluster bootstrap` leaves for this very stack, or else a Success
        of its create-cluster document requested since the stack was created, while Run Command
        still keeps it (a limited time; the console lists 30 days, no API page says)."""
        from scripts.cluster_inventory import deployed_outputs, service_fabric_stack_name
        from stacks.naming import cluster_created_parameter_name

        outputs = deployed_outputs(self.session.client("cloudformation"), service_fabric_stack_name(self.config))
        ssm = self.session.client("ssm")
        parameter = cluster_created_parameter_name(self.config)
        try:
            record = ssm.get_parameter(Name=parameter)["Parameter"]["Value"]
        except ssm.exceptions.ParameterNotFound:
            record = ""
        if record.endswith(f" stack {outputs.stack_id}"):
            return f"{parameter}: {record}"
        document = outputs.get("CreateClusterDocumentName")
        for page in ssm.get_paginator("list_commands").paginate():
            for command in page["Commands"]:
                if (command["DocumentName"] == document and command["Status"] == "Success"
                        and (outputs.created is None or command["RequestedDateTime"] >= outputs.created)):
                    return f"{document} succeeded, command {command['CommandId']}"
        return ""

    def run(self) -> None:
        import argparse

        from scripts.bootstrap_cluster import bootstrap

        args = argparse.Namespace(env=self.config.name, output=None, timeout=3600.0, poll_interval=15.0,
                                  dry_run=False, cdk_out=REPO / "cdk.out")
        if bootstrap(args, lambda region: self.session) != 0:
            raise OperationFailed("the cluster was not created (the reason is above)")


@dataclass
class Flink:
    config: Any
    session: Any
    stacks: Sequence[Any]
    say: Say
    name: str = "flink"

    def _applications(self) -> list[str]:
        found = []
        for stack in self.stacks:
            for resource in stack.resources("AWS::KinesisAnalyticsV2::Application").values():
                found.append(str(resource["Properties"]["ApplicationName"]))
        return found

    def _status(self, application: str) -> str:
        client = self.session.client("kinesisanalyticsv2")
        detail = client.describe_application(ApplicationName=application)["ApplicationDetail"]
        return str(detail["ApplicationStatus"])

    def done(self) -> str:
        applications = self._applications()
        if applications and all(self._status(a) == "RUNNING" for a in applications):
            return f"{', '.join(applications)} RUNNING"
        return ""

    def run(self) -> None:
        client = self.session.client("kinesisanalyticsv2")
        for application in self._applications():
            status = self._status(application)
            if status == "RUNNING":
                continue
            if status != "READY":
                raise OperationFailed(f"Flink application {application} is {status}; start it once it is READY")
            # From the latest snapshot if there is one: the first start has none.
            client.start_application(
                ApplicationName=application,
                RunConfiguration={"ApplicationRestoreConfiguration": {"ApplicationRestoreType": "RESTORE_FROM_LATEST_SNAPSHOT"}},
            )
            self.say(f"  {application}: started (it is RUNNING within a few minutes)")


@dataclass
class Smoke:
    config: Any
    session: Any
    say: Say
    name: str = "smoke"

    def done(self) -> str:
        return ""

    def run(self) -> None:
        import argparse

        from scripts.run_simulation import Fleet, make_plan, run_fleet

        # A smoke run checks that messages flow and none is lost, not latency: the latency
        # thresholds are set out of reach (telemetry simulate judges latency).
        args = argparse.Namespace(rate=SMOKE_RATE, duration=SMOKE_SECONDS, hosts=None, run_id=_smoke_run_id(),
                                  warmup=5, processes=0, message_bytes=512, devices=100, transport="kafka",
                                  slo_min_rate=SMOKE_RATE * 0.95, slo_p99_ms=60_000.0, slo_max_ms=60_000.0,
                                  slo_max_lost=0, slo_max_delivery_errors=0)
        plan = make_plan(self.config, args)
        report = run_fleet(plan, Fleet(self.session), hosts=None, poll_interval_s=10.0,
                           timeout_s=SMOKE_SECONDS + 600, metrics_delay_s=0.0, say=self.say)
        rate, lost = report.get("throughput_msgs_per_s", 0.0), report.get("lost", 0)
        if not report["slo"]["passed"]:
            failed = [c["name"] for c in report["slo"]["checks"] if not c["passed"]]
            raise OperationFailed(f"the smoke run failed {', '.join(failed)}: {rate:,.0f} msg/s, {lost} lost")
        self.say(f"  smoke run: {rate:,.0f} msg/s through the platform, nothing lost")
        self.say(f"  cluster: {seeds_up(self.config, self.session)}")


def seeds_up(config: Any, session: Any) -> str:
    """Every seed node Up, as the cluster's HTTP gateway lists them (reached as `telemetry cluster
    status` does: the stack's endpoint, the admin certificate, the gateway pinned to the cluster
    certificate); what it found, or OperationFailed naming the seeds that are not."""
    import argparse

    from sf_rest import FabricError

    from scripts.cluster_inventory import (
        add_gateway_arguments,
        deployed_outputs,
        gateway_client,
        service_fabric_stack_name,
    )

    outputs = deployed_outputs(session.client("cloudformation"), service_fabric_stack_name(config))
    gateway_flags = argparse.ArgumentParser(add_help=False)
    add_gateway_arguments(gateway_flags)
    defaults = gateway_flags.parse_args([])  # every default: from the stack outputs and secrets
    client, cleanup = gateway_client(defaults, outputs, lambda: session.client("secretsmanager"))
    try:
        with client:
            nodes = client.get_node_info_list(status_filter="all")
    except FabricError as error:
        raise OperationFailed(
            f"cannot list the cluster's nodes at {outputs.get('HttpGatewayEndpoint')}: {error} (this machine must "
            "be in service_fabric.management_cidrs)"
        ) from None
    finally:
        cleanup()
    expected = config.service_fabric.seed_node_count
    seeds = sorted((node.name, node.status) for node in nodes if node.is_seed_node)
    not_up = [f"{name} {status}" for name, status in seeds if status != "Up"]
    if not_up or len(seeds) != expected:
        raise OperationFailed(
            f"{len(seeds) - len(not_up)} of {expected} seed nodes are Up"
            + (f" ({', '.join(not_up)})" if not_up else f" ({len(seeds)} listed)")
            + ": see telemetry cluster status"
        )
    return f"{expected} of {expected} seed nodes Up"


def _smoke_run_id() -> str:
    import datetime

    return "smoke-" + datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")


def journey(
    config: Any, session: Any, stacks: Sequence[Any], *, runner: Runner, say: Say, mfa_serial: str | None = None,
    read_code: Callable[[str], str] | None = None,
) -> list[Step]:  # fmt: skip
    return [
        Preflight(config, session, say),
        Stacks(config, session, stacks, runner, say),
        Topics(config, session, mfa_serial, read_code),
        Bootstrap(config, session, say),
        Flink(config, session, stacks, say),
        Smoke(config, session, say),
    ]
