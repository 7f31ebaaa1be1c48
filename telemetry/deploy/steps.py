"""The first deployment, executed: each step finds out whether it is already done (from the
account itself, not from a file on this machine), does its part if not, and says so. A run that
stops on a failure is resumed by running `telemetry deploy` again: the steps done are skipped.

The steps and how each knows it is done:

    preflight  never "done": it reads the account every time, and any blocker stops the run
    deploy     the app synthesized now by the CDK CLI, and every stack deployed as the CLI would
               leave it (its template, tags and termination protection); a stack missing, changed,
               rolled back or reading SSM parameters (which may resolve anew: a new Windows image)
               is deployed with the CLI, one at a time in dependency order (a production change is
               shown and asked for, unless --yes); each CloudFormation status handled as the CLI
               does (Stacks, below)
    topics     the SSM parameter `telemetry topics` writes after a reconcile that left nothing to
               change, for the cluster whose brokers are published now; the Kafka work runs on a
               simulator fleet host over Run Command, as the topic administrator role (MFA:
               deploy's --mfa-serial)
    bootstrap  the SSM parameter `telemetry cluster bootstrap` writes once the create-cluster
               command has succeeded, for the ServiceFabric stack deployed now (or that
               command's Success since the stack was created, in Run Command's history)
    scale      the scaling node group has its configured minimum and is steady (every node
               joined: InService after its launch hook); else it is set to the configured size and
               waited for
    flink      the Flink application is running (RUNNING, AUTOSCALING or MAINTENANCE); a READY one
               is started and waited for, and a start that falls back to READY fails with the
               reason its operation gives
    smoke      never "done": two short simulator fleet runs, one producing to MSK, one publishing
               as provisioned devices through AWS IoT Core, must lose nothing; every record they
               acknowledged must come back through the Flink sink into S3 within the bound
               smoke_read_back_bound() gives (beside the lake, under smoke/, never in its table);
               every seed node must be Up as the seeds list them over Run Command
"""

from __future__ import annotations

import datetime
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from telemetry import REPO
from telemetry.shared.errors import OperationFailed, StepFailed

SMOKE_RATE, SMOKE_SECONDS = 1000, 30
# The MQTT leg: a few provisioned devices on one host, each well under AWS IoT Core's 100
# publishes per second per connection (AWS IoT Core endpoints and quotas).
SMOKE_MQTT_DEVICES, SMOKE_MQTT_RATE = 5, 100
# Beyond two checkpoint intervals: the S3 listing, and a slow first checkpoint of a fresh start.
SMOKE_READ_BACK_MARGIN_S, SMOKE_POLL_S = 120.0, 15.0

Say = Callable[[str], None]
Runner = Callable[[Sequence[str]], int]  # runs a command with this terminal, returns its exit code


class Step(Protocol):
    name: str

    def done(self) -> str:
        """Why the step is already done, or "" when it has work to do."""

    def run(self) -> None:
        """Do the step; raise OperationFailed with what to do when it cannot."""


def run_command(command: Sequence[str]) -> int:
    """The real runner: the command's own output goes straight to the operator; .venv/bin comes
    first on PATH (cdk_cli.py)."""
    from telemetry.shared import cdk_cli

    return subprocess.run(list(command), cwd=REPO, env=cdk_cli.environment(), check=False).returncode


def run_journey(steps: Sequence[Step], say: Say) -> int:
    for number, step in enumerate(steps, 1):
        label = f"[{number}/{len(steps)}] {step.name}"
        # Whatever a step raises, finding out or doing (a refusal, an AWS error, a defect), names
        # the step and the way on, and keeps the exit code its kind has (errors.StepFailed).
        try:
            why = step.done()
            if why:
                say(f"{label}: already done ({why})")
                continue
            say(f"{label}: running")
            step.run()
        except Exception as error:  # noqa: BLE001 - every kind: errors.worded gives each its exit code
            raise StepFailed(step.name, error) from error
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
        from telemetry.commands.preflight import BLOCKER, preflight

        blockers = [c for c in preflight(self.config, self.session) if c.result == BLOCKER]
        if blockers:
            listed = "; ".join(f"{c.name}: {c.detail}" for c in blockers)
            raise OperationFailed(f"{len(blockers)} blocker(s): {listed}")


# What this step does with each CloudFormation stack status before it calls `cdk deploy`, after
# what the pinned CDK CLI itself does (aws-cdk 2.1148.1, toolkit-lib api/stack-events/
# stack-status.ts and api/deployments/deploy-stack.ts, read in .venv/cdk-cli's bundle) and the
# CloudFormation User Guide ("Stack status codes"; "Continue rolling back an update").
#   create: the CLI creates the stack. REVIEW_IN_PROGRESS counts as "does not exist" (a change set
#     was made and never executed); ROLLBACK_COMPLETE and ROLLBACK_FAILED are its "creation
#     failure" (isCreationFailure): it deletes the stack, with what a failed rollback left, and
#     creates it again, unless termination protection, or an instance left with its API termination
#     disabled, refuses the deletion (run(), _left_protected).
#   settled: the stack can be updated; it is updated when the CLI would not skip it (Stacks.
#     _reasons), rolled back (UPDATE_ROLLBACK_COMPLETE, IMPORT_ROLLBACK_COMPLETE) or not.
#   wait: an operation is running (every *_IN_PROGRESS but REVIEW_IN_PROGRESS).
#   advice: CloudFormation will not update it, or the CLI's own way out would fail; what to do, and
#     never a deletion of a stack that holds data.
# DELETE_COMPLETE: DescribeStacks by name does not find a deleted stack ("" here); by its id it
# still answers that status.
CREATE = frozenset({"", "DELETE_COMPLETE", "REVIEW_IN_PROGRESS", "ROLLBACK_COMPLETE", "ROLLBACK_FAILED"})
SETTLED = frozenset({"CREATE_COMPLETE", "UPDATE_COMPLETE", "IMPORT_COMPLETE", "UPDATE_ROLLBACK_COMPLETE",
                     "IMPORT_ROLLBACK_COMPLETE"})
