"""The Kafka side of topic administration: compare the declared topics and SCRAM users' ACLs with
the cluster and change the cluster to match. It ships with the simulator because it runs where the
brokers are reachable: on a simulator fleet host, started by the Run Command document
`<prefix>-manage-topics` that `telemetry topics` sends, or in-process by telemetry/commands/topics.py
on a host inside the VPC.

On a fleet host (`python -m simulator.topic_admin`) it is given everything it needs:
- the declaration, as base64 JSON from the operator's workstation (`declaration_text`), so the host
  needs neither cdk.json nor the blueprint's configuration code;
- an MSK IAM token in $MSK_IAM_TOKEN, signed on the workstation as the topic administrator role
  (which requires MFA, so no host can assume it). The token is a presigned, 15-minute
  `kafka-cluster:Connect` request (aws-msk-iam-sasl-signer-python, `__construct_auth_token`);
  the host presents it over SASL/OAUTHBEARER and cannot renew it, which bounds the run.

Exit codes: 0 topics and ACLs match the declaration (or would, with --dry-run); 1 a topic
difference Kafka cannot reconcile remains; 2 bad input, a refused request or an unreachable
cluster.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import calendar
import json
import os
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from urllib.parse import parse_qs, urlparse

from simulator.authorization import missing_permission
from simulator.errors import SimulatorError
from simulator.kafka_config import SASL_PASSWORD_ENV, connection_settings

TOKEN_ENV = "MSK_IAM_TOKEN"

class TopicError(SimulatorError):
    """A problem worded for the operator: one line, no traceback."""


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int
    retention_ms: int
    # The guard that keeps brokers from filling (stacks/sizing.py), per partition: retention.bytes,
    # or local.retention.bytes on a tiered topic; None leaves the topic's as it is.
    retention_bytes: int | None = None
    # Tiered storage (MSK's StorageMode TIERED): what stays on the brokers, and the segment size
    # (only closed segments move to the remote tier). None: the topic is not tiered.
    local_retention_ms: int | None = None
    segment_bytes: int | None = None

    def configs(self) -> dict[str, str]:
        """The topic configurations this tool declares. A tiered topic's guard bounds what stays
        on the brokers (local.retention.bytes), not what the remote tier keeps, so its
        retention.bytes is -1 (Kafka topic configuration: "local.retention.bytes ... The value should
        be less than or equal to retention.bytes", -1 for retention.bytes being no limit)."""
        declared = {"retention.ms": str(self.retention_ms)}
        if self.local_retention_ms is None:
            if self.retention_bytes is not None:
                declared["retention.bytes"] = str(self.retention_bytes)
            return declared
        declared |= {"remote.storage.enable": "true", "local.retention.ms": str(self.local_retention_ms),
                     "retention.bytes": "-1"}  # fmt: skip
        if self.retention_bytes is not None:
            declared["local.retention.bytes"] = str(self.retention_bytes)
        if self.segment_bytes is not None:
            declared["segment.bytes"] = str(self.segment_bytes)
        return declared


# What describe() reads of every topic; the others a declaration names are read when declared.
RETENTION_KEYS = ("retention.ms", "retention.bytes")
# What makes a topic tiered: set after it is created (KafkaTopics.apply).
TIERING_KEYS = ("remote.storage.enable", "local.retention.ms", "local.retention.bytes")


@dataclass(frozen=True)
class ExistingTopic:
    name: str
    partitions: int
    replication_factor: int
    retention_ms: int | None
    retention_bytes: int | None = None  # -1: no limit (Kafka's default)
    others: tuple[tuple[str, str | None], ...] = ()  # the other declared configurations, as Kafka reports them

    def configs(self) -> dict[str, str | None]:
        found = dict(zip(RETENTION_KEYS, (self.retention_ms, self.retention_bytes)))
        return {key: None if value is None else str(value) for key, value in found.items()} | dict(self.others)


@dataclass(frozen=True)
class TopicChange:
    topic: TopicSpec
    action: str  # create | add-partitions | set-configs | unchanged | cannot-reconcile
    detail: str

    @property
    def writes(self) -> bool:
        return self.action in ("create", "add-partitions", "set-configs")


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
        found = current.configs()
        differing = [f"{key} {found.get(key)} -> {value}" for key, value in spec.configs().items()
                     if found.get(key) != value]  # fmt: skip
        if differing:
            changes.append(TopicChange(spec, "set-configs", ", ".join(differing)))
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
        # A Metadata request for one topic never asks the broker to create it (librdkafka's
        # allow.auto.create.topics is on for the producer handle an AdminClient is; MSK and the
        # local broker refuse auto-creation anyway, auto.create.topics.enable=false).
        return AdminClient({**settings, "log_level": 0, "allow.auto.create.topics": False})
    except KafkaException as error:
        raise TopicError(f"cannot connect to the brokers: {error.args[0].str()}") from None


class TopicExists(Exception):
    """CreateTopics answered TOPIC_ALREADY_EXISTS for a topic this run planned to create: made
    since the run read the cluster, or read from a broker that had not yet learned of it (Metadata
    goes to any one broker; Admin.createTopics' javadoc says brokers learn of a new topic
    seconds later)."""


class KafkaTopics:
    """The AdminClient calls this tool makes, behind one small class."""

    def __init__(self, settings: dict, timeout_s: float) -> None:
        # librdkafka would print every failed connection attempt; this tool reports one line.
        self._admin = admin_client(settings)
        self._timeout = timeout_s

    def describe(self, names: Sequence[str], others: Sequence[str] = ()) -> dict[str, ExistingTopic]:
        """The topics that exist of `names`, with their retention and the `others` configurations."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import ConfigResource, ResourceType

        partitions_of = {}
        for name in names:
            partitions = self._partitions(name)
            if partitions is not None:
                partitions_of[name] = partitions
        present = list(partitions_of)
        retention = {}
        if present:
            resources = [ConfigResource(ResourceType.TOPIC, n) for n in present]
            for resource, future in self._admin.describe_configs(
                resources, request_timeout=self._timeout
            ).items():
                try:
                    entries = future.result()
                except KafkaException as error:
                    reason = missing_permission(error.args[0], "describe-configs", topic=resource.name)
                    raise TopicError(f"describe configuration of {resource.name} failed: {reason}") from None
                retention[resource.name] = (
                    *(int(entry.value) if entry and entry.value is not None else None
                      for entry in (entries.get(key) for key in RETENTION_KEYS)),
                    tuple((key, entries[key].value if key in entries else None) for key in others),
                )  # fmt: skip
        topics = {}
        for name in present:
            partitions = partitions_of[name]
            replicas = {len(p.replicas) for p in partitions.values()}
            topics[name] = ExistingTopic(
                name, len(partitions), max(replicas, default=0), *retention[name]
            )
        return topics

    def apply(self, change: TopicChange) -> None:
        from confluent_kafka.admin import NewPartitions, NewTopic

        spec = change.topic
        if change.action == "create":
            # MSK: "You must use Apache Kafka client version 3.0.0 or higher to create new topics
            # with tiered storage enabled" ("Requirements for tiered storage"), while any client may
            # alter one; so a tiered topic is created without its tiering and then tiered by the
            # IncrementalAlterConfigs every configuration change uses.
            untiered = {key: value for key, value in spec.configs().items() if key not in TIERING_KEYS}
            futures = self._admin.create_topics(
                [NewTopic(spec.name, spec.partitions, spec.replication_factor, config=untiered)],
                request_timeout=self._timeout,
            )
            self._settle(futures, change)
            self.await_listed(spec.name)
            if untiered == spec.configs():
                return
            change = TopicChange(spec, "set-configs", "tiering the new topic")
            futures = self._alter(spec)
        elif change.action == "add-partitions":
            futures = self._admin.create_partitions(
                [NewPartitions(spec.name, spec.partitions)], request_timeout=self._timeout
            )
        elif change.action == "set-configs":
            futures = self._alter(spec)
        else:
            return
        self._settle(futures, change)

    def await_listed(self, name: str) -> None:
        """Waits until the broker answering Metadata lists a topic just created. Kafka's
        Admin.createTopics javadoc: "It may take several seconds after CreateTopicsResult returns
        success for all the brokers to become aware that the topics have been created. During this
        time, listTopics and describeTopics may not return information about the new topics." A
        run that returned before then would make the next run plan a second create."""
        deadline = time.monotonic() + self._timeout
        while self._partitions(name) is None:  # a refusal raises at once
            if time.monotonic() > deadline:
                raise TopicError(
                    f"create {name}: the cluster accepted it but lists no such topic after "
                    f"{self._timeout:g} s; run again once it is listed"
                )
            time.sleep(0.2)

    def _partitions(self, name: str):
        """The topic's partitions as Metadata lists them, None while the cluster knows no such topic;
        a refusal is one line. One topic per Metadata request: Kafka silently leaves out of an
        all-topics answer what the caller may not describe, but names it with an error when asked
        for it."""
        from confluent_kafka import KafkaError, KafkaException

        try:
            topic = self._admin.list_topics(topic=name, timeout=self._timeout).topics[name]
        except KafkaException as error:
            raise TopicError(f"cannot reach the cluster: {error.args[0].str()}") from None
        if topic.error is None:
            return topic.partitions
        if topic.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise TopicError(f"describe {name} failed: {missing_permission(topic.error, 'describe', topic=name)}")
        return None

    def _alter(self, spec: TopicSpec):
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

        entries = [
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
            for key, value in spec.configs().items()
        ]
        return self._admin.incremental_alter_configs(
            [ConfigResource(ResourceType.TOPIC, spec.name, incremental_configs=entries)],
            request_timeout=self._timeout,
        )

    def _settle(self, futures, change: TopicChange) -> None:
        from confluent_kafka import KafkaError, KafkaException

        spec = change.topic
        for future in futures.values():
            try:
                future.result()
            except KafkaException as error:
                if change.action == "create" and error.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    raise TopicExists(spec.name) from None
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
    others = sorted({key for spec in specs for key in spec.configs()} - set(RETENTION_KEYS))
    changes = plan(specs, kafka.describe([s.name for s in specs], others))
    done = []
    for change in changes:
        verb = f"would {change.action}" if dry_run and change.writes else change.action
        print(f"{change.topic.name}: {verb}: {change.detail}", file=out, flush=True)
        done.append(change)
        if change.writes and not dry_run:
            try:
                kafka.apply(change)
            except TopicExists:
                # The topic is there after all: reconciled as the existing topic it is.
                print(f"{change.topic.name}: it exists already (made since this run read the cluster, or read from "
                      "a broker that had not learned of it yet): reconciling it as it is", file=out, flush=True)
                kafka.await_listed(change.topic.name)
                for again in plan([change.topic], kafka.describe([change.topic.name], others)):
                    print(f"{again.topic.name}: {again.action}: {again.detail}", file=out, flush=True)
                    done.append(again)
                    if again.writes:
                        kafka.apply(again)
    unreconciled = [c for c in done if c.action == "cannot-reconcile"]
    return 1 if unreconciled else 0



@dataclass(frozen=True)
class Declaration:
    """What one environment declares: its topics and exactly what its SCRAM users may do."""

    topics: list[TopicSpec]
    acls: list[AclSpec]

    def text(self) -> str:
        """The declaration as one Run Command parameter: base64 of compact JSON."""
        body = {"topics": [asdict(t) for t in self.topics], "acls": [asdict(a) for a in self.acls]}
        return base64.b64encode(json.dumps(body, separators=(",", ":")).encode()).decode()

    @classmethod
    def from_text(cls, text: str) -> Declaration:
        try:
            body = json.loads(base64.b64decode(text, validate=True))
            return cls([TopicSpec(**t) for t in body["topics"]], [AclSpec(**a) for a in body["acls"]])
        except (binascii.Error, ValueError, KeyError, TypeError) as error:
            raise TopicError(f"the declaration is not base64 JSON of topics and acls: {error}") from None


def token_expiry_s(token: str) -> float:
    """When an MSK IAM token stops working, in epoch seconds: it is a base64url presigned URL whose
    X-Amz-Date and X-Amz-Expires say so (SigV4 query signing)."""
    try:
        url = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        query = parse_qs(urlparse(url).query)
        signed = time.strptime(query["X-Amz-Date"][0], "%Y%m%dT%H%M%SZ")
        # X-Amz-Date is UTC: timegm, not mktime (local time, an hour off under daylight saving).
        return calendar.timegm(signed) + int(query["X-Amz-Expires"][0])
    except (binascii.Error, UnicodeDecodeError, KeyError, ValueError) as error:
        raise TopicError(f"${TOKEN_ENV} is not an MSK IAM token ({type(error).__name__}: {error})") from None


def given_token_callback(token: str):
    """librdkafka's OAUTHBEARER callback handing out the one token the host was given. It cannot
    sign a new one: when librdkafka asks again after expiry, the connection fails, and so does
    the run, which is the bound the operator's MFA session sets."""
    expiry = token_expiry_s(token)
    if expiry <= time.time():
        raise TopicError(f"${TOKEN_ENV} expired {time.time() - expiry:.0f} s ago: run telemetry topics again")

    def oauth_cb(_oauth_config: str) -> tuple[str, float]:
        return token, expiry

    return oauth_cb


def positive_seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {value}")
    return seconds


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m simulator.topic_admin",
        description="Reconcile the given declaration on the cluster (run on a fleet host by telemetry topics).",
    )
    parser.add_argument("--declaration", required=True, help="base64 JSON of topics and acls")
    parser.add_argument("--bootstrap-servers", required=True, help="HOST:PORT list")
    parser.add_argument("--region", required=True, help="the cluster's region")
    parser.add_argument(
        "--security-protocol", choices=("SASL_SSL", "SASL_PLAINTEXT", "PLAINTEXT"), default="SASL_SSL",
        help=f"SASL_SSL: MSK IAM with the token in ${TOKEN_ENV} (default); the others for a local broker, "
        f"SASL_PLAINTEXT as --sasl-username with the password in ${SASL_PASSWORD_ENV}",
    )  # fmt: skip
    parser.add_argument("--sasl-username", metavar="NAME")
    parser.add_argument("--timeout", type=positive_seconds, default=30.0, help="seconds per admin request")
    parser.add_argument("--dry-run", action="store_true", help="show what would change, change nothing")
    return parser.parse_args(argv)


