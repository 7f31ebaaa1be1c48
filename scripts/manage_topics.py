#!/usr/bin/env python3
"""Create or update an environment's Kafka topics as `msk.topics` in cdk.json declares them.

Idempotent: missing topics are created, existing ones get more partitions or a new retention when
the declaration asks for it, and a second run changes nothing. Kafka cannot take partitions away
or change a replication factor in place; such differences are reported, not forced.

It also owns the Kafka ACLs of the cluster's SASL/SCRAM users (the device gateway's rule): MSK
authorizes those users by ACLs alone, and with allow.everyone.if.no.acl.found=false a user without
ACLs may do nothing. The declared ACLs are created, and any other ACL of those users is removed, so
the user holds exactly what the declaration says. IAM identities are untouched: "Apache Kafka
ACLs have no effect on authorization for IAM identities" (MSK Developer Guide, "IAM access
control"), which is also why the topic administrator may manage ACLs over IAM.

Run it from a host inside the VPC that carries the MSK client security group (for example a
simulator fleet host over SSM Session Manager) as the MSK stack's topic administrator role: with
--assume-role (and --mfa-serial: the role requires MFA) it assumes that role from the ambient
credentials and authenticates to MSK with it; the fleet host's own role may not manage topics. The
bootstrap brokers come from the SSM parameter the MSK stack publishes (read with the ambient
credentials), unless --bootstrap-servers names them. Against a local broker: PLAINTEXT, or
SASL_PLAINTEXT as --sasl-username with the password in $SIMULATOR_SASL_PASSWORD.

Exit codes: 0 topics and ACLs match the declaration (or would, with --dry-run); 1 a topic
difference Kafka cannot reconcile remains; 2 bad input, a refused request or an unreachable
cluster.
"""

from __future__ import annotations

import argparse
import getpass
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts.cluster_inventory import ToolError  # noqa: E402
from simulator.authorization import missing_permission  # noqa: E402
from simulator.kafka_config import SASL_PASSWORD_ENV, connection_settings  # noqa: E402

MS_PER_HOUR = 3_600_000


class TopicError(ToolError):
    """A problem worded for the operator: one line, no traceback."""


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int
    retention_ms: int


@dataclass(frozen=True)
class ExistingTopic:
    name: str
    partitions: int
    replication_factor: int
    retention_ms: int | None


@dataclass(frozen=True)
class TopicChange:
    topic: TopicSpec
    action: str  # create | add-partitions | set-retention | unchanged | cannot-reconcile
    detail: str

    @property
    def writes(self) -> bool:
        return self.action in ("create", "add-partitions", "set-retention")


@dataclass(frozen=True, order=True)
class AclSpec:
    """One Kafka ACL. The declared ones are ALLOW from any host on a literal resource name; the
    other fields matter for what is found on the cluster, which may be anything."""

    principal: str  # User:<name>
    resource: str  # topic | group | cluster | transactional_id
    name: str
    operation: str  # Kafka's operation name: WRITE, READ, DESCRIBE, ...
    permission: str = "ALLOW"
    pattern: str = "LITERAL"
    host: str = "*"

    def __str__(self) -> str:
        text = f"{self.principal}: {self.permission.lower()} {self.operation} on {self.resource} {self.name}"
        if self.pattern != "LITERAL":
            text += f" ({self.pattern.lower()})"
        return text if self.host == "*" else f"{text} from {self.host}"


@dataclass(frozen=True)
class AclChange:
    acl: AclSpec
    action: str  # create | remove | unchanged

    @property
    def writes(self) -> bool:
        return self.action != "unchanged"


def plan_acls(declared: Iterable[AclSpec], existing: Iterable[AclSpec]) -> list[AclChange]:
    """Declared ACLs missing from `existing` are created; ACLs of the declared principals that are
    not declared (any other operation, resource, pattern, host or a DENY) are removed."""
    declared, existing = set(declared), set(existing)
    return [
        AclChange(acl, "unchanged" if acl in existing else "create") for acl in sorted(declared)
    ] + [AclChange(acl, "remove") for acl in sorted(existing - declared)]