ADVICE = {
    # A deployment with --no-rollback stopped on a failure (the CLI's "paused fail state": it rolls
    # back first, START_ROLLBACK).
    # RollbackStack "will delete a stack if it doesn't contain a last known stable state" unless
    # told to retain (API Reference); the CLI passes RetainExceptOnCreate, and so does this advice.
    "CREATE_FAILED": "a deployment without rollback stopped on a failure; roll it back (aws cloudformation "
                     "rollback-stack --region {region} --stack-name {stack} --retain-except-on-create), then run again",
    "UPDATE_FAILED": "an update without rollback stopped on a failure; roll it back (aws cloudformation "
                     "rollback-stack --region {region} --stack-name {stack} --retain-except-on-create), then run again",
    # "Continue rolling back an update": ContinueUpdateRollback, skipping the resources that cannot
    # roll back once they are fixed or known to be safe to skip; the CLI does the same
    # (CONTINUE_UPDATE_ROLLBACK).
    "UPDATE_ROLLBACK_FAILED": "the rollback of an update failed; fix the resource its events name, then continue "
                              "the rollback (aws cloudformation continue-update-rollback --region {region} --stack-name {stack}; "
                              "--resources-to-skip LOGICAL_ID skips one that cannot roll back), then run again. "
                              "Do not delete the stack: it holds the environment's resources",
    "DELETE_FAILED": "someone began deleting it and the deletion failed; telemetry deploy does not delete or "
                     "re-create a stack that holds data: finish or undo that decision in the console (its "
                     "events name the resource that blocked it), then run again",
    "IMPORT_ROLLBACK_FAILED": "an import failed and its rollback too; fix the resources its events name in the "
                              "console, then run again",
}
WAIT_POLL_S, WAIT_LIMIT_S = 15.0, 3600.0


def wait_while(
    read: Callable[[], Any], busy: Callable[[Any], bool], *, say: Say, sleep: Callable[[float], None],
    poll_s: float, limit_s: float, waiting: Callable[[Any], str], still: Callable[[Any, str], str],
) -> Any:  # fmt: skip
    """read() every poll_s while busy(answer), saying waiting(answer) once; past limit_s,
    OperationFailed(still(answer, minutes waited)). The answer that is no longer busy."""
    waited, answer = 0.0, read()
    while busy(answer):
        if waited >= limit_s:
            raise OperationFailed(still(answer, f"{waited / 60:.0f}"))
        if waited == 0:
            say(waiting(answer))
        sleep(poll_s)
        waited += poll_s
        answer = read()
    return answer


def differs(deployed: Any, synthesized: dict) -> bool:
    """The deployed template (GetTemplate, Original stage: botocore hands a JSON template back as
    a dict) is not the synthesized one."""
    import json

    if isinstance(deployed, str):
        # The CLI sends the template as YAML when no asset URL carries it (deploy-stack.ts,
        # makeBodyParameter); CloudFormation's short forms (!Ref) are not plain YAML.
        import yaml

        try:
            deployed = yaml.safe_load(deployed)
        except yaml.YAMLError:
            return True
    return json.loads(json.dumps(deployed)) != synthesized


