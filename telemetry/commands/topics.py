"""`telemetry topics`: create or update an environment's Kafka topics as `msk.topics` in cdk.json declares them.

Idempotent: missing topics are created, existing ones get more partitions or a new retention when
the declaration asks for it, and a second run changes nothing. Kafka cannot take partitions away
or change a replication factor in place; such differences are reported, not forced.

It also owns the Kafka ACLs of the cluster's SASL/SCRAM users (the device gateway's rule): MSK
authorizes those users by ACLs alone, and with allow.everyone.if.no.acl.found=false a user without
ACLs may do nothing. The declared ACLs are created, and any other ACL of those users is removed, so
the user holds exactly what the declaration says. IAM identities are untouched: "Apache Kafka
ACLs have no effect on authorization for IAM identities" (MSK Developer Guide, "IAM access
control"), which is also why the topic administrator may manage ACLs over IAM.

Where the Kafka work runs. By default on a simulator fleet host, from anywhere that reaches the
AWS APIs: the operator's credentials assume the MSK stack's topic administrator role (with MFA,
--mfa-serial), sign one MSK IAM token with it, leave the token in a SecureString parameter for the
host and send the fleet's `<prefix>-manage-topics` Run Command document to one running host, which
reconciles with simulator/topic_admin.py and the token; the output is printed here and the token
parameter deleted. The fleet host's own role may not manage topics.

With --here it runs on this machine instead: a host inside the VPC with the MSK client security
group (as the topic administrator with --assume-role), or a local broker named by
--bootstrap-servers: PLAINTEXT, or SASL_PLAINTEXT as --sasl-username with the password in
$SIMULATOR_SASL_PASSWORD.

--dry-run plans offline from cdk.json: the declared topics and ACLs, where the work would run,
and what a run reads first (the fleet's hosts, the role, the brokers, then the topics and ACLs the
cluster has, which decide what is created or changed). Only against a broker named on the command
line with a local broker's protocol (--bootstrap-servers with PLAINTEXT or SASL_PLAINTEXT: no AWS
in the way) does it read that broker and list the differences.

Exit codes: 0 topics and ACLs match the declaration (or would, with --dry-run); 1 a topic
difference Kafka cannot reconcile remains; 2 bad input, a refused request or an unreachable
cluster.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import signal
import sys
import threading
from collections.abc import Callable

from simulator.kafka_config import SASL_PASSWORD_ENV, connection_settings
from simulator.topic_admin import (  # noqa: F401  (the Kafka side, re-exported for callers)
    AclChange,
    AclSpec,
    Declaration,
    ExistingTopic,
    KafkaAcls,
    KafkaTopics,
    NoAuthorizer,
    TopicChange,
    TopicError,
    TopicSpec,
    _acl_binding,
    everything_of,
    plan,
    plan_acls,
    positive_seconds,
    reconcile,
    reconcile_acls,
    reconcile_declaration,
)
from telemetry.shared.cluster_inventory import RUN_COMMAND_UNFINISHED
from telemetry.shared.declared_topics import Environment, assume_topic_admin, declared_environment
from telemetry.shared.run_command_output import cloudwatch_output, invocation, reason, whole_output

TOPICS_STEP = "manageTopics"  # the document's one step (stacks/documents/manage_topics.yaml)
OUTPUT_FIELDS = {"stdout": "StandardOutputContent", "stderr": "StandardErrorContent"}


def msk_iam_token(region: str, credentials) -> tuple[str, float]:
    """An MSK IAM token signed with `credentials` (the assumed role) instead of the ambient ones,
    and when it expires (epoch seconds)."""
    from aws_msk_iam_sasl_signer import MSKAuthTokenProvider
    from botocore.credentials import CredentialProvider

    class AssumedRole(CredentialProvider):
        METHOD = "manage-topics-assumed-role"

        def load(self):
            return credentials

    token, expiry_ms = MSKAuthTokenProvider.generate_auth_token_from_credentials_provider(region, AssumedRole())
    return token, expiry_ms / 1000.0


def msk_iam_token_callback(region: str, credentials):
    """librdkafka's OAUTHBEARER callback, signing a fresh token each time it is asked."""

    def oauth_cb(_oauth_config: str) -> tuple[str, float]:
        return msk_iam_token(region, credentials)

    return oauth_cb