def plan(specs: Iterable[TopicSpec], existing: Mapping[str, ExistingTopic]) -> list[TopicChange]:
    changes = []
    for spec in specs:
        current = existing.get(spec.name)
        if current is None:
            changes.append(
                TopicChange(
                    spec, "create", f"{spec.partitions} partitions, RF {spec.replication_factor}"
                )
            )
            continue
        if current.replication_factor != spec.replication_factor:
            changes.append(
                TopicChange(
                    spec,
                    "cannot-reconcile",
                    f"replication factor is {current.replication_factor}, declared {spec.replication_factor} "
                    "(needs a partition reassignment)",
                )
            )
        if current.partitions > spec.partitions:
            changes.append(
                TopicChange(
                    spec,
                    "cannot-reconcile",
                    f"has {current.partitions} partitions, declared {spec.partitions} (Kafka cannot remove partitions)",
                )
            )
        elif current.partitions < spec.partitions:
            changes.append(
                TopicChange(
                    spec, "add-partitions", f"{current.partitions} -> {spec.partitions} partitions"
                )
            )
        if current.retention_ms != spec.retention_ms:
            changes.append(
                TopicChange(
                    spec,
                    "set-retention",
                    f"retention.ms {current.retention_ms} -> {spec.retention_ms}",
                )
            )
        if not any(c.topic is spec for c in changes):
            changes.append(
                TopicChange(
                    spec,
                    "unchanged",
                    f"{current.partitions} partitions, RF {current.replication_factor}",
                )
            )
    return changes