@dataclass
class Stacks:
    """Every stack, in dependency order, from the app synthesized now by the CDK CLI into
    `cdk_out` (so a change to cdk.json or the code is what gets deployed), then deployed from that
    assembly one stack at a time."""

    config: Any
    session: Any
    runner: Runner
    say: Say
    cdk_out: Path  # where the CDK CLI synthesizes and deploys from: cdk.out/<env>, or --cdk-out
    yes: bool = False  # apply a change to a production stack without asking
    confirm: Callable[[str], bool] | None = None  # asks the operator; the terminal by default
    sleep: Callable[[float], None] = time.sleep
    name: str = "deploy"
    _assembly: list[Any] | None = field(default=None, repr=False)
    _cfn: Any = field(default=None, repr=False)

    @property
    def cloudformation(self) -> Any:
        if self._cfn is None:
            self._cfn = self.session.client("cloudformation")
        return self._cfn

    def assembly(self) -> list[Any]:
        """The environment's stacks synthesized now, in dependency order (once per run)."""
        if self._assembly is None:
            from telemetry.shared import cdk_cli
            from telemetry.shared.cloud_assembly import (
                environment_folder,
                in_dependency_order,
                read_cloud_assembly,
                record_synthesis,
                synthesis_inputs_digest,
            )

            self.say(f"  synthesizing {self.config.name} into {self.cdk_out} (the CDK CLI, a few minutes)")
            digest = synthesis_inputs_digest()
            code = self.runner(cdk_cli.command("synth", "-c", f"env={self.config.name}", "--output", str(self.cdk_out),
                                               "--quiet"))
            if code != 0:
                raise OperationFailed(f"cdk synth exited {code} (its output is above)")
            if self.cdk_out == environment_folder(self.config.name):
                record_synthesis(self.cdk_out, digest)  # the plans of the offline commands read it from now on
            self._assembly = in_dependency_order(read_cloud_assembly(self.cdk_out, self.config.stack_prefix))
            if not self._assembly:
                raise OperationFailed(f"cdk synth wrote no stacks of {self.config.name} into {self.cdk_out}")
        return self._assembly

    def _describe(self, name: str) -> dict:
        """DescribeStacks' stack, {} when there is no such stack."""
        try:
            (stack,) = self.cloudformation.describe_stacks(StackName=name)["Stacks"]
        except self.cloudformation.exceptions.ClientError as error:
            if "does not exist" in str(error):
                return {}
            raise
        return stack

    def _settled(self, name: str) -> dict:
        """DescribeStacks' stack once no operation runs on it (waits, saying so, up to WAIT_LIMIT_S)."""

        def busy(stack: dict) -> bool:
            status = stack.get("StackStatus", "")
            return status.endswith("_IN_PROGRESS") and status != "REVIEW_IN_PROGRESS"

        return wait_while(
            lambda: self._describe(name), busy, say=self.say, sleep=self.sleep, poll_s=WAIT_POLL_S, limit_s=WAIT_LIMIT_S,
            waiting=lambda stack: f"  {name}: {stack['StackStatus']}, waiting for it to settle",
            still=lambda stack, minutes: f"stack {name} is still {stack['StackStatus']} after {minutes} minutes; run "
            "again once it settles",
        )  # fmt: skip

    def _changed(self, stack: Any) -> bool:
        deployed = self.cloudformation.get_template(StackName=stack.name, TemplateStage="Original")["TemplateBody"]
        return differs(deployed, stack.template)

    def _reasons(self, stack: Any, deployed: dict) -> list[str]:
        """Why `cdk deploy` would deploy this settled stack (DescribeStacks' `deployed`), [] when it
        would skip it. canSkipDeploy (toolkit-lib api/deployments/deploy-stack.ts, aws-cdk 2.1148.1)
        deploys when any of these holds:
          --force; --no-execute; an existing change set executed; --revert-drift: options this step
            never passes (_deploy);
          no stack: CREATE, before this;
          the template differs: below;
          the tags differ (compareTags: the same keys with the same values), the stack's being the
            manifest's `tags` (tagsForStack) as no --tags is passed: below;
          the notification ARNs differ (arrayEquals): --notification-arns, never passed, and the
            manifest's `notificationArns`: below;
          the rollback configuration differs: only compared when --rollback-configuration is
            passed, which it never is;
          termination protection differs from the manifest's `terminationProtection`: below;
          a parameter changed (ParameterValues.hasChanges, api/deployments/cfn-api.ts): "ssm" for
            any AWS::SSM::Parameter::Value<...> parameter not marked [cdk:skip], which may resolve
            anew (below); else a value differs, which without --parameters and with
            --previous-parameters (the default) only a changed template brings;
          the status is *FAILED: ADVICE, before this;
          the template differs from the one a hotswap deployment left (a cache in the assembly):
            this step never hotswaps, and synthesizes the assembly it deploys.
        """
        reasons = []
        if self._changed(stack):
            reasons.append("its template changed")
        if {t["Key"]: t["Value"] for t in deployed.get("Tags", [])} != stack.tags:
            reasons.append("its tags changed")
        if set(deployed.get("NotificationARNs", [])) != set(stack.notification_arns):
            reasons.append("its notification ARNs changed")
        if bool(deployed.get("EnableTerminationProtection")) != stack.termination_protection:
            reasons.append("its termination protection changed")
        parameters = stack.ssm_parameters()
        if parameters:
            # What they resolve to now is known to CloudFormation alone: the CLI deploys, and a
            # change set that changes nothing is deleted, not executed (changeSetDeployment).
            reasons.append(f"it reads {len(parameters)} SSM parameter(s), which may resolve anew ("
                           + ", ".join(str(stack.template["Parameters"][p].get("Default", p)) for p in parameters) + ")")
        return reasons

    def done(self) -> str:
        stacks = self.assembly()
        for stack in stacks:
            deployed = self._describe(stack.name)
            # A stack rolled back to what is synthesized now has nothing to do: the CLI itself
            # skips it (_reasons).
            if deployed.get("StackStatus", "") not in SETTLED or self._reasons(stack, deployed):
                return ""
        return f"all {len(stacks)} stacks deployed as synthesized"

    def run(self) -> None:
        for stack in self.assembly():
            deployed = self._settled(stack.name)
            status, reason = deployed.get("StackStatus", ""), deployed.get("StackStatusReason", "")
            if status in ADVICE:
                because = f" ({reason})" if reason else ""
                raise OperationFailed(f"stack {stack.name} is {status}{because}: " + ADVICE[status].format(
                    stack=stack.name, region=self.config.region))
            if status in SETTLED:
                reasons = self._reasons(stack, deployed)
                if not reasons:
                    self.say(f"  {stack.name}: {status}, as synthesized")
                    continue
                self.say(f"  {stack.name}: {status}, updating ({'; '.join(reasons)})")
                only_ssm = len(reasons) == 1 and bool(stack.ssm_parameters())
                if self.config.production and not self.yes and not self._approve(stack.name, only_ssm=only_ssm):
                    self.say(f"  {stack.name}: cdk diff shows no change (its SSM parameters resolve as deployed): left "
                             "as it is")
                    continue
            elif status == "ROLLBACK_FAILED" and (left := self._left_protected(stack.name)):
                raise OperationFailed(self._protected_advice(stack.name, reason, left,
                                                             bool(deployed.get("EnableTerminationProtection"))))
            elif status == "ROLLBACK_FAILED" and not deployed.get("EnableTerminationProtection"):
                self.say(f"  {stack.name}: {status}, creating it (the CDK CLI deletes a stack whose creation failed, "
                         "with what its rollback left, then creates it again)")
            elif status in ("ROLLBACK_COMPLETE", "ROLLBACK_FAILED") and deployed.get("EnableTerminationProtection"):
                # The CLI turns protection on before it creates, then deletes a failed creation
                # without turning it off; CloudFormation refuses that deletion ("Protect
                # CloudFormation stacks from being deleted").
                raise OperationFailed(
                    f"stack {stack.name} is {status}{f' ({reason})' if reason else ''}: its creation failed, "
                    "and termination protection stops the CDK CLI from deleting it to create it again. Read its "
                    f"events, then {self._lift_protection(stack.name)} and run again (the CLI deletes it, creates it "
                    "and protects it again)")
            elif status == "ROLLBACK_COMPLETE":
                self.say(f"  {stack.name}: {status}, creating it (the CDK CLI deletes a stack whose creation failed, "
                         "then creates it again)")
            elif status in CREATE:
                self.say(f"  {stack.name}: {status}, creating it" if status else f"  {stack.name}: creating")
            else:  # a status CloudFormation added after this table was written
                raise OperationFailed(f"stack {stack.name} is {status}, which telemetry deploy does not know; see its "
                                      "events in the CloudFormation console")
            self._deploy(stack.name)

    def _left_protected(self, name: str) -> list[str]:
        """The instances a failed creation's rollback could not delete because their API termination
        is disabled (the seeds are: seed_nodes.py), which the CLI's deletion of the stack would meet
        again. The rollback leaves a resource it could not delete as DELETE_FAILED
        (DescribeStackResources); EC2 refuses TerminateInstances while DisableApiTermination is
        set (EC2 User Guide, "Enable termination protection")."""
        ec2, left = self.session.client("ec2"), []
        resources = self.cloudformation.describe_stack_resources(StackName=name)["StackResources"]
        for resource in resources:
            if resource["ResourceType"] != "AWS::EC2::Instance" or resource["ResourceStatus"] == "DELETE_COMPLETE":
                continue
            instance = resource.get("PhysicalResourceId")
            if not instance:
                continue  # never launched
            try:
                protected = ec2.describe_instance_attribute(InstanceId=instance, Attribute="disableApiTermination")
            except ec2.exceptions.ClientError as error:
                if error.response["Error"]["Code"] in ("InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"):
                    continue  # gone already, or not an instance id
                raise
            if protected["DisableApiTermination"]["Value"]:
                left.append(instance)
        return left

    def _lift_protection(self, name: str) -> str:
        """The command that lets the CLI delete a protected stack whose creation failed ("Protect
        CloudFormation stacks from being deleted"), in the environment's region."""
        return (f"aws cloudformation update-termination-protection --no-enable-termination-protection "
                f"--region {self.config.region} --stack-name {name}")

    def _protected_advice(self, name: str, reason: str, instances: list[str], stack_protected: bool) -> str:
        region = self.config.region  # the AWS CLI's own is the operator's default, maybe another
        lifts = [f"aws ec2 modify-instance-attribute --region {region} --instance-id {i} --no-disable-api-termination"
                 for i in instances]
        if stack_protected:
            lifts.append(self._lift_protection(name))
        return (f"stack {name} is ROLLBACK_FAILED{f' ({reason})' if reason else ''}: its creation failed, and its "
                f"rollback could not terminate {', '.join(instances)}, whose API termination is disabled (the seeds "
                "are). They hold nothing yet: allow it (" + "; ".join(lifts) + "), then run again: the CDK CLI "
                "deletes the failed stack with them, creates it again and protects it again")

    def _approve(self, name: str, *, only_ssm: bool = False) -> bool:
        """A production stack's change: the CLI's diff of it, then the operator's yes (a no is
        OperationFailed). False, without asking, when the stack's one reason to deploy is its SSM
        parameters and the diff finds no change: a stack read from SSM would otherwise be asked
        for on every run."""
        from telemetry.shared import cdk_cli

        # --exclusively: `cdk diff NAME` alone also selects the stacks NAME depends on (the CLI's
        # selectTopLevelOrMatchingStacks, ExtendedStackSelection.Upstream), whose differences would
        # then be shown, and fail --fail, under a question about NAME.
        diff = cdk_cli.command("diff", name, "--app", str(self.cdk_out), "--exclusively")
        if only_ssm:
            # The diff's change set is where CloudFormation resolves the parameters, and the CLI
            # adds what it changes to the diff (cloudformation-diff TemplateAndChangeSetDiffMerger.
            # addChangeSetResourcesNotInTemplateDiff); --method change-set fails rather than fall
            # back to comparing templates, which are equal. --fail: exit 1 on a difference
            # (cdk-toolkit.ts diff, diffFails) and on an error too (cli.ts cli): both are asked,
            # the output above says which.
            if self.runner([*diff, "--method", "change-set", "--fail"]) == 0:
                return False
        else:
            # `cdk diff` exits 0 with or without differences (aws-cdk:enableDiffNoFail, true unless
            # set; 1 only with --fail): non-zero is an error.
            code = self.runner(diff)
            if code != 0:
                raise OperationFailed(f"cdk diff {name} exited {code} (its output is above): nothing was applied")
        ask = self.confirm or _ask_terminal
        if not ask(f"apply this change to {name} in {self.config.name}? [y/N] "):
            raise OperationFailed(f"the change to {name} was not applied (telemetry deploy --yes applies it without asking)")
        return True

    def _deploy(self, name: str) -> None:
        from telemetry.shared import cdk_cli

        command = cdk_cli.command("deploy", name, "--app", str(self.cdk_out), "--exclusively", "--require-approval", "never")
        code = self.runner(command)
        if code != 0:
            raise OperationFailed(f"cdk deploy {name} exited {code} (its output is above)")