def run(args: argparse.Namespace, out=sys.stdout) -> int:
    declaration = Declaration.from_text(args.declaration)
    settings = connection_settings(
        args.bootstrap_servers,
        security_protocol=args.security_protocol,
        region=args.region,
        client_id="manage-topics",
        sasl_username=args.sasl_username,
    )
    if args.security_protocol == "SASL_SSL":
        token = os.environ.get(TOKEN_ENV)
        if not token:
            raise TopicError(f"${TOKEN_ENV} is empty: the topic administrator's MSK IAM token is needed")
        settings["oauth_cb"] = given_token_callback(token)
    return reconcile_declaration(settings, declaration, timeout_s=args.timeout, dry_run=args.dry_run, out=out)


def reconcile_declaration(settings: dict, declaration: Declaration, *, timeout_s: float, dry_run: bool,
                          out=sys.stdout) -> int:  # fmt: skip
    """Topics, then ACLs, on the cluster `settings` reach; 1 when a topic difference remains."""
    status = reconcile(KafkaTopics(settings, timeout_s), declaration.topics, dry_run=dry_run, out=out)
    reconcile_acls(KafkaAcls(settings, timeout_s), declaration.acls, dry_run=dry_run, out=out)
    return status


# Exit codes the workstation reads (telemetry/commands/topics.py): 0 done, 1 a difference Kafka cannot
# make, 2 refused, 4 a crash (3 is the fleet document's failed install).
EXIT_INTERNAL_ERROR = 4


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return run(parse_args(argv))
    except TopicError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # noqa: BLE001 - Python's own exit code for a crash, 1, means "a difference Kafka cannot make"
        print(f"error: internal error: {type(error).__name__}: {error}", file=sys.stderr)
        return EXIT_INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