def admin_client(settings: dict):
    """An AdminClient, or one line saying why there is none. With MSK IAM the client fetches its
    first token while it is built, so missing credentials show here (as "OAuth token not set")."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    try:
        return AdminClient({**settings, "log_level": 0})
    except KafkaException as error:
        raise TopicError(f"cannot connect to the brokers: {error.args[0].str()}") from None


class KafkaTopics:
    """The AdminClient calls this tool makes, behind one small class."""

    def __init__(self, settings: dict, timeout_s: float) -> None:
        # librdkafka would print every failed connection attempt; this tool reports one line.
        self._admin = admin_client(settings)
        self._timeout = timeout_s

    def describe(self, names: Sequence[str]) -> dict[str, ExistingTopic]:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import ConfigResource, ResourceType

        partitions_of = {}
        for name in names:
            # One topic per Metadata request: Kafka silently leaves out of an all-topics answer
            # what the caller may not describe, but names it with an error when asked for it.
            try:
                topic = self._admin.list_topics(topic=name, timeout=self._timeout).topics[name]
            except KafkaException as error:
                raise TopicError(f"cannot reach the cluster: {error.args[0].str()}") from None
            if topic.error is None:
                partitions_of[name] = topic.partitions
            elif topic.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise TopicError(
                    f"describe {name} failed: {missing_permission(topic.error, 'describe', topic=name)}"
                )
        present = list(partitions_of)
        retention = {}
        if present:
            resources = [ConfigResource(ResourceType.TOPIC, n) for n in present]
            for resource, future in self._admin.describe_configs(
                resources, request_timeout=self._timeout
            ).items():
                try:
                    entry = future.result().get("retention.ms")
                except KafkaException as error:
                    reason = missing_permission(error.args[0], "describe-configs", topic=resource.name)
                    raise TopicError(f"describe configuration of {resource.name} failed: {reason}") from None
                retention[resource.name] = (
                    int(entry.value) if entry and entry.value is not None else None
                )
        topics = {}
        for name in present:
            partitions = partitions_of[name]
            replicas = {len(p.replicas) for p in partitions.values()}
            topics[name] = ExistingTopic(
                name, len(partitions), max(replicas, default=0), retention[name]
            )
        return topics

    def apply(self, change: TopicChange) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import (
            AlterConfigOpType,
            ConfigEntry,
            ConfigResource,
            NewPartitions,
            NewTopic,
            ResourceType,
        )

        spec = change.topic
        if change.action == "create":
            futures = self._admin.create_topics(
                [
                    NewTopic(
                        spec.name,
                        spec.partitions,
                        spec.replication_factor,
                        config={"retention.ms": str(spec.retention_ms)},
                    )
                ],
                request_timeout=self._timeout,
            )
        elif change.action == "add-partitions":
            futures = self._admin.create_partitions(
                [NewPartitions(spec.name, spec.partitions)], request_timeout=self._timeout
            )
        elif change.action == "set-retention":
            entry = ConfigEntry(
                "retention.ms", str(spec.retention_ms), incremental_operation=AlterConfigOpType.SET
            )
            futures = self._admin.incremental_alter_configs(
                [ConfigResource(ResourceType.TOPIC, spec.name, incremental_configs=[entry])],
                request_timeout=self._timeout,
            )
        else:
            return
        for future in futures.values():
            try:
                future.result()
            except KafkaException as error:
                reason = missing_permission(error.args[0], change.action, topic=spec.name)
                raise TopicError(f"{change.action} {spec.name} failed: {reason}") from None


class NoAuthorizer(Exception):
    """The cluster enforces no ACLs (a local broker without an authorizer)."""


class KafkaAcls:
    """DescribeAcls, CreateAcls and DeleteAcls for a set of principals, behind one small class."""

    def __init__(self, admin_settings: dict, timeout_s: float) -> None:
        self._admin = admin_client(admin_settings)
        self._timeout = timeout_s

    def describe(self, principals: Iterable[str]) -> list[AclSpec]:
        """Every ACL of `principals`, whatever its permission, pattern type and host.

        An empty answer is ambiguous: librdkafka drops DescribeAcls' error code, so a refused
        request (no DESCRIBE on the cluster) and a broker without an authorizer both come back as
        an empty list, no error (seen here with confluent-kafka 2.16.1, where Kafka's own
        AclCommand gets ClusterAuthorizationException from the same broker). confirm() is what
        tells those apart from "no ACLs"."""
        from confluent_kafka import KafkaException

        found = []
        for principal in sorted(set(principals)):
            try:
                bindings = self._admin.describe_acls(
                    everything_of(principal), request_timeout=self._timeout
                ).result()
            except KafkaException as error:
                reason = missing_permission(error.args[0], "describe-acls")
                raise TopicError(f"describe ACLs of {principal} failed: {reason}") from None
            found += [_acl_spec(binding) for binding in bindings]
        return found

    def apply(self, change: AclChange) -> None:
        from confluent_kafka import KafkaError, KafkaException

        try:
            if change.action == "create":
                futures = self._admin.create_acls([_acl_binding(change.acl)], request_timeout=self._timeout)
            elif change.action == "remove":
                match = _acl_binding(change.acl, as_filter=True)
                futures = self._admin.delete_acls([match], request_timeout=self._timeout)
            else:
                return
            for future in futures.values():
                future.result()
        except KafkaException as error:
            if error.args[0].code() == KafkaError.SECURITY_DISABLED:
                raise NoAuthorizer from None
            reason = missing_permission(error.args[0], f"{change.action}-acl")
            raise TopicError(f"{change.action} ACL {change.acl} failed: {reason}") from None

    def confirm(self, declared: Sequence[AclSpec], settle_s: float) -> None:
        """Waits until the cluster lists exactly the declared ACLs of their principals. A broker
        serves ACL changes from its metadata a moment after the controller accepted them; a
        listing that never shows them means DescribeAcls is refused (see describe())."""
        import time

        deadline = time.monotonic() + settle_s
        while sorted(self.describe(acl.principal for acl in declared)) != sorted(set(declared)):
            if time.monotonic() > deadline:
                raise TopicError(
                    f"the cluster does not list exactly the declared ACLs after {settle_s:g} s; "
                    "DescribeAcls may be refused: the identity needs kafka-cluster:DescribeCluster "
                    "on the cluster"
                )
            time.sleep(0.2)


def everything_of(principal: str):
    """The AclBindingFilter that matches every ACL of `principal`."""
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    return AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, principal, None,
        AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip


def _acl_spec(binding) -> AclSpec:
    return AclSpec(
        binding.principal, binding.restype.name.lower(), binding.name, binding.operation.name,
        binding.permission_type.name, binding.resource_pattern_type.name, binding.host,
    )  # fmt: skip


def _acl_binding(acl: AclSpec, *, as_filter: bool = False):
    """The AclBinding of `acl`, or the AclBindingFilter that matches it alone (DeleteAcls)."""
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    return (AclBindingFilter if as_filter else AclBinding)(
        ResourceType[acl.resource.upper()], acl.name, ResourcePatternType[acl.pattern], acl.principal,
        acl.host, AclOperation[acl.operation], AclPermissionType[acl.permission],
    )  # fmt: skip


def reconcile_acls(
    kafka: KafkaAcls, declared: Sequence[AclSpec], *, dry_run: bool, out=sys.stdout, settle_s: float = 15.0
) -> None:
    if not declared:
        return
    changes = plan_acls(declared, kafka.describe(acl.principal for acl in declared))
    for change in changes:
        verb = f"would {change.action}" if dry_run and change.writes else change.action
        if change.writes and not dry_run:
            try:
                kafka.apply(change)
            except NoAuthorizer:
                print(f"acl {change.acl}: skipped: the cluster enforces no ACLs", file=out, flush=True)
                return
        print(f"acl {change.acl}: {verb}", file=out, flush=True)
    if not dry_run:
        kafka.confirm(declared, settle_s)


def reconcile(
    kafka: KafkaTopics, specs: Sequence[TopicSpec], *, dry_run: bool, out=sys.stdout
) -> int:
    changes = plan(specs, kafka.describe([s.name for s in specs]))
    for change in changes:
        verb = f"would {change.action}" if dry_run and change.writes else change.action
        print(f"{change.topic.name}: {verb}: {change.detail}", file=out, flush=True)
        if change.writes and not dry_run:
            kafka.apply(change)
    unreconciled = [c for c in changes if c.action == "cannot-reconcile"]
    return 1 if unreconciled else 0


@dataclass(frozen=True)
class Environment:
    topics: list[TopicSpec]
    region: str
    account: str
    bootstrap_parameter: str  # SSM parameter with the IAM bootstrap brokers
    topic_admin_role: str  # role name; its ARN is the MSK stack's TopicAdministratorRoleArn
    acls: list[AclSpec]  # exactly what the SASL/SCRAM users may do
    reconciled_parameter: str = ""  # SSM parameter recording the last reconcile with nothing left


def declared_environment(environment: str) -> Environment:
    from stacks.config import ConfigError, load_environment, read_environments
    from stacks.naming import bootstrap_parameter_name, topic_admin_role_name, topics_reconciled_parameter_name

    try:
        config = load_environment(read_environments(), environment)
    except ConfigError as error:
        raise TopicError(str(error)) from None
    specs = [
        TopicSpec(t.name, t.partitions, t.replication_factor, t.retention_hours * MS_PER_HOUR)
        for t in config.msk.topics
    ]
    return Environment(
        specs,
        config.region,
        config.account,
        bootstrap_parameter_name(config),
        topic_admin_role_name(config),
        scram_user_acls(config),
        topics_reconciled_parameter_name(config),
    )


def scram_user_acls(config) -> list[AclSpec]:
    """The device gateway's rule produces with acks=1 and no idempotence (the Kafka action allows
    acks 0 or 1 only, AWS IoT Developer Guide, "Apache Kafka" rule action), so WRITE on its topic
    is all it needs: Kafka's WRITE implies DESCRIBE, which the producer's Metadata requests use
    (IMPLIES_DESCRIBE in Kafka's StandardAuthorizerData). It may not read, create, alter or touch
    any group, and it has no IDEMPOTENT_WRITE on the cluster."""
    gateway = config.device_gateway
    return [AclSpec(f"User:{gateway.scram_username}", "topic", gateway.topic, "WRITE")]


def assume_topic_admin(
    environment: Environment, mfa_serial: str | None, *, read_code=None, sts=None
):
    """Assumes the topic administrator role (one STS call, MFA code read from the terminal);
    returns its temporary credentials as botocore Credentials."""
    import boto3
    from botocore.credentials import Credentials
    from botocore.exceptions import BotoCoreError, ClientError

    session = boto3.Session(region_name=environment.region)
    partition = session.get_partition_for_region(environment.region)
    role_arn = f"arn:{partition}:iam::{environment.account}:role/{environment.topic_admin_role}"
    request = {
        "RoleArn": role_arn,
        "RoleSessionName": re.sub(r"[^\w+=,.@-]", "-", f"manage-topics-{getpass.getuser()}")[:64],
    }
    if mfa_serial:
        code = (read_code or _read_mfa_code)(mfa_serial)
        request.update(SerialNumber=mfa_serial, TokenCode=code)
    try:
        answer = (sts or session.client("sts")).assume_role(**request)["Credentials"]
    except ClientError as error:
        details = error.response["Error"]
        hint = "" if mfa_serial else " (the role requires MFA: pass --mfa-serial)"
        raise TopicError(
            f"cannot assume {role_arn}: {details.get('Code')}: {details.get('Message')}{hint}"
        ) from None
    except BotoCoreError as error:
        raise TopicError(f"cannot assume {role_arn}: {error}") from None
    return Credentials(answer["AccessKeyId"], answer["SecretAccessKey"], answer["SessionToken"])


def _read_mfa_code(mfa_serial: str) -> str:
    print(f"MFA code for {mfa_serial}: ", end="", file=sys.stderr, flush=True)
    code = sys.stdin.readline().strip()
    if not re.fullmatch(r"\d{6}", code):
        raise TopicError("the MFA code is six digits")
    return code


def msk_iam_token_callback(region: str, credentials):
    """librdkafka's OAUTHBEARER callback, signing MSK IAM tokens with `credentials` (the assumed
    role) instead of the ambient ones."""
    from aws_msk_iam_sasl_signer import MSKAuthTokenProvider
    from botocore.credentials import CredentialProvider

    class AssumedRole(CredentialProvider):
        METHOD = "manage-topics-assumed-role"

        def load(self):
            return credentials

    def oauth_cb(_oauth_config: str) -> tuple[str, float]:
        token, expiry_ms = MSKAuthTokenProvider.generate_auth_token_from_credentials_provider(
            region, AssumedRole()
        )
        return token, expiry_ms / 1000.0

    return oauth_cb


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


def _positive_seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {value}")
    return seconds


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-servers", help="HOST:PORT list (default: the MSK stack's SSM parameter)"
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
        help="your MFA device for --assume-role (the role requires MFA); the code is read from "
        "the terminal",
    )
    parser.add_argument(
        "--timeout", type=_positive_seconds, default=30.0, help="seconds per admin request (default 30)"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="show what would change, change nothing"
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Create or update the Kafka topics declared in cdk.json (msk.topics) for one environment, "
        "and the ACLs of its SASL/SCRAM users (device_gateway).",
        epilog="Exit codes: 0 topics match; 1 a difference Kafka cannot reconcile remains; 2 bad input or "
        "an unreachable cluster.",
    )
    parser.add_argument(
        "--env", required=True, help="environment name in cdk.json (dev, staging, prod)"
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    problem = usage_problem(args)
    if problem:
        parser.exit(2, f"{parser.prog}: error: {problem}\n")
    return args


def check_arguments(args: argparse.Namespace) -> None:
    from scripts.telemetry.errors import UsageError

    problem = usage_problem(args)
    if problem:
        raise UsageError(problem)


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
    if args.mfa_serial and not args.assume_role:
        return "--mfa-serial goes with --assume-role"
    return None


def reconciled_parameter_name(config) -> str:
    from stacks.naming import topics_reconciled_parameter_name

    return topics_reconciled_parameter_name(config)


def record_reconciled(environment: Environment, now: Callable[[], str] | None = None) -> None:
    """Tell `telemetry deploy` the topics step is done: the time, in an SSM parameter. With the
    operator's own credentials; a refusal is a note, not a failure of the reconcile."""
    import datetime

    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    stamp = (now or (lambda: datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")))()
    try:
        boto3.client("ssm", region_name=environment.region).put_parameter(
            Name=environment.reconciled_parameter, Value=stamp, Type="String", Overwrite=True
        )
    except (BotoCoreError, ClientError) as error:
        print(f"note: could not record the reconcile in {environment.reconciled_parameter} ({error}); "
              "telemetry deploy will ask for this step again")
        return
    print(f"recorded in {environment.reconciled_parameter}: {stamp}")


def require_credentials(region: str) -> None:
    """MSK IAM signs every connection with AWS credentials: without any, say so before librdkafka
    waits ten seconds for a token."""
    import boto3

    if boto3.Session(region_name=region).get_credentials() is None:
        raise TopicError(
            "no AWS credentials: MSK IAM authentication signs with them; on a fleet host the instance "
            "role provides them, elsewhere pass --profile or set the AWS variables"
        )


def run(args: argparse.Namespace, session_factory: object = None) -> int:
    """Reconcile; a problem is raised as TopicError, worded for the operator."""
    environment = declared_environment(args.env)
    if args.security_protocol == "SASL_SSL":
        require_credentials(environment.region)
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
    status = reconcile(
        KafkaTopics(settings, args.timeout), environment.topics, dry_run=args.dry_run
    )
    reconcile_acls(KafkaAcls(settings, args.timeout), environment.acls, dry_run=args.dry_run)
    if status == 0 and not args.dry_run and args.security_protocol == "SASL_SSL":  # MSK, not a local broker
        record_reconciled(environment)
    return status


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return run(parse_args(argv))
    except TopicError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