def _ask_terminal(prompt: str) -> bool:
    import sys

    if not sys.stdin.isatty():
        raise OperationFailed("a production change needs your yes, and there is no terminal to ask on: pass --yes")
    return input(prompt).strip().lower() in ("y", "yes")


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
        from telemetry.commands.topics import brokers_fingerprint
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
        from telemetry.commands.topics import reconcile_on_fleet, record_reconciled
        from telemetry.shared.declared_topics import declared_environment
        from telemetry.registry import command_arguments

        if not self.mfa_serial:
            raise OperationFailed(
                "the topics are reconciled as the topic administrator role, which requires MFA: run "
                f"telemetry deploy --env {self.config.name} --mfa-serial ARN (your MFA device)"
            )
        environment = declared_environment(self.config.name)
        args = command_arguments(("topics",), ["--env", self.config.name, "--mfa-serial", self.mfa_serial])
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
    cdk_out: Path | None = None  # the synthesis the stacks step deployed; None: the environment's own
    name: str = "bootstrap"

    def done(self) -> str:
        """The record `telemetry cluster bootstrap` leaves for this very stack, or else a Success
        of its create-cluster document requested since the stack was created, while Run Command
        still keeps it (a limited time; the console lists 30 days, no API page says)."""
        from telemetry.shared.cluster_inventory import deployed_outputs, service_fabric_stack_name
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
        # Only this document's successes since the stack was created, not every command in the
        # account's history (CommandFilter: DocumentName, Status, InvokedAfter "2021-07-07T00:00:00Z",
        # SSM API Reference). The check below stays: moto's ListCommands ignores filters.
        filters = [{"key": "DocumentName", "value": document}, {"key": "Status", "value": "Success"}]
        if outputs.created is not None:
            since = outputs.created.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            filters.append({"key": "InvokedAfter", "value": since})
        for page in ssm.get_paginator("list_commands").paginate(Filters=filters):
            for command in page["Commands"]:
                if (command["DocumentName"] == document and command["Status"] == "Success"
                        and (outputs.created is None or command["RequestedDateTime"] >= outputs.created)):
                    return f"{document} succeeded, command {command['CommandId']}"
        return ""

    def run(self) -> None:
        from telemetry.commands.cluster.bootstrap import bootstrap
        from telemetry.registry import command_arguments

        args = command_arguments(("cluster", "bootstrap"), ["--env", self.config.name])
        bootstrap(args, lambda region: self.session)  # OperationFailed says why it was not created