# SendCommand's own limit (TimeoutSeconds, the time to start) and the document's step limit bound a
# command; the host's token lasts 15 minutes whatever happens.
COMMAND_START_TIMEOUT_S = 120
COMMAND_STEP_TIMEOUT_S = 900
TOKEN_SESSION_S = 900  # STS's shortest role session: the token cannot outlive it
PROGRESS_EVERY_S = 15.0  # a line while the host works, at least this often


def fleet_host(ec2, fleet: str, ssm) -> str:
    """One running host of the simulator fleet whose SSM Agent is Online (the first by id, so
    reruns use the same one while it stays reachable; telemetry/shared/ssm_hosts.py)."""
    from telemetry.shared.ssm_hosts import reachable, running_fleet_hosts
    from stacks.naming import FLEET_TAG

    hosts = running_fleet_hosts(ec2, fleet)
    if not hosts:
        raise TopicError(
            f"no running host in simulator fleet {fleet}: deploy the SimulatorFleet stack (telemetry deploy), "
            "or run with --here on a host in the VPC"
        )
    online, others = reachable(ssm, hosts, FLEET_TAG, fleet)
    if not online:
        raise TopicError(
            f"no host of simulator fleet {fleet} has its SSM Agent Online ({', '.join(others)}): Run Command "
            "cannot reach them; replace them (terminate one: the fleet's group starts another) or run with --here"
        )
    return online[0]


