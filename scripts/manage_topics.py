#!/usr/bin/env python3
"""Create or update an environment's Kafka topics as `msk.topics` in cdk.json declares them.

Idempotent: missing topics are created, existing ones get more partitions or a new retention when
the declaration asks for it, and a second run changes nothing. Kafka cannot take partitions away
or change a replication factor in place; such differences are reported, not forced.

Run it from a host inside the VPC that carries the MSK client security group (for example a
simulator fleet host over SSM Session Manager). The bootstrap brokers come from the SSM parameter
the MSK stack publishes, unless --bootstrap-servers names them.

Exit codes: 0 topics match the declaration (or would, with --dry-run); 1 a difference Kafka
cannot reconcile remains; 2 bad input or an unreachable cluster.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simulator.kafka_config import connection_settings  # noqa: E402

MS_PER_HOUR = 3_600_000


class TopicError(Exception):
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


class KafkaTopics:
    """The AdminClient calls this tool makes, behind one small class."""

    def __init__(self, settings: dict, timeout_s: float) -> None:
        from confluent_kafka.admin import AdminClient

        # librdkafka would print every failed connection attempt; this tool reports one line.
        self._admin = AdminClient({**settings, "log_level": 0})
        self._timeout = timeout_s

    def describe(self, names: Sequence[str]) -> dict[str, ExistingTopic]:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import ConfigResource, ResourceType

        try:
            metadata = self._admin.list_topics(timeout=self._timeout)
        except KafkaException as error:
            raise TopicError(f"cannot reach the cluster: {error.args[0].str()}") from None
        present = [n for n in names if n in metadata.topics]
        retention = {}
        if present:
            resources = [ConfigResource(ResourceType.TOPIC, n) for n in present]
            for resource, future in self._admin.describe_configs(
                resources, request_timeout=self._timeout
            ).items():
                entry = future.result().get("retention.ms")
                retention[resource.name] = (
                    int(entry.value) if entry and entry.value is not None else None
                )
        topics = {}
        for name in present:
            partitions = metadata.topics[name].partitions
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
                raise TopicError(
                    f"{change.action} {spec.name} failed: {error.args[0].str()}"
                ) from None


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


def declared_topics(environment: str) -> tuple[list[TopicSpec], str, str]:
    """The environment's topics, the region, and the SSM parameter with its bootstrap brokers."""
    from stacks.config import ConfigError, load_environment, read_environments
    from stacks.naming import bootstrap_parameter_name

    try:
        config = load_environment(read_environments(), environment)
    except ConfigError as error:
        raise TopicError(str(error)) from None
    specs = [
        TopicSpec(t.name, t.partitions, t.replication_factor, t.retention_hours * MS_PER_HOUR)
        for t in config.msk.topics
    ]
    return specs, config.region, bootstrap_parameter_name(config)


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


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Create or update the Kafka topics declared in cdk.json (msk.topics) for one environment.",
        epilog="Exit codes: 0 topics match; 1 a difference Kafka cannot reconcile remains; 2 bad input or "
        "an unreachable cluster.",
    )
    parser.add_argument(
        "--env", required=True, help="environment name in cdk.json (dev, staging, prod)"
    )
    parser.add_argument(
        "--bootstrap-servers", help="HOST:PORT list (default: the MSK stack's SSM parameter)"
    )
    parser.add_argument(
        "--security-protocol",
        choices=("SASL_SSL", "PLAINTEXT"),
        default="SASL_SSL",
        help="SASL_SSL with MSK IAM auth (default) or PLAINTEXT for a local broker",
    )
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="seconds per admin request (default 30)"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="show what would change, change nothing"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        specs, region, parameter = declared_topics(args.env)
        bootstrap = args.bootstrap_servers or bootstrap_from_ssm(parameter, region)
        settings = connection_settings(
            bootstrap,
            security_protocol=args.security_protocol,
            region=region,
            client_id="manage-topics",
        )
        return reconcile(KafkaTopics(settings, args.timeout), specs, dry_run=args.dry_run)
    except TopicError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