@dataclass
class Scale:
    """The scaling node group at its configured size. The stack creates it empty, minimum 0 (no
    node could join before the cluster exists); once the cluster is bootstrapped this sets the
    configured minimum and desired size and waits until the lifecycle automation has joined every
    node: an instance is InService only after the join completed its launch hook (telemetry/commands/cluster/scale.py).
    That holds because the launch hook's DefaultResult is ABANDON (scaling_node_group.py, asserted in
    tests/stacks/test_service_fabric_stack.py): a hook that times out terminates the instance, where
    CONTINUE would put it in service unjoined (EC2 Auto Scaling User Guide, "Lifecycle hooks")."""

    config: Any
    session: Any
    say: Say
    sleep: Callable[[float], None] = time.sleep
    timeout_s: float = 3600.0
    name: str = "scale"

    def _group(self) -> tuple[Any, Any, str]:
        from telemetry.shared.scaling_group import ScalingGroups
        from stacks.naming import scaling_group_name

        groups = ScalingGroups(self.session)
        name = scaling_group_name(self.config)
        return groups, groups.state(name), name

    def done(self) -> str:
        """Sized (its configured minimum, and nodes wanted unless none are configured) and steady at
        whatever size it has now: a later `telemetry cluster scale` or a scaling policy is not undone
        by a rerun."""
        _, state, name = self._group()
        fabric = self.config.service_fabric
        sized = state.min_size == fabric.scaling_min_nodes and (state.desired >= 1 or fabric.scaling_desired_nodes == 0)
        if sized and state.steady_at(state.desired):
            return f"{name}: {state.in_service} node(s) in service"
        return ""

    def run(self) -> None:
        from telemetry.shared.scaling_group import check_request, wait_until_steady

        groups, state, name = self._group()
        fabric = self.config.service_fabric
        # The size someone gave it since, or else the configured one (the stack created it at 0).
        desired = state.desired if state.desired >= 1 else fabric.scaling_desired_nodes
        check_request(state, desired, fabric.scaling_min_nodes)
        if (state.min_size, state.desired) != (fabric.scaling_min_nodes, desired):
            self.say(f"  {name}: minimum {fabric.scaling_min_nodes}, desired {desired}")
            groups.set_size(name, fabric.scaling_min_nodes, desired)
        if not wait_until_steady(groups, name, desired, timeout_s=self.timeout_s, poll_interval_s=15.0,
                                 say=lambda line: self.say(f"  {line}"), sleep=self.sleep):
            raise OperationFailed(f"{name} is not steady at {desired} node(s) after {self.timeout_s / 60:.0f} minutes; "
                                  "the node lifecycle automation may be stuck (its alarms and the group's activity "
                                  "history say where)")