# The fleet documents' exit code for a host that could not install the simulator package
# (stacks/documents/install_simulator.sh), and the reconcile's for a difference Kafka cannot make.
EXIT_INSTALL_FAILED = 3
EXIT_CANNOT_RECONCILE = 1


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP while a token is out: handled as Ctrl-C is, so it is deleted."""


@contextlib.contextmanager
def signals_as_interrupts():
    """SIGTERM and SIGHUP raise Terminated in the main thread while this holds (Python's default
    for them ends the process at once, skipping every finally)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(number, _frame):
        raise Terminated(signal.Signals(number).name)

    previous = {number: signal.signal(number, interrupt) for number in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def reconcile_on_fleet(
    environment: Environment, args: argparse.Namespace, session, *, read_code=None,
    poll_s: float = 2.0, clock=None, sleep=None, out=sys.stdout, run_id: str | None = None,
) -> int:  # fmt: skip
    """The reconcile, run on a fleet host through Run Command, its output printed here when it ends.

    The topic administrator's token reaches the host through a SecureString parameter of this run
    alone (<token path>/<run>), which exists only while the command runs: it is deleted on every
    way out, Ctrl-C, SIGTERM and SIGHUP included, and a command interrupted is cancelled."""
    import time
    import uuid

    clock, sleep = clock or time.monotonic, sleep or time.sleep
    ssm = session.client("ssm")
    host = fleet_host(session.client("ec2"), environment.fleet, ssm)
    parameter = f"{environment.token_parameter}/{run_id or uuid.uuid4().hex}"
    with signals_as_interrupts():
        # The host installs first (minutes, the first time): the role's 15-minute session and the
        # token signed with it then last for the Kafka work alone.
        def on_host(parameters: dict, comment: str, doing: str) -> dict:
            """The document sent to the host and followed to its end; cancelled if interrupted."""
            command_id = ""
            try:
                # $LATEST: the version the stack deployed last, whether or not its update made it
                # the default (cloudformation-coverage-roadmap#2539: NewVersion reported complete
                # without promoting it); the stack owns this document.
                command_id = ssm.send_command(
                    DocumentName=environment.topics_document, DocumentVersion="$LATEST", InstanceIds=[host],
                    Parameters=parameters, TimeoutSeconds=COMMAND_START_TIMEOUT_S, Comment=comment,
                    CloudWatchOutputConfig=cloudwatch_output(environment.command_log_group),
                )["Command"]["CommandId"]  # fmt: skip
                print(f"{doing} on fleet host {host} (Run Command {command_id})", file=out, flush=True)

                def output(result: dict, which: str) -> str:
                    return whole_output(lambda: session.client("logs"), environment.command_log_group, command_id,
                                        host, TOPICS_STEP, which, result.get(OUTPUT_FIELDS[which]) or "",
                                        sleep=sleep, clock=clock)

                return _follow(ssm, command_id, host, poll_s=poll_s, clock=clock, sleep=sleep, out=out, output=output)
            except BaseException:
                if command_id:
                    _cancel(ssm, command_id, host, out)
                raise

        installed = on_host({"installOnly": ["true"]}, "telemetry topics: install", "installing")
        if installed["Status"] != "Success":
            _fail(installed, host, "the install", out)
        credentials = assume_topic_admin(
            environment, args.mfa_serial, read_code=read_code, session=session, duration_s=TOKEN_SESSION_S
        )
        try:
            token, _expiry = msk_iam_token(environment.region, credentials)
            # Intelligent-Tiering: standard (4 KB) when the token fits, advanced (8 KB) when a long
            # STS session token makes it larger (SSM User Guide, "Managing parameter tiers").
            ssm.put_parameter(
                Name=parameter, Value=token, Type="SecureString", KeyId=environment.token_key, Tier="Intelligent-Tiering",
                Description="telemetry topics: the topic administrator's MSK IAM token, deleted when the command ends",
            )  # fmt: skip
            result = on_host({
                "declaration": [Declaration(environment.topics, environment.acls).text()],
                "dryRun": ["true" if args.dry_run else "false"],
                "timeoutSeconds": [str(max(1, round(args.timeout)))],
                "tokenParameter": [parameter],
            }, "telemetry topics" + (" --dry-run" if args.dry_run else ""), "reconciling")
        finally:
            _delete_token(ssm, parameter, out)
    status, code = result["Status"], result.get("ResponseCode", -1)
    if status == "Success":
        return 0
    if status == "Failed" and code == EXIT_CANNOT_RECONCILE:
        return 1  # a difference Kafka cannot reconcile, printed above
    _fail(result, host, "the reconcile", out)


def _fail(result: dict, host: str, what: str, out):
    """A Run Command invocation that did not succeed: its whole stderr printed (read back from
    CloudWatch Logs by _follow), then one line, its last."""
    status, code = result["Status"], result.get("ResponseCode", -1)
    errors = result.get("WholeStandardError", "")
    if errors.strip():
        print(f"stderr of {what} on {host}:\n{errors.rstrip()}", file=out, flush=True)
    why = reason(errors) or result.get("StatusDetails", status)
    if status == "Failed" and code == EXIT_INSTALL_FAILED:
        raise TopicError(f"fleet host {host} could not install the simulator package: {why}")
    raise TopicError(f"{what} on {host} ended {status} (exit {code}): {why}")


def _cancel(ssm, command_id: str, host: str, out) -> None:
    """CancelCommand: a request the agent honours if the command has not ended (SSM API Reference)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        ssm.cancel_command(CommandId=command_id, InstanceIds=[host])
        print(f"cancelled Run Command {command_id} on {host}", file=out, flush=True)
    except (BotoCoreError, ClientError) as error:
        print(f"warning: could not cancel Run Command {command_id} ({error}): aws ssm cancel-command "
              f"--command-id {command_id}", file=out, flush=True)


def _follow(ssm, command_id: str, host: str, *, poll_s: float, clock, sleep, out, output=None) -> dict:
    """Polls the invocation until it ends, saying so while it waits, then prints its whole stdout
    (`output(result, "stdout"|"stderr")`: from CloudWatch Logs) and keeps its whole stderr in the
    result as WholeStandardError.

    GetCommandInvocation gives no output while a command runs: StandardOutputContent is "the
    first 24,000 characters written by the plugin to stdout. If the command hasn't finished
    running, if ExecutionStatus is neither Succeeded nor Failed, then this string is empty" (SSM
    API Reference, GetCommandInvocation)."""
    output = output or (lambda result, which: result.get(OUTPUT_FIELDS[which]) or "")
    started = clock()
    deadline = started + COMMAND_START_TIMEOUT_S + COMMAND_STEP_TIMEOUT_S
    said, said_at = "", started
    while True:
        result = invocation(ssm, command_id, host)
        status = result["Status"]
        if status not in RUN_COMMAND_UNFINISHED:
            text = output(result, "stdout")
            print(text, end="" if text.endswith("\n") or not text else "\n", file=out, flush=True)
            return {**result, "WholeStandardError": output(result, "stderr") if status != "Success" else ""}
        now = clock()
        if now > deadline:
            raise TopicError(f"Run Command {command_id} on {host} has not ended after {now - started:.0f} s")
        if status != said or now - said_at >= PROGRESS_EVERY_S:
            print(f"  {host}: {status}, {now - started:.0f} s", file=out, flush=True)
            said, said_at = status, now
        sleep(poll_s)


def _delete_token(ssm, name: str, out) -> None:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        ssm.delete_parameter(Name=name)
    except ssm.exceptions.ParameterNotFound:
        pass
    except (BotoCoreError, ClientError) as error:
        print(f"warning: could not delete {name} ({error}); the token in it expires within 15 minutes, "
              f"delete it with: aws ssm delete-parameter --name {name}", file=out, flush=True)


def bootstrap_from_ssm(parameter: str, region: str) -> str:
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return boto3.client("ssm", region_name=region).get_parameter(Name=parameter)["Parameter"][
            "Value"
        ]
    except (BotoCoreError, ClientError) as error:
        raise TopicError(
            f"cannot read the bootstrap brokers from SSM parameter {parameter}: {error}"
        ) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--here",
        action="store_true",
        help="do the Kafka work on this machine (a host in the VPC with the MSK client security group, "
        "or a local broker) instead of on a simulator fleet host over SSM Run Command (the default)",
    )
    parser.add_argument(
        "--bootstrap-servers", help="HOST:PORT list (implies --here; default: the MSK stack's SSM parameter)"
    )
    parser.add_argument(
        "--security-protocol",
        choices=("SASL_SSL", "PLAINTEXT", "SASL_PLAINTEXT"),
        default="SASL_SSL",
        help="SASL_SSL with MSK IAM auth (default); PLAINTEXT or SASL_PLAINTEXT (SASL/PLAIN as "
        f"--sasl-username, password from ${SASL_PASSWORD_ENV}) for a local broker",
    )
    parser.add_argument(
        "--sasl-username",
        metavar="NAME",
        help="SASL/PLAIN user with --security-protocol SASL_PLAINTEXT (local brokers only)",
    )
    parser.add_argument(
        "--assume-role",
        action="store_true",
        help="authenticate to MSK as the MSK stack's topic administrator role (output "
        "TopicAdministratorRoleArn), assumed from the ambient credentials; SASL_SSL only",
    )
    parser.add_argument(
        "--mfa-serial",
        metavar="ARN",
        help="your MFA device (the topic administrator role requires it): needed on a fleet host, and "
        "with --assume-role; the code is read from the terminal",
    )
    parser.add_argument(
        "--timeout", type=positive_seconds, default=30.0, help="seconds per admin request (default 30)"
    )
    parser.add_argument(
        "--dry-run", action="store_true",
        help="offline: the declared topics and ACLs, where a run would do the work and what it would read from the "
        "account and the cluster first; no MFA needed. With --bootstrap-servers and PLAINTEXT or SASL_PLAINTEXT "
        "(a local broker): the differences against that broker. Changes nothing",
    )



def check_arguments(args: argparse.Namespace) -> None:
    from telemetry.shared.errors import UsageError

    problem = usage_problem(args)
    if problem:
        raise UsageError(problem)


def on_fleet(args: argparse.Namespace) -> bool:
    """Where the Kafka work runs: on a fleet host unless told here (or given local brokers)."""
    return not (args.here or args.bootstrap_servers or args.security_protocol != "SASL_SSL")


def usage_problem(args: argparse.Namespace) -> str | None:
    """The one line a bad combination of flags gets, or None."""
    local_sasl = args.security_protocol == "SASL_PLAINTEXT"
    if local_sasl != (args.sasl_username is not None):
        return "--sasl-username goes with --security-protocol SASL_PLAINTEXT, and only"
    if local_sasl and not os.environ.get(SASL_PASSWORD_ENV):
        return f"--security-protocol SASL_PLAINTEXT needs ${SASL_PASSWORD_ENV}"
    if local_sasl and not args.bootstrap_servers:
        return "--security-protocol SASL_PLAINTEXT is for a local broker: name it with --bootstrap-servers"
    if args.assume_role and args.security_protocol != "SASL_SSL":
        return "--assume-role goes with --security-protocol SASL_SSL (MSK IAM), and only"
    if args.mfa_serial and not (args.assume_role or on_fleet(args)):
        return "--mfa-serial goes with --assume-role (or with the default run on a fleet host)"
    if on_fleet(args) and not args.mfa_serial and not args.dry_run:  # a dry run assumes no role
        return (
            "on a fleet host the work runs as the topic administrator role, which requires MFA: pass "
            "--mfa-serial ARN (or --here on a host in the VPC)"
        )
    if on_fleet(args) and args.assume_role:
        return "--assume-role goes with --here: on a fleet host the topic administrator role is always used"
    return None


def brokers_fingerprint(brokers: str) -> str:
    """Which MSK cluster a record is for: its bootstrap brokers' names carry a part unique to each
    cluster, so a cluster deleted and created again has other ones."""
    return "sha256:" + hashlib.sha256(brokers.encode()).hexdigest()[:16]


def record_reconciled(environment: Environment, now: Callable[[], str] | None = None, ssm=None) -> None:
    """Tell `telemetry deploy` the topics step is done for this cluster: the time and the
    fingerprint of the brokers in the bootstrap parameter, in an SSM parameter. With the
    operator's own credentials; a refusal is a note, not a failure of the reconcile."""
    import datetime

    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    stamp = (now or (lambda: datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")))()
    ssm = ssm or boto3.client("ssm", region_name=environment.region)
    try:
        brokers = ssm.get_parameter(Name=environment.bootstrap_parameter)["Parameter"]["Value"]
        value = f"{stamp} brokers {brokers_fingerprint(brokers)}"
        ssm.put_parameter(Name=environment.reconciled_parameter, Value=value, Type="String", Overwrite=True)
    except (BotoCoreError, ClientError) as error:
        print(f"note: could not record the reconcile in {environment.reconciled_parameter} ({error}); "
              "telemetry deploy will ask for this step again")
        return
    print(f"recorded in {environment.reconciled_parameter}: {value}")


def require_credentials(region: str) -> None:
    """MSK IAM signs every connection with AWS credentials: without any, say so before librdkafka
    waits ten seconds for a token."""
    import boto3

    if boto3.Session(region_name=region).get_credentials() is None:
        raise TopicError(
            "no AWS credentials: MSK IAM authentication signs with them; on a fleet host the instance "
            "role provides them, elsewhere pass --profile or set the AWS variables"
        )


def local_broker(args: argparse.Namespace) -> bool:
    """The brokers are named on the command line and reached without AWS (no MSK IAM)."""
    return bool(args.bootstrap_servers) and args.security_protocol != "SASL_SSL"


def offline_plan(args: argparse.Namespace) -> int:
    """--dry-run away from a local broker: the declaration, where it would be reconciled, and what
    a run reads first; offline."""
    from stacks.config import load_environment, read_environments
    from telemetry.shared.output import dry_run_plan

    config = load_environment(read_environments(), args.env)
    environment = declared_environment(args.env)
    reads, changes = [], []
    if on_fleet(args):
        runs_on = (f"a host of simulator fleet {environment.fleet} over SSM Run Command (document "
                   f"{environment.topics_document}), as role {environment.topic_admin_role} (MFA)")
        reads += [f"the running hosts of simulator fleet {environment.fleet} and their SSM Agents (EC2, Systems "
                  "Manager), to pick one",
                  f"role {environment.topic_admin_role}, assumed with your MFA code (STS), to sign an MSK IAM token"]
    else:
        who = f"role {environment.topic_admin_role} (assumed, MFA)" if args.assume_role else "your own credentials"
        runs_on = f"this machine, over MSK IAM as {who}"
    if not args.bootstrap_servers:
        reads.append(f"the brokers from SSM parameter {environment.bootstrap_parameter}" + (
            " (on the host)" if on_fleet(args) else ""))
    reads.append("from the cluster (Kafka's admin API): which declared topics exist, with their partitions, "
                 "replication factor and configuration, and the ACLs of " + ", ".join(
                     sorted({acl.principal for acl in environment.acls})))
    changes += [
        f"topic {topic.name}: create it with {topic.partitions} partitions, replication factor "
        f"{topic.replication_factor}, " + ", ".join(f"{key} {value}" for key, value in topic.configs().items())
        + " if it is missing; else raise its partitions to that and set those configurations where they differ "
        "(fewer partitions or another replication factor are reported, not forced)"
        for topic in environment.topics
    ]
    changes += [f"ACL {acl.principal}: {acl.permission} {acl.operation} on {acl.resource} {acl.name}, created if missing"
                for acl in environment.acls]
    changes.append("every other ACL of " + ", ".join(sorted({acl.principal for acl in environment.acls}))
                   + " removed")
    if on_fleet(args):
        changes.append(f"for the host: the token in a SecureString parameter under {environment.token_parameter}, "
                       "deleted when the command ends")
    changes.append(f"record the reconcile in SSM parameter {environment.reconciled_parameter} (telemetry deploy "
                   "reads it)")
    return dry_run_plan(
        args, config, summary=[f"reconcile the topics and ACLs of {config.name} on {runs_on}"],
        would_read=reads, would_change=changes, runs_on=runs_on,
        topics=[{"name": s.name, "partitions": s.partitions, "replication_factor": s.replication_factor,
                 "configs": s.configs()} for s in environment.topics],
        acls=[{"principal": a.principal, "permission": a.permission, "operation": a.operation,
               "resource": a.resource, "name": a.name} for a in environment.acls],
    )


def run(args: argparse.Namespace, session_factory: Callable[[str], object] | None = None) -> int:
    """Reconcile; a problem is raised as TopicError, worded for the operator."""
    import boto3

    if args.dry_run and not local_broker(args):
        return offline_plan(args)
    environment = declared_environment(args.env)
    if args.security_protocol == "SASL_SSL":
        require_credentials(environment.region)
    if on_fleet(args):
        session = (session_factory or (lambda region: boto3.Session(region_name=region)))(environment.region)
        status = reconcile_on_fleet(environment, args, session)
        if status == 0 and not args.dry_run:
            record_reconciled(environment, ssm=session.client("ssm"))
        return status
    bootstrap = args.bootstrap_servers or bootstrap_from_ssm(
        environment.bootstrap_parameter, environment.region
    )
    settings = connection_settings(
        bootstrap,
        security_protocol=args.security_protocol,
        region=environment.region,
        client_id="manage-topics",
        sasl_username=args.sasl_username,
    )
    if args.assume_role:
        credentials = assume_topic_admin(environment, args.mfa_serial)
        settings["oauth_cb"] = msk_iam_token_callback(environment.region, credentials)
    declaration = Declaration(environment.topics, environment.acls)
    if args.dry_run and getattr(args, "format", "text") == "json":  # a local broker's differences, as data
        import io

        from telemetry.shared.output import document

        lines = io.StringIO()
        status = reconcile_declaration(settings, declaration, timeout_s=args.timeout, dry_run=True, out=lines)
        document({"environment": args.env, "dry_run": True, "brokers": bootstrap,
                  "changes": lines.getvalue().splitlines(), "cannot_reconcile": status == 1})
        return status
    status = reconcile_declaration(settings, declaration, timeout_s=args.timeout, dry_run=args.dry_run)
    if status == 0 and not args.dry_run and args.security_protocol == "SASL_SSL":  # MSK, not a local broker
        record_reconciled(environment)
    return status


if __name__ == "__main__":  # run by path, as before the one front door
    from telemetry.shared.errors import moved

    raise SystemExit(moved("topics"))