# Managed Flink's ApplicationStatus values (the kinesisanalyticsv2 model's enum) as this step
# reads them. Running: RUNNING; AUTOSCALING ("While Managed Service for Apache Flink is scaling
# your application, it will be in the AUTOSCALING status", Developer Guide, "Automatic scaling");
# MAINTENANCE, which only the enum names: the maintenance page says a running application "will be
# restarted", so it is taken as running (no source says it returns to RUNNING). RUNNING is the
# application's status, not the job's health: a job restarting in a loop stays RUNNING (the sink's
# own alarms watch that). Transitional: waited for, then decided
# again (an UPDATING application may be a READY one being updated). DELETING, ROLLED_BACK: stop
# with what the last operation reported.
FLINK_RUNNING = frozenset({"RUNNING", "AUTOSCALING", "MAINTENANCE"})
FLINK_TRANSITIONAL = frozenset({"STARTING", "UPDATING", "STOPPING", "FORCE_STOPPING", "ROLLING_BACK"})
FLINK_POLL_S, FLINK_LIMIT_S = 15.0, 1800.0


@dataclass
class Flink:
    config: Any
    session: Any
    stacks: Sequence[Any]
    say: Say
    sleep: Callable[[float], None] = time.sleep
    name: str = "flink"

    def _applications(self) -> list[str]:
        found = []
        for stack in self.stacks:
            for resource in stack.resources("AWS::KinesisAnalyticsV2::Application").values():
                found.append(str(resource["Properties"]["ApplicationName"]))
        return found

    @property
    def client(self) -> Any:
        return self.session.client("kinesisanalyticsv2")

    def _status(self, application: str) -> str:
        detail = self.client.describe_application(ApplicationName=application)["ApplicationDetail"]
        return str(detail["ApplicationStatus"])

    def _wait(self, read: Callable[[], str], busy: Callable[[str], bool], waiting: str, still: str) -> str:
        """wait_while() at the Flink step's pace; `waiting` and `still` are formats of {answer}
        and {minutes}."""
        return wait_while(read, busy, say=self.say, sleep=self.sleep, poll_s=FLINK_POLL_S, limit_s=FLINK_LIMIT_S,
                          waiting=lambda answer: waiting.format(answer=answer),
                          still=lambda answer, minutes: still.format(answer=answer, minutes=minutes))

    def _settled(self, application: str, waiting_for: str) -> str:
        return self._wait(lambda: self._status(application), lambda status: status in FLINK_TRANSITIONAL,
                          f"  {application}: {{answer}}, waiting for {waiting_for}",
                          f"Flink application {application} is still {{answer}} after {{minutes}} minutes; run again "
                          "once it settles")

    def done(self) -> str:
        applications = self._applications()
        statuses = {a: self._status(a) for a in applications}
        if applications and all(s in FLINK_RUNNING for s in statuses.values()):
            return ", ".join(f"{a} {s}" for a, s in statuses.items())
        return ""

    def run(self) -> None:
        for application in self._applications():
            status = self._settled(application, "it to settle")
            if status in FLINK_RUNNING:
                self.say(f"  {application}: {status}")
                continue
            if status != "READY":
                raise OperationFailed(f"Flink application {application} is {status}{self._last_failure(application)}; "
                                      "see its operations (aws kinesisanalyticsv2 list-application-operations)")
            # From the latest snapshot if there is one: the first start has none.
            operation = self.client.start_application(
                ApplicationName=application,
                RunConfiguration={"ApplicationRestoreConfiguration": {"ApplicationRestoreType": "RESTORE_FROM_LATEST_SNAPSHOT"}},
            )["OperationId"]
            self.say(f"  {application}: starting (operation {operation})")
            outcome = self._operation_outcome(application, operation)
            status = self._status(application)
            if outcome != "SUCCESSFUL" or status not in FLINK_RUNNING:
                raise OperationFailed(f"Flink application {application} did not start: it is {status}"
                                      f"{self._failure(application, operation)}")
            self.say(f"  {application}: {status}")

    def _operation_outcome(self, application: str, operation: str) -> str:
        """The start operation's end: SUCCESSFUL, FAILED or CANCELLED (DescribeApplicationOperation;
        a failed start leaves the application READY, "Troubleshoot system rollback"). The status
        read right after StartApplication may still be READY, so it is not what is waited on."""
        def read() -> str:
            return str(self.client.describe_application_operation(ApplicationName=application, OperationId=operation)[
                "ApplicationOperationInfoDetails"]["OperationStatus"])

        return self._wait(read, lambda status: status == "IN_PROGRESS", f"  {application}: waiting for the start to end",
                          f"the start of Flink application {application} (operation {operation}) is still in progress "
                          "after {minutes} minutes; run again once it ends")

    def _failure(self, application: str, operation: str) -> str:
        """What the operation's details say went wrong (DescribeApplicationOperation:
        OperationFailureDetails.ErrorInfo.ErrorString), as a clause; "" when it says nothing."""
        details = self.client.describe_application_operation(ApplicationName=application, OperationId=operation)[
            "ApplicationOperationInfoDetails"]
        error = details.get("OperationFailureDetails", {}).get("ErrorInfo", {}).get("ErrorString", "")
        return f" ({details.get('Operation', 'the operation')} {details.get('OperationStatus', '')}: {error})" if error else ""

    def _last_failure(self, application: str) -> str:
        """The newest failed operation's reason (the API documents no order: sorted by StartTime)."""
        failed = self.client.list_application_operations(ApplicationName=application, OperationStatus="FAILED").get(
            "ApplicationOperationInfoList", [])
        if not failed:
            return ""
        newest = max(failed, key=lambda o: o["StartTime"].timestamp() if o.get("StartTime") else 0.0)
        return self._failure(application, newest["OperationId"])


@dataclass
class Smoke:
    config: Any
    session: Any
    say: Say
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    name: str = "smoke"

    def done(self) -> str:
        return ""

    def run(self) -> None:
        from telemetry.commands.devices.provision import ensure_devices

        run_id = _smoke_run_id()
        started = time.time()
        # The MQTT leg's devices first (created here if missing; the fleet's own identities): AWS IoT
        # may take "a few minutes" to honour a policy just attached to a new certificate (Developer
        # Guide, "AWS IoT Core policies"), and the Kafka leg runs meanwhile.
        if ensure_devices(self.config, self.session, SMOKE_MQTT_DEVICES, say=lambda line: self.say(f"  {line}")) != 0:
            raise OperationFailed(f"devices 1-{SMOKE_MQTT_DEVICES} of the simulator fleet could not be provisioned "
                                  "(the lines above say why); telemetry devices provision repairs them")
        acked = {f"{run_id}-kafka": self._leg(f"{run_id}-kafka", "kafka", SMOKE_RATE, devices=100)}
        # One host publishing as those devices through AWS IoT Core and the device gateway's rule.
        acked[f"{run_id}-mqtt"] = self._leg(f"{run_id}-mqtt", "mqtt", SMOKE_MQTT_RATE, devices=SMOKE_MQTT_DEVICES, hosts=1)
        # A leg whose topic the sink does not read cannot come back through it: said, not awaited.
        sink_topic, topics = self.config.telemetry_sink.topic, {
            f"{run_id}-kafka": self.config.simulator_fleet.topic, f"{run_id}-mqtt": self.config.device_gateway.topic}
        for run, topic in topics.items():
            if topic != sink_topic:
                self.say(f"  {run} wrote topic {topic}, which the sink does not read ({sink_topic}): not read back")
                del acked[run]
        if acked:
            self._read_back(acked, since=started - 300.0)
        self.say(f"  cluster: {seeds_up(self.config, self.session, self.say)}")

    def _read_back(self, acked: dict[str, int], *, since: float) -> None:
        """Every acknowledged record of each run (run id -> count) in the sink's smoke/ prefix
        within the bound, or OperationFailed naming the runs short."""
        sink_topic = self.config.telemetry_sink.topic
        bound = smoke_read_back_bound(self.config)
        self.say(f"  waiting up to {bound:.0f} s for their {sum(acked.values()):,} records in the sink's smoke/ prefix")
        stored = SmokeRecords(self.config, self.session, since=since, sleep=self.sleep, clock=self.clock).wait_for(
            acked, bound)
        short = [f"{run}: {stored.get(run, 0):,} of {count:,}" for run, count in acked.items()
                 if stored.get(run, 0) < count]
        if short:
            raise OperationFailed(
                f"the Flink sink did not store every acknowledged smoke record within {bound:.0f} s ({'; '.join(short)}); "
                "see the sink's alarms and dashboard: a job that does not checkpoint commits nothing, and one behind "
                f"on {sink_topic} (its consumer lag) commits them later; for mqtt, the device gateway's failed "
                "deliveries (telemetry devices replay)")
        extra = sum(stored.values()) - sum(acked.values())
        self.say(f"  sink: all {sum(acked.values()):,} records in S3" + (f", and {extra:,} more (duplicates)" if extra else "")
                 + " (smoke/, outside the telemetry table; expires in a day)")

    def _leg(self, run_id: str, transport: str, rate: int, *, devices: int, hosts: int | None = None) -> int:
        """One fleet run of SMOKE_SECONDS; the records it acknowledged, or OperationFailed. It
        checks that messages flow and none is lost, not latency: the latency thresholds are set out
        of reach (telemetry simulate judges latency)."""
        from telemetry.commands.simulate import Fleet, make_plan, run_fleet
        from telemetry.registry import command_arguments

        args = command_arguments(("simulate",), [
            "--env", self.config.name, "--rate", str(rate), "--duration", str(SMOKE_SECONDS), "--run-id", run_id,
            "--devices", str(devices), "--transport", transport, *(["--hosts", str(hosts)] if hosts else []),
            "--slo-min-rate", str(rate * 0.95), "--slo-p99-ms", "60000", "--slo-max-ms", "60000", "--slo-max-lost", "0",
            "--slo-max-delivery-errors", "0"])
        report = run_fleet(make_plan(self.config, args), Fleet(self.session), hosts=hosts, poll_interval_s=10.0,
                           timeout_s=SMOKE_SECONDS + 600, metrics_delay_s=0.0, say=self.say)
        rate_seen, lost = report.get("throughput_msgs_per_s", 0.0), report.get("lost", 0)
        if not report["slo"]["passed"]:
            failed = [c["name"] for c in report["slo"]["checks"] if not c["passed"]]
            raise OperationFailed(f"the smoke run {run_id} failed {', '.join(failed)}: {rate_seen:,.0f} msg/s, {lost} lost")
        self.say(f"  smoke run {run_id}: {rate_seen:,.0f} msg/s over {transport}, nothing lost")
        return int(report.get("acked") or 0)


def smoke_read_back_bound(config: Any) -> float:
    """How long a smoke record may take from the topic to a committed file: the sink commits its
    Parquet files on each completed checkpoint (bulk formats roll on checkpoint, Flink "File Sink"
    documentation), so a record is visible within one checkpoint interval plus that checkpoint's
    own time; two intervals and a margin cover one failed checkpoint."""
    return 2.0 * config.telemetry_sink.checkpoint_interval_seconds + SMOKE_READ_BACK_MARGIN_S


@dataclass
class SmokeRecords:
    """Smoke runs' records as the sink committed them under the bucket's smoke/ prefix: each
    committed part file (Flink's FileSink names them part-<uuid>-<n>.parquet; a part in progress on
    S3 is a multipart upload, not listed, plus temporary objects named _part-..._tmp_<uuid>,
    RecoverableMultiPartUploadImpl) read once, its rows counted per run id with DuckDB."""

    config: Any
    session: Any
    since: float  # epoch seconds; older objects are not read
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    counted: dict[str, dict[str, int]] = field(default_factory=dict)  # part file -> rows per run id
    bucket: str | None = None

    def wait_for(self, expected: dict[str, int], bound_s: float) -> dict[str, int]:
        """Rows per run id of `expected`, once each has its count or the bound has passed."""
        deadline = self.clock() + bound_s
        while True:
            stored = self.count(list(expected))
            if all(stored[run] >= count for run, count in expected.items()) or self.clock() >= deadline:
                return stored
            self.sleep(SMOKE_POLL_S)

    def count(self, runs: list[str]) -> dict[str, int]:
        import datetime
        import tempfile

        from telemetry.shared.cluster_inventory import deployed_outputs
        from stacks.naming import SMOKE_PREFIX

        if self.bucket is None:
            self.bucket = deployed_outputs(self.session.client("cloudformation"),
                                           f"{self.config.stack_prefix}-TelemetrySink").get("TelemetryBucket")
        bucket, s3 = self.bucket, self.session.client("s3")
        since = datetime.datetime.fromtimestamp(self.since, datetime.timezone.utc)
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{SMOKE_PREFIX}/"):
            for item in page.get("Contents", []):
                key, name = item["Key"], item["Key"].rsplit("/", 1)[-1]
                if key in self.counted or not (name.startswith("part-") and name.endswith(".parquet")):
                    continue
                if item["LastModified"] < since:
                    continue
                with tempfile.NamedTemporaryFile(suffix=".parquet") as local:
                    s3.download_fileobj(bucket, key, local)
                    local.flush()
                    self.counted[key] = rows_per_run(Path(local.name), runs)
        return {run: sum(rows.get(run, 0) for rows in self.counted.values()) for run in runs}


def rows_per_run(parquet: Path, runs: list[str]) -> dict[str, int]:
    import duckdb

    with duckdb.connect() as db:
        found = db.execute("SELECT run_id, count(*) FROM read_parquet(?) WHERE list_contains(?, run_id) GROUP BY run_id",
                           [str(parquet), runs]).fetchall()
    return {run: int(count) for run, count in found}


def seeds_up(config: Any, session: Any, say: Say = print) -> str:
    """Every seed node Up, as the seeds list the cluster's nodes over Run Command (telemetry/
    shared/cluster_nodes.py: from inside the VPC, so this machine need not reach the gateway); what it
    found, or OperationFailed naming the seeds that are not."""
    from telemetry.shared.cluster_inventory import deployed_outputs, service_fabric_stack_name
    from telemetry.shared.errors import ToolError
    from telemetry.shared.cluster_nodes import ask_the_seeds, seed_statuses

    outputs = deployed_outputs(session.client("cloudformation"), service_fabric_stack_name(config))
    try:
        seen = ask_the_seeds(session, config, outputs, say=lambda line: say(f"  {line}"))
    except ToolError as error:
        raise OperationFailed(f"cannot ask the seeds for the cluster's nodes: {error}") from None
    if not seen.exists:
        raise OperationFailed(f"no cluster answered the seeds: {seen.why_not()}")
    expected = config.service_fabric.seed_node_count
    seeds, not_up = seed_statuses(seen)
    if not_up or len(seeds) != expected:
        raise OperationFailed(
            f"{len(seeds) - len(not_up)} of {expected} seed nodes are Up"
            + (f" ({', '.join(not_up)})" if not_up else f" ({len(seeds)} listed)")
            + ": see telemetry cluster status"
        )
    return f"{expected} of {expected} seed nodes Up (as {seen.listing.seed} lists them)"


def _smoke_run_id() -> str:
    import datetime

    from stacks.naming import SMOKE_RUN_PREFIX  # the sink files these runs' records beside the lake

    return SMOKE_RUN_PREFIX + datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")


def journey(
    config: Any, session: Any, stacks: Sequence[Any], *, runner: Runner, say: Say, mfa_serial: str | None = None,
    read_code: Callable[[str], str] | None = None, yes: bool = False, cdk_out: Path,
) -> list[Step]:  # fmt: skip
    return [
        Preflight(config, session, say),
        Stacks(config, session, runner, say, cdk_out=cdk_out, yes=yes),
        Topics(config, session, mfa_serial, read_code),
        Bootstrap(config, session, say, cdk_out),
        Scale(config, session, say),
        Flink(config, session, stacks, say),
        Smoke(config, session, say),
    ]
