"""What an environment's declared workload needs from MSK, the Flink sink, the network paths and
AWS IoT Core, against what the environment provides: one row per constraint, the binding one named.

Pure Python, no CDK: synthesis, `telemetry capacity` and `telemetry cost` feed it plain values
(cdk.json's msk.broker_instance_type, broker_count, ebs_volume_gib, topics[].partitions,
replication_factor, retention_hours, telemetry_sink.parallelism, parallelism_per_kpu ...).

Every number of a service this model depends on is a `Limit` row in LIMITS, with the page it was
read on and the date. The model follows AWS's own published sizing model (`msk_sizing.py`,
aws/agent-toolkit-for-aws, managing-amazon-msk skill) in what it checks, not in its factors:
the few of its constants this model uses are cited as such, and where its answers differ from
this model's the reason is a named choice here (utilization, storage headroom, one zone down).

Conventions: throughput in MiB/s and storage in GiB (2^20, 2^30 bytes; MSK states volumes in GiB
and storage throughput in MiB/s); Kafka stores and replicates the batches producers compressed, so
every broker-side byte is a payload byte divided by the workload's compression_ratio.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from stacks import fleet_plan  # the fleet plan's quota constants, with their sources

MIB = 2**20
GIB = 2**30
MB = 1e6 / MIB  # MiB in a megabyte: the EC2 tables state throughput in MB/s (10^6 bytes)
READ_ON = "2026-11-26"
AVAILABILITY_ZONES = 3  # the VPC's three zones (stacks/config.py SUPPORTED_AZ_COUNT); Express needs 3

# --- the pages limits were read on --------------------------------------------------------------

_DG = "https://docs.aws.amazon.com/msk/latest/developerguide/"
BEST_PRACTICES = ("Best practices for Standard brokers", _DG + "bestpractices.html")
EXPRESS_BEST_PRACTICES = ("Best practices for Express brokers", _DG + "bestpractices-express.html")
QUOTAS = ("Amazon MSK quota", _DG + "limits.html")
THROUGHPUT = ("Manage storage throughput for Standard brokers in a Amazon MSK cluster",
              _DG + "msk-provision-throughput-management.html")  # fmt: skip
AUTOSCALING = ("Auto-scaling policy details for Amazon MSK", _DG + "msk-autoexpand-details.html")
AUTOSCALING_INTRO = ("Automatic scaling for Amazon MSK clusters", _DG + "msk-autoexpand.html")
TIERED_TOPIC = ("Guidelines for Amazon MSK tiered storage topic-level configuration",
                _DG + "msk-guidelines-tiered-storage-topic-level-config.html")  # fmt: skip
TIERED_ENABLE = ("Enable tiered storage on an existing Amazon MSK cluster using AWS CLI",
                 _DG + "msk-enable-cluster-tiered-storage-cli.html")  # fmt: skip
MSK_SIZING = ("msk_sizing.py (aws/agent-toolkit-for-aws d6ad2e44, managing-amazon-msk skill)",
              "https://github.com/aws/agent-toolkit-for-aws/blob/d6ad2e44d5e3077b85b63f322e007c84f94f3a6c/"
              "skills/specialized-skills/analytics-skills/managing-amazon-msk/scripts/msk_sizing.py")  # fmt: skip
MSK_SKILL_SIZING = ("Size and Choose an MSK Cluster (managing-amazon-msk skill, size-and-choose-cluster.md)",
                    "https://github.com/aws/agent-toolkit-for-aws/blob/d6ad2e44d5e3077b85b63f322e007c84f94f3a6c/"
                    "skills/specialized-skills/analytics-skills/managing-amazon-msk/references/"
                    "size-and-choose-cluster.md")  # fmt: skip
NAT = ("NAT gateway basics", "https://docs.aws.amazon.com/vpc/latest/userguide/nat-gateway-basics.html")
PRIVATELINK = ("AWS PrivateLink quotas", "https://docs.aws.amazon.com/vpc/latest/privatelink/vpc-limits-endpoints.html")
FLINK_RESOURCES = ("Review Managed Service for Apache Flink application resources",
                   "https://docs.aws.amazon.com/managed-flink/latest/java/how-resources.html")  # fmt: skip
FLINK_PERFORMANCE = ("Use performance best practices (Managed Service for Apache Flink)",
                     "https://docs.aws.amazon.com/managed-flink/latest/java/performance-improving.html")  # fmt: skip
SINK_BENCH = ("flink/README.md, Benchmark (make bench-sink, this repository)", "flink/README.md#benchmark")
IOT_QUOTAS = ("AWS IoT Core endpoints and quotas (stacks/fleet_plan.py)",
              "https://docs.aws.amazon.com/general/latest/gr/iot-core.html")  # fmt: skip


@dataclass(frozen=True)
class Limit:
    """A number a service documents (or this repository measured), with where it was read."""

    name: str
    value: float
    unit: str
    page: str
    url: str
    read_on: str = READ_ON


def _limit(name: str, value: float, unit: str, source: tuple[str, str]) -> Limit:
    return Limit(name, value, unit, source[0], source[1])


# Per-broker figures of Standard brokers. Partitions: the best-practices table (recommended,
# leaders and followers counted). EBS and network throughput: the instance's baseline EBS and
# network bandwidth in MiB/s as msk_sizing.py's INSTANCE_SPECS carries them (ebs_throughput_mbs,
# network_throughput_mbs); the EC2 tables they come from were not readable here, see the report.
STANDARD_BROKERS: dict[str, dict[str, float]] = {
    "kafka.m5.large": {"ebs": 81.0, "network": 96, "partitions": 1000},
    "kafka.m5.xlarge": {"ebs": 144.0, "network": 160, "partitions": 1000},
    "kafka.m5.2xlarge": {"ebs": 250.0, "network": 320, "partitions": 2000},
    "kafka.m5.4xlarge": {"ebs": 593.75, "network": 640, "partitions": 4000},
    "kafka.m7g.large": {"ebs": 78.75, "network": 117, "partitions": 1000},
    "kafka.m7g.xlarge": {"ebs": 156.25, "network": 234, "partitions": 1000},
    "kafka.m7g.2xlarge": {"ebs": 312.5, "network": 469, "partitions": 2000},
    "kafka.m7g.4xlarge": {"ebs": 625.0, "network": 937, "partitions": 4000},
    "kafka.m7g.8xlarge": {"ebs": 1000.0, "network": 1875, "partitions": 4000},
}
# Express brokers: the recommended (sustained) ingress per broker; egress is twice it (the Express
# best-practices page: "each express.m7g.large broker will handle 15 MBps of ingress and 30 MBps
# of egress"); recommended partitions per broker, replicas included.
EXPRESS_BROKERS: dict[str, dict[str, float]] = {
    "express.m7g.large": {"ingress": 15.625, "partitions": 1000},
    "express.m7g.xlarge": {"ingress": 31.25, "partitions": 1000},
    "express.m7g.2xlarge": {"ingress": 62.5, "partitions": 2500},
    "express.m7g.4xlarge": {"ingress": 125.0, "partitions": 6000},
}


def _broker_limits() -> list[Limit]:
    rows = []
    for kind, spec in STANDARD_BROKERS.items():
        rows += [
            _limit(f"{kind} recommended partitions per broker (leaders and followers)", spec["partitions"],
                   "partitions", BEST_PRACTICES),
            _limit(f"{kind} baseline EBS throughput", spec["ebs"], "MB/s", MSK_SIZING),
            _limit(f"{kind} baseline network throughput", spec["network"], "MB/s", MSK_SIZING),
        ]  # fmt: skip
    for kind, spec in EXPRESS_BROKERS.items():
        rows += [
            _limit(f"{kind} recommended ingress per broker", spec["ingress"], "MiB/s", MSK_SIZING),
            _limit(f"{kind} recommended egress per broker", spec["ingress"] * EXPRESS_EGRESS_PER_INGRESS.value,
                   "MiB/s", EXPRESS_BEST_PRACTICES),
            _limit(f"{kind} recommended partitions per broker (replicas included)", spec["partitions"],
                   "partitions", MSK_SIZING),
        ]  # fmt: skip
    return rows


EXPRESS_EGRESS_PER_INGRESS = _limit("Express recommended egress per unit of recommended ingress", 2.0, "x",
                                    EXPRESS_BEST_PRACTICES)  # fmt: skip
EXPRESS_REPLICATION = _limit("Express replication factor (fixed)", 3, "replicas", EXPRESS_BEST_PRACTICES)
DEFAULT_VOLUME_THROUGHPUT = _limit("default broker volume throughput (without provisioned throughput)", 250,
                                   "MiB/s", THROUGHPUT)  # fmt: skip
MAX_STORAGE_PER_BROKER = _limit("maximum storage per Standard broker", 16_384, "GiB", QUOTAS)
AUTOSCALING_TARGET_MAX = _limit("storage auto scaling utilization target, highest allowed", 80, "%", AUTOSCALING)
AUTOSCALING_STEP = _limit("storage auto scaling step: the larger of 10 GiB and this share of current storage", 10,
                          "%", AUTOSCALING)  # fmt: skip
AUTOSCALING_COOLDOWN = _limit("storage scaling actions at most once every (the cool-down can exceed 24 h)", 6, "hours",
                              AUTOSCALING_INTRO)  # fmt: skip
TIERED_MIN_RETENTION = _limit("retention.ms of a tiered topic, minimum", 72, "hours", TIERED_TOPIC)
TIERED_MIN_SEGMENT = _limit("segment.bytes of a tiered topic, minimum", 48, "MiB", TIERED_TOPIC)
TIERED_MIN_KAFKA = _limit("Kafka version for tiered storage, minimum (3.6 as major + minor / 100)", 3.06, "version",
                          TIERED_ENABLE)  # fmt: skip
# AWS's sizing model's choices, used here as they are there: the share of a Standard broker's
# throughput to plan for (its --utilization-standard default) and the headroom on broker storage
# the skill's sizing page asks for ("Add 20% headroom").
STANDARD_UTILIZATION = _limit("planned share of a Standard broker's throughput", 0.5, "fraction", MSK_SIZING)
# What AWS's model reserves on each broker's volume and network beyond ingress and replication
# (msk_sizing.py, STORAGE_IO_FACTOR_BASE and NETWORK_IO_BASE: "0.5 lagging + 3.0 rebalancing"), in
# units of the broker's share of the peak with every broker up: lagging consumers read old segments
# from the volume instead of the page cache, and a partition reassignment copies whole replicas
# from volume to volume over the network. Both are added here to the replication this model counts
# copy by copy, so it reserves at least what AWS's factors do at the replication factors the
# configuration allows (3 and up).
LAGGING_CONSUMER_RESERVE = _limit("reserve for lagging consumers, per MiB/s of a broker's share of the peak", 0.5,
                                  "x", MSK_SIZING)  # fmt: skip
REASSIGNMENT_RESERVE = _limit("reserve for partition reassignment, per MiB/s of a broker's share of the peak", 3.0,
                              "x", MSK_SIZING)  # fmt: skip
# Kafka's log.segment.bytes default (Kafka documentation, broker configs), which the brokers'
# configuration keeps (msk_cluster.server_properties).
KAFKA_SEGMENT_BYTES = _limit("segment.bytes default (Kafka), one open per partition replica", 1024, "MiB",
                             ("Apache Kafka documentation, Broker Configs: log.segment.bytes",
                              "https://kafka.apache.org/documentation/#brokerconfigs_log.segment.bytes"))  # fmt: skip
TIERED_SEGMENT_BYTES_DEFAULT = _limit("segment.bytes default on tiered clusters", 128, "MiB", MSK_SKILL_SIZING)
# A tiered topic's brokers delete a local segment only once the remote tier has it (Kafka,
# UnifiedLog.deletableSegments, isSegmentEligibleForDeletion: "they are uploaded to the remote
# storage", or the log start offset passed them, which only remote retention moves), so while
# copying stalls they keep everything: neither local.retention.* nor retention.ms deletes a byte.
# The volumes must then hold this long of the rate on top of the local retention, without counting
# on storage auto scaling (its next step may be hours away, AUTOSCALING_COOLDOWN): the blueprint's
# choice, a day for the copy to resume or for whoever the disk alarm pages to act.
TIERED_STALL_HOURS = _limit("hours of stalled copying to the remote tier a broker's volume holds (auto scaling not "
                            "counted)", 24, "hours",
                            ("This blueprint's choice, docs/capacity-and-cost.md \"Sized from the workload\"; Kafka UnifiedLog.deletableSegments",
                             "https://github.com/apache/kafka/blob/3.9/storage/src/main/java/org/apache/kafka/storage/"
                             "internals/log/UnifiedLog.java"))  # fmt: skip
NAT_BANDWIDTH = _limit("NAT gateway bandwidth (scales automatically to 100 Gbps)", 5, "Gbps", NAT)
ENDPOINT_BANDWIDTH = _limit("interface endpoint bandwidth per zone (scales automatically to 100 Gbps)", 10, "Gbps",
                            PRIVATELINK)  # fmt: skip
KPU_VCPUS = _limit("vCPUs per KPU", 1, "vCPU", FLINK_RESOURCES)
SINK_CPU_CEILING = _limit("CPU above which Managed Flink autoscaling scales up (after 15 minutes)", 0.75,
                          "fraction", FLINK_PERFORMANCE)  # fmt: skip
# make bench-sink: 168,000 records/s steady at parallelism 2 on a 2-core machine the broker shared
# (median of 3 runs; 11.3 us of CPU per record): one subtask, one vCPU, 84,000 records/s.
SINK_RECORDS_PER_SUBTASK = _limit("Flink sink records/s per subtask (168,000 at parallelism 2, make bench-sink)",
                                  84_000, "records/s", SINK_BENCH)  # fmt: skip


def _iot_limits() -> list[Limit]:

    return [
        _limit("AWS IoT Core concurrent connections per account (adjustable)", fleet_plan.IOT_CONCURRENT_CONNECTIONS,
               "connections", IOT_QUOTAS),
        _limit("AWS IoT Core publishes per second per connection (fixed)", fleet_plan.IOT_PUBLISHES_PER_CONNECTION_S,
               "publishes/s", IOT_QUOTAS),
        _limit("AWS IoT Core bytes per second per connection (fixed)", fleet_plan.IOT_BYTES_PER_CONNECTION_S,
               "bytes/s", IOT_QUOTAS),
        _limit("AWS IoT Core rule executions per second per account (adjustable)", fleet_plan.IOT_RULE_EXECUTIONS_PER_S,
               "executions/s", IOT_QUOTAS),
    ]  # fmt: skip


def limits() -> list[Limit]:
    """Every limit the model uses: the table `telemetry capacity` prints and the tests check."""
    return [
        *_broker_limits(), EXPRESS_EGRESS_PER_INGRESS, EXPRESS_REPLICATION, DEFAULT_VOLUME_THROUGHPUT,
        MAX_STORAGE_PER_BROKER, AUTOSCALING_TARGET_MAX, AUTOSCALING_STEP, AUTOSCALING_COOLDOWN, TIERED_MIN_RETENTION,
        TIERED_MIN_SEGMENT, TIERED_MIN_KAFKA, STANDARD_UTILIZATION, LAGGING_CONSUMER_RESERVE, REASSIGNMENT_RESERVE,
        KAFKA_SEGMENT_BYTES, TIERED_SEGMENT_BYTES_DEFAULT,
        NAT_BANDWIDTH, ENDPOINT_BANDWIDTH, KPU_VCPUS, SINK_CPU_CEILING, SINK_RECORDS_PER_SUBTASK, *_iot_limits(),
    ]  # fmt: skip


# --- the workload and the answers ---------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """The load an environment is for (cdk.json `workload`); retention stays on the topic."""

    messages_per_second: float  # average over a day
    peak_messages_per_second: float
    message_bytes: int
    compression_ratio: float  # payload bytes / bytes in the broker's log (devtools/measure_compression.py)
    consumer_groups: int  # groups reading the whole topic (the Flink sink is one)
    devices: int
    iot_share: float = 0.0  # the share of messages devices send through AWS IoT Core (the rest produce to Kafka)

    def __post_init__(self) -> None:
        if self.peak_messages_per_second < self.messages_per_second:
            raise ValueError("peak_messages_per_second is below messages_per_second")
        if self.compression_ratio <= 0 or self.message_bytes <= 0 or not 0 <= self.iot_share <= 1:
            raise ValueError("compression_ratio and message_bytes must be > 0, iot_share within 0..1")

    def broker_bytes_per_message(self) -> float:
        """Bytes a message takes on the brokers. Producers' batches are stored and replicated as they
        compressed them; the AWS IoT rule's Kafka action sends each message as it came, uncompressed
        (its client property compression.type defaults to none, AWS IoT Developer Guide, "Apache
        Kafka" rule action; the rule sets none, kafka_topic_rule.py), one record per execution."""
        return self.message_bytes * ((1 - self.iot_share) / self.compression_ratio + self.iot_share)

    def broker_mib_s(self, rate: float) -> float:
        """MiB/s the brokers take in for `rate` messages/s."""
        return rate * self.broker_bytes_per_message() / MIB

    @property
    def average_mib_s(self) -> float:
        return self.broker_mib_s(self.messages_per_second)

    @property
    def peak_mib_s(self) -> float:
        return self.broker_mib_s(self.peak_messages_per_second)

    def gib_per_hour(self) -> float:
        return self.average_mib_s * 3600 / 1024


@dataclass(frozen=True)
class Constraint:
    """One limit against one need: ok while need <= provided; headroom = provided / need."""

    name: str
    need: float
    provided: float
    unit: str
    fix: str = ""  # the smallest change that makes it pass, one line
    binding: bool = False
    # A rule the service sets (a minimum version or retention), passed or not: never the binding
    # constraint, which is the capacity the load comes closest to using up.
    rule: bool = False

    @property
    def ok(self) -> bool:
        return self.need <= self.provided

    @property
    def headroom(self) -> float:
        return math.inf if self.need <= 0 else self.provided / self.need

    def line(self) -> str:
        mark = "ok  " if self.ok else "OVER"
        headroom = "-" if math.isinf(self.headroom) else f"{self.headroom:.2f}x"
        return f"{mark} {self.name}: needs {_n(self.need)} {self.unit}, provided {_n(self.provided)} ({headroom})"


def _n(value: float) -> str:
    if math.isinf(value):
        return "unlimited"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}"


@dataclass(frozen=True)
class Assessment:
    constraints: tuple[Constraint, ...]

    @property
    def binding(self) -> Constraint:
        return next(c for c in self.constraints if c.binding)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.constraints)

    def refusal(self) -> str | None:
        """One line for synthesis: the first constraint that fails and its smallest fix."""
        failing = [c for c in self.constraints if not c.ok]
        if not failing:
            return None
        worst = min(failing, key=lambda c: c.headroom)
        return f"{worst.name}: needs {_n(worst.need)} {worst.unit}, {_n(worst.provided)} provided: {worst.fix}"


def assess(constraints: Iterable[Constraint]) -> Assessment:
    """Name the binding constraint: the capacity with the least headroom (a rule only when every
    row is one)."""
    rows = list(constraints)
    if not rows:
        raise ValueError("no constraints to assess")
    candidates = [i for i, c in enumerate(rows) if not c.rule] or range(len(rows))
    tightest = min(candidates, key=lambda i: rows[i].headroom)
    return Assessment(tuple(replace(c, binding=i == tightest) for i, c in enumerate(rows)))


# --- MSK ----------------------------------------------------------------------------------------


def _round_up_to_zones(count: int) -> int:
    return max(AVAILABILITY_ZONES, math.ceil(count / AVAILABILITY_ZONES) * AVAILABILITY_ZONES)


def _brokers_for_total(total: float, per_broker: float) -> int:
    """Brokers, a multiple of the zones, whose live two thirds carry `total` at `per_broker` each."""
    live_needed = total / per_broker
    return _round_up_to_zones(math.ceil(live_needed * AVAILABILITY_ZONES / (AVAILABILITY_ZONES - 1) - 1e-9))


def _live_brokers(broker_count: int) -> float:
    """Brokers left with one of the three zones down (brokers are spread evenly over the zones)."""
    return broker_count * (AVAILABILITY_ZONES - 1) / AVAILABILITY_ZONES


def replicas_per_broker(partitions: int, replication_factor: int, broker_count: int) -> int:
    """Partition replicas on the fullest broker (leaders and followers)."""
    return math.ceil(partitions * replication_factor / broker_count)


def fullest_broker_mib_s(workload: Workload, rate: float, *, partitions: int, replication_factor: int,
                         broker_count: int) -> float:  # fmt: skip
    """MiB/s the fullest broker takes in at `rate` messages/s: its replicas' share of the topic's
    compressed bytes (its leaders' writes from clients and its followers' copies)."""
    return workload.broker_mib_s(rate) / partitions * replicas_per_broker(partitions, replication_factor, broker_count)


def broker_gib_per_hour(workload: Workload, *, partitions: int, replication_factor: int, broker_count: int) -> float:
    """GiB an hour the fullest broker keeps at the average rate."""
    return fullest_broker_mib_s(workload, workload.messages_per_second, partitions=partitions,
                                replication_factor=replication_factor, broker_count=broker_count) * 3600 / 1024  # fmt: skip


def open_segments_gib(partitions: int, replication_factor: int, broker_count: int,
                      segment_mib: float = KAFKA_SEGMENT_BYTES.value) -> float:  # fmt: skip
    """What retention cannot delete on the fullest broker: one open segment per partition replica
    (Kafka deletes whole closed segments only)."""
    return replicas_per_broker(partitions, replication_factor, broker_count) * segment_mib / 1024


def retention_hours_held(workload: Workload, *, partitions: int, replication_factor: int, broker_count: int,
                         ebs_volume_gib: float, fill_percent: float,
                         segment_mib: float = KAFKA_SEGMENT_BYTES.value) -> float:  # fmt: skip
    """Hours of the rate the fullest broker keeps within fill_percent of its volume (the storage
    auto scaling target, where MSK holds it), its open segments counted."""
    hourly = broker_gib_per_hour(workload, partitions=partitions, replication_factor=replication_factor,
                                 broker_count=broker_count)  # fmt: skip
    usable = ebs_volume_gib * fill_percent / 100 - open_segments_gib(partitions, replication_factor, broker_count,
                                                                     segment_mib)  # fmt: skip
    return math.inf if hourly <= 0 else max(0.0, usable) / hourly


def volume_needed_gib(workload: Workload, *, hours: float, partitions: int, replication_factor: int,
                      broker_count: int, fill_percent: float, extra_gib: float | None = None) -> float:  # fmt: skip
    """The volume the fullest broker needs for `hours` of the rate, filled to fill_percent (the
    storage auto scaling target: MSK grows a volume whose use passes it, so data planned beyond it
    would cost more than priced). extra_gib: the open segments, one per replica by default."""
    hourly = broker_gib_per_hour(workload, partitions=partitions, replication_factor=replication_factor,
                                 broker_count=broker_count)  # fmt: skip
    if extra_gib is None:
        extra_gib = open_segments_gib(partitions, replication_factor, broker_count)
    return (hourly * hours + extra_gib) / (fill_percent / 100)


def _storage_fix(workload: Workload, *, hours: float, partitions: int, replication_factor: int, broker_count: int,
                 ebs_volume_gib: float, fill_percent: float, retention_hours: float,
                 segment_mib: float = KAFKA_SEGMENT_BYTES.value) -> str:  # fmt: skip
    """'enable tiered storage with at most N h on brokers, or use B x V GiB' (whichever apply)."""
    options = []
    held = retention_hours_held(workload, partitions=partitions, replication_factor=replication_factor,
                                broker_count=broker_count, ebs_volume_gib=ebs_volume_gib,
                                fill_percent=fill_percent, segment_mib=segment_mib)  # fmt: skip
    if hours < retention_hours and held >= 1:  # already tiered: fewer hours on the brokers
        options.append(f"keep at most {math.floor(held)} h on brokers (tiered_storage.local_retention_hours)")
    elif retention_hours >= TIERED_MIN_RETENTION.value and held >= 1:
        options.append(f"enable tiered storage with at most {math.floor(held)} h on brokers")
    count = broker_count
    while count <= 60:
        volume = volume_needed_gib(workload, hours=hours, partitions=partitions, replication_factor=replication_factor,
                                   broker_count=count, fill_percent=fill_percent,
                                   extra_gib=open_segments_gib(partitions, replication_factor, count, segment_mib))  # fmt: skip
        if volume <= MAX_STORAGE_PER_BROKER.value:
            options.append(f"use {count} x {min(MAX_STORAGE_PER_BROKER.value, math.ceil(volume / 100) * 100):,.0f} GiB")
            break
        count += AVAILABILITY_ZONES
    return ", or ".join(options) or "lower the retention or the rate"


def msk_standard_constraints(
    workload: Workload,
    *,
    broker_instance_type: str,
    broker_count: int,
    ebs_volume_gib: float,
    partitions: int,
    replication_factor: int,
    retention_hours: float,
    fill_percent: float = 70,
    primary_retention_hours: float | None = None,
    provisioned_throughput_mib_s: float | None = None,
    kafka_version: str | None = None,
) -> list[Constraint]:
    """MSK with Standard brokers and EBS storage; with tiered storage when primary_retention_hours
    (local.retention.ms) is below retention_hours.

    Throughput is sized at the peak rate with one zone down (a third of the brokers gone, their
    partitions led by the rest), within STANDARD_UTILIZATION of each broker:
    - volume writes: client ingress and replication, RF copies spread over the live brokers; with
      tiered storage each leader also reads its closed segments back to upload them;
    - network out: replication to RF-1 followers, one copy per consumer group; with tiered storage
      the upload to the remote tier too;
    - on both, AWS's reserves for lagging consumers and partition reassignment.
    Storage is sized at the average rate for the hours kept on brokers, plus an open segment per
    replica, filled to fill_percent: the storage auto scaling target, where MSK holds a volume (it
    grows one whose use passes the target), below the disk alarm; the fullest broker decides.
    """
    spec = STANDARD_BROKERS.get(broker_instance_type)
    if spec is None:
        raise ValueError(f"no capacity figures for {broker_instance_type}; known: {', '.join(STANDARD_BROKERS)}")
    tiered = primary_retention_hours is not None and primary_retention_hours < retention_hours
    local_hours = primary_retention_hours if tiered else retention_hours
    live = _live_brokers(broker_count)
    peak = workload.peak_mib_s
    util = STANDARD_UTILIZATION.value
    volume_throughput = min(spec["ebs"] * MB, provisioned_throughput_mib_s or DEFAULT_VOLUME_THROUGHPUT.value)
    upload = peak / live if tiered else 0.0
    reserve = peak / broker_count * (LAGGING_CONSUMER_RESERVE.value + REASSIGNMENT_RESERVE.value)
    writes = peak * replication_factor / live + upload + reserve
    network_out = peak * (replication_factor - 1 + workload.consumer_groups) / live + upload + reserve
    bigger = _next_instance(broker_instance_type)

    def brokers_for(per_broker_need: float, capacity: float) -> int:
        return _brokers_for_total(per_broker_need * live, capacity)

    rows = [
        Constraint("msk: volume throughput per broker at peak, one zone down", writes, volume_throughput * util, "MiB/s",
                   f"use {brokers_for(writes, volume_throughput * util)} brokers"
                   + (f" or {bigger}" if bigger else "")),
        Constraint("msk: network out per broker at peak, one zone down", network_out, spec["network"] * MB * util, "MiB/s",
                   f"use {brokers_for(network_out, spec['network'] * MB * util)} brokers" + (f" or {bigger}" if bigger else "")),
    ]  # fmt: skip
    replicas = replicas_per_broker(partitions, replication_factor, broker_count)
    rows.append(Constraint(
        "msk: partition replicas per broker", replicas, spec["partitions"], "replicas",
        f"use {_round_up_to_zones(math.ceil(partitions * replication_factor / spec['partitions']))} brokers or fewer "
        "partitions"))  # fmt: skip
    segments_gib = replicas * TIERED_SEGMENT_BYTES_DEFAULT.value / 1024 if tiered else None  # open segments (default: Kafka's 1 GiB)
    need_gib = volume_needed_gib(workload, hours=local_hours, partitions=partitions,
                                 replication_factor=replication_factor, broker_count=broker_count,
                                 fill_percent=fill_percent, extra_gib=segments_gib)  # fmt: skip
    rows.append(Constraint(
        f"msk: broker storage for {local_hours:g} h at {workload.messages_per_second:,.0f} msg/s "
        f"(filled to the {fill_percent:g}% storage auto scaling target, an open segment per replica)",
        need_gib, min(ebs_volume_gib, MAX_STORAGE_PER_BROKER.value), "GiB per broker",
        _storage_fix(workload, hours=local_hours, partitions=partitions, replication_factor=replication_factor,
                     broker_count=broker_count, ebs_volume_gib=ebs_volume_gib, fill_percent=fill_percent,
                     retention_hours=retention_hours,
                     segment_mib=TIERED_SEGMENT_BYTES_DEFAULT.value if tiered else KAFKA_SEGMENT_BYTES.value)))  # fmt: skip
    if tiered:
        hourly = broker_gib_per_hour(workload, partitions=partitions, replication_factor=replication_factor,
                                     broker_count=broker_count)  # fmt: skip
        stall_gib = stalled_volume_gib(workload, local_hours=local_hours, partitions=partitions,
                                       replication_factor=replication_factor, broker_count=broker_count)  # fmt: skip
        held = math.inf if hourly <= 0 else (min(ebs_volume_gib, MAX_STORAGE_PER_BROKER.value)
                                             - (stall_gib - hourly * TIERED_STALL_HOURS.value)) / hourly  # fmt: skip
        # Below zero the hours kept on the brokers and the open segments alone overfill the volume:
        # no stall is survived at all, which the row says in words, not as negative hours.
        full = held < 0
        rows.append(Constraint(
            f"msk: hours of stalled copying to the remote tier before a broker's volume fills (auto scaling not "
            f"counted), at {workload.messages_per_second:,.0f} msg/s", TIERED_STALL_HOURS.value, max(held, 0.0), "hours",
            (f"the {local_hours:g} h kept on the brokers and their open segments alone overfill the volume, before "
             "any stall; " if full else "")
            + f"use {broker_count} x {min(MAX_STORAGE_PER_BROKER.value, math.ceil(stall_gib / 100) * 100):,.0f} GiB "
            "(ebs_volume_gib)"))  # fmt: skip
        rows.append(Constraint("msk: tiered topic retention (MSK's minimum for remote storage)",
                               TIERED_MIN_RETENTION.value, retention_hours, "hours",
                               f"keep at least {TIERED_MIN_RETENTION.value:g} h on the topic or do not tier it",
                               rule=True))  # fmt: skip
        if kafka_version is not None:
            rows.append(Constraint("msk: Kafka version for tiered storage", TIERED_MIN_KAFKA.value,
                                   _kafka_version(kafka_version), "version", "use Kafka 3.6 or later",
                                   rule=True))  # fmt: skip
    return rows


def _kafka_version(text: str) -> float:
    """"3.9.x", "3.10.x.kraft" -> 3.09, 3.10: minor versions compare as numbers (3.10 is after 3.9)."""
    major, minor = text.split(".")[:2]
    return int(major) + int(minor) / 100


def _next_instance(instance_type: str) -> str | None:
    family = [k for k in STANDARD_BROKERS if k.split(".")[1] == instance_type.split(".")[1]]
    index = family.index(instance_type)
    return family[index + 1] if index + 1 < len(family) else None


def msk_express_constraints(workload: Workload, *, broker_instance_type: str, broker_count: int, partitions: int,
                            retention_hours: float) -> list[Constraint]:  # fmt: skip
    """MSK Express brokers: per-broker ingress and egress against the recommended (sustained)
    figures with one zone down, partition replicas (replication is always 3), storage managed."""
    spec = EXPRESS_BROKERS.get(broker_instance_type)
    if spec is None:
        raise ValueError(f"no capacity figures for {broker_instance_type}; known: {', '.join(EXPRESS_BROKERS)}")
    live = _live_brokers(broker_count)
    ingress = workload.peak_mib_s / live
    egress = workload.peak_mib_s * workload.consumer_groups / live
    egress_limit = spec["ingress"] * EXPRESS_EGRESS_PER_INGRESS.value
    replication = int(EXPRESS_REPLICATION.value)
    replicas = replicas_per_broker(partitions, replication, broker_count)

    def brokers(need: float, limit: float) -> int:
        return _brokers_for_total(need * live, limit)

    stored = workload.gib_per_hour() * retention_hours * replication
    return [
        Constraint("msk express: ingress per broker at peak, one zone down", ingress, spec["ingress"], "MiB/s",
                   f"use {brokers(ingress, spec['ingress'])} Express brokers"),
        Constraint("msk express: egress per broker at peak, one zone down", egress, egress_limit, "MiB/s",
                   f"use {brokers(egress, egress_limit)} Express brokers"),
        Constraint("msk express: partition replicas per broker", replicas, spec["partitions"], "replicas",
                   f"use {_round_up_to_zones(math.ceil(partitions * replication / spec['partitions']))} Express brokers"),
        Constraint(f"msk express: storage for {retention_hours:g} h (managed; billed per GiB-month)", stored, math.inf,
                   "GiB"),
    ]  # fmt: skip


# --- the Flink sink -----------------------------------------------------------------------------


def kpus_needed(workload: Workload) -> int:
    per_kpu = SINK_RECORDS_PER_SUBTASK.value * SINK_CPU_CEILING.value
    return max(1, math.ceil(workload.peak_messages_per_second / per_kpu))


def sink_constraints(workload: Workload, *, parallelism: int, parallelism_per_kpu: int,
                     partitions: int) -> list[Constraint]:  # fmt: skip
    """The sink's records/s at the peak rate. A KPU is one vCPU; the measured figure is one
    subtask on one core, so a KPU carries it whatever its parallelism_per_kpu (more subtasks share
    the same vCPU). Planned below the CPU at which Managed Flink would start scaling."""
    kpus = math.ceil(parallelism / parallelism_per_kpu)
    per_kpu = SINK_RECORDS_PER_SUBTASK.value * SINK_CPU_CEILING.value
    need = kpus_needed(workload)
    return [
        Constraint("sink: KPUs at peak", need, kpus, "KPU",
                   f"set telemetry_sink.parallelism to {need * parallelism_per_kpu} "
                   f"({need} KPU at {per_kpu:,.0f} records/s each)"),
        # A Kafka source reads each partition with one subtask: fewer partitions leave subtasks idle.
        Constraint("sink: topic partitions for the subtasks the peak needs", need, partitions, "partitions",
                   f"give the topic at least {need} partitions"),
    ]  # fmt: skip


# --- network paths ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Flow:
    """A stream of the data path and what it crosses on its way (stacks/constructs/platform_network.py)."""

    name: str
    crosses: str  # "vpc" (stays inside), "s3-gateway", "nat", "interface-endpoint"
    bytes_per_message: Callable[[Workload], float]


DATA_PATH = (
    # Producers on the fleet hosts (private subnets) reach the brokers (isolated subnets) directly.
    Flow("fleet producers to brokers", "vpc", lambda w: w.message_bytes / w.compression_ratio * (1 - w.iot_share)),
    # The IoT rule's Kafka action writes through its VPC destination's interfaces in the VPC.
    Flow("AWS IoT rule to brokers", "vpc", lambda w: w.message_bytes * w.iot_share),
    Flow("brokers to the Flink sink", "vpc", lambda w: w.message_bytes / w.compression_ratio),
    # The sink's writes to S3 take the gateway endpoint (route tables of every subnet), not NAT.
    Flow("Flink sink to S3 (Parquet)", "s3-gateway", lambda w: 16.0),  # estimate.py parquet_bytes_per_message
)


def network_path_constraints(workload: Workload, *, nat_gateways: int,
                             flows: Sequence[Flow] = DATA_PATH) -> list[Constraint]:  # fmt: skip
    """NAT gateways and interface endpoints carry no message of the data path as designed; a flow
    moved onto either shows here with its peak bandwidth, against one gateway's (one per zone)."""

    def gbps(kind: str) -> float:
        per_message = sum(f.bytes_per_message(workload) for f in flows if f.crosses == kind)
        return per_message * workload.peak_messages_per_second * 8 / 1e9

    return [
        Constraint("network: telemetry through a NAT gateway at peak", gbps("nat") / max(1, nat_gateways),
                   NAT_BANDWIDTH.value, "Gbps", "route it through a VPC endpoint or spread it over more zones"),
        Constraint("network: telemetry through an interface endpoint at peak, per zone",
                   gbps("interface-endpoint") / AVAILABILITY_ZONES, ENDPOINT_BANDWIDTH.value, "Gbps",
                   "ask AWS Support for more endpoint bandwidth"),
    ]  # fmt: skip


# --- AWS IoT Core -------------------------------------------------------------------------------


def iot_constraints(workload: Workload, *, publish_quota_per_s: float, connect_quota_per_s: float,
                    reconnect_window_s: float = 600) -> list[Constraint]:  # fmt: skip
    """The device side as the fleet plan checks it (stacks/fleet_plan.py's quotas), for the
    messages devices send through AWS IoT Core; plus how long the whole population takes to
    reconnect at the account's CONNECT quota, against reconnect_window_s."""

    rate = workload.peak_messages_per_second * workload.iot_share
    if rate == 0:
        return []
    devices = max(1, workload.devices)
    per_device = rate / devices
    return [
        Constraint("iot: inbound publishes per second per account at peak", rate, publish_quota_per_s, "publishes/s",
                   f"raise the quota to {math.ceil(rate):,} (Service Quotas) and device_gateway.publish_quota_per_s"),
        Constraint("iot: rule executions per second per account at peak", rate, fleet_plan.IOT_RULE_EXECUTIONS_PER_S,
                   "executions/s", f"raise the quota to {math.ceil(rate):,} (Service Quotas)"),
        Constraint("iot: publishes per second per connection", per_device, fleet_plan.IOT_PUBLISHES_PER_CONNECTION_S,
                   "publishes/s", f"spread over at least {math.ceil(rate / fleet_plan.IOT_PUBLISHES_PER_CONNECTION_S):,} devices"),
        Constraint("iot: bytes per second per connection", per_device * workload.message_bytes,
                   fleet_plan.IOT_BYTES_PER_CONNECTION_S, "bytes/s", "spread over more devices"),
        Constraint("iot: concurrent connections per account", workload.devices,
                   fleet_plan.IOT_CONCURRENT_CONNECTIONS, "connections", "raise the quota (Service Quotas)"),
        Constraint("iot: seconds for every device to reconnect at the CONNECT quota", workload.devices /
                   connect_quota_per_s, reconnect_window_s, "s",
                   f"raise the CONNECT quota to {math.ceil(workload.devices / reconnect_window_s):,}/s "
                   "and device_gateway.connect_quota_per_s"),
    ]  # fmt: skip


# --- designs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MskDesign:
    kind: str  # "standard", "tiered" or "express"
    broker_instance_type: str
    broker_count: int
    ebs_volume_gib: float = 0  # standard and tiered
    primary_retention_hours: float | None = None  # tiered

    def describe(self) -> str:
        if self.kind == "express":
            return f"{self.broker_count} x {self.broker_instance_type} (Express, storage managed)"
        text = f"{self.broker_count} x {self.broker_instance_type} with {self.ebs_volume_gib:,.0f} GiB"
        if self.kind == "tiered":
            text += f", tiered storage behind {self.primary_retention_hours:g} h on brokers"
        return text


def msk_constraints(workload: Workload, design: MskDesign, *, partitions: int, replication_factor: int,
                    retention_hours: float, fill_percent: float = 70,
                    kafka_version: str | None = None) -> list[Constraint]:  # fmt: skip
    if design.kind == "express":
        return msk_express_constraints(workload, broker_instance_type=design.broker_instance_type,
                                       broker_count=design.broker_count, partitions=partitions,
                                       retention_hours=retention_hours)  # fmt: skip
    return msk_standard_constraints(
        workload, broker_instance_type=design.broker_instance_type, broker_count=design.broker_count,
        ebs_volume_gib=design.ebs_volume_gib, partitions=partitions, replication_factor=replication_factor,
        retention_hours=retention_hours, fill_percent=fill_percent,
        primary_retention_hours=design.primary_retention_hours if design.kind == "tiered" else None,
        kafka_version=kafka_version,
    )  # fmt: skip


@dataclass(frozen=True)
class Candidate:
    design: MskDesign
    assessment: Assessment
    # What a price table multiplies: broker-hours a month, GiB-months on brokers, in the remote tier
    # (tiered) or in Express's managed storage, and GiB written a month (Express data in).
    quantities: dict[str, float] = field(default_factory=dict)


HOURS_PER_MONTH = 730


def quantities(workload: Workload, design: MskDesign, retention_hours: float) -> dict[str, float]:
    """What a price table multiplies for the design at the workload (Candidate.quantities)."""
    gib_hour = workload.gib_per_hour()
    quantities = {"broker_hours": design.broker_count * HOURS_PER_MONTH}
    if design.kind == "express":
        # Express storage is billed on the data retained, one copy: msk_sizing.py's
        # calculate_express_sizing (data in x retention hours), following the pricing page.
        quantities["express_storage_gib_month"] = gib_hour * retention_hours
        quantities["express_data_in_gib"] = gib_hour * HOURS_PER_MONTH
    else:
        quantities["ebs_gib_month"] = design.broker_count * design.ebs_volume_gib
        if design.kind == "tiered":
            quantities["tiered_gib_month"] = remote_tier_gib(workload, retention_hours)
    return quantities


def stalled_volume_gib(workload: Workload, *, local_hours: float, partitions: int, replication_factor: int,
                       broker_count: int, stall_hours: float = TIERED_STALL_HOURS.value) -> float:  # fmt: skip
    """The volume the fullest broker of a tiered topic fills after `stall_hours` of stalled copying
    on top of its local retention, its open (128 MiB) segments counted: full, not at a target."""
    hourly = broker_gib_per_hour(workload, partitions=partitions, replication_factor=replication_factor,
                                 broker_count=broker_count)  # fmt: skip
    return hourly * (local_hours + stall_hours) + open_segments_gib(partitions, replication_factor, broker_count,
                                                                    TIERED_SEGMENT_BYTES_DEFAULT.value)  # fmt: skip


def remote_tier_gib(workload: Workload, retention_hours: float) -> float:
    """What the remote tier keeps of a tiered topic: one copy of its whole retention. Kafka copies
    each segment to the remote tier once it is rolled, not once local retention deletes it
    (KIP-405; RemoteLogManager's copy task takes every segment below the active one), so the hours
    still on the brokers are in the remote tier too. msk_sizing.py counts only the hours beyond
    the local retention; this is the larger, what the tier holds."""
    return workload.gib_per_hour() * retention_hours


def propose(workload: Workload, *, partitions: int, replication_factor: int, retention_hours: float,
            fill_percent: float = 70, instance_types: Sequence[str] = ("kafka.m7g.large", "kafka.m7g.xlarge"),
            express_types: Sequence[str] = ("express.m7g.large", "express.m7g.xlarge"),
            primary_retention_hours: float = 6, max_brokers: int = 60) -> list[Candidate]:  # fmt: skip
    """The smallest sound design of each kind: Standard with larger EBS, Standard with tiered
    storage behind a short primary retention, Express. Smallest means fewest brokers, then the
    smaller instance, then the smaller volume (rounded up to 100 GiB). Pricing them is the
    caller's (`cheapest`)."""
    found: list[Candidate] = []
    kinds = [("standard", instance_types), ("express", express_types)]
    if retention_hours > primary_retention_hours and retention_hours >= TIERED_MIN_RETENTION.value:
        kinds.insert(1, ("tiered", instance_types))
    for kind, types in kinds:
        best = None
        for count in range(AVAILABILITY_ZONES, max_brokers + 1, AVAILABILITY_ZONES):
            for instance in types:
                design = _sized(workload, kind, instance, count, partitions=partitions,
                                replication_factor=replication_factor, retention_hours=retention_hours,
                                fill_percent=fill_percent, primary_retention_hours=primary_retention_hours)  # fmt: skip
                assessment = assess(msk_constraints(workload, design, partitions=partitions,
                                                    replication_factor=replication_factor,
                                                    retention_hours=retention_hours,
                                                    fill_percent=fill_percent))  # fmt: skip
                if assessment.ok:
                    best = Candidate(design, assessment, quantities(workload, design, retention_hours))
                    break
            if best:
                break
        if best:
            found.append(best)
    return found


def _sized(workload: Workload, kind: str, instance: str, count: int, *, partitions: int, replication_factor: int,
           retention_hours: float, fill_percent: float, primary_retention_hours: float) -> MskDesign:  # fmt: skip
    if kind == "express":
        return MskDesign("express", instance, count)
    local = primary_retention_hours if kind == "tiered" else retention_hours
    replicas = replicas_per_broker(partitions, replication_factor, count)
    segments = replicas * TIERED_SEGMENT_BYTES_DEFAULT.value / 1024 if kind == "tiered" else None
    volume = volume_needed_gib(workload, hours=local, partitions=partitions, replication_factor=replication_factor,
                               broker_count=count, fill_percent=fill_percent, extra_gib=segments)  # fmt: skip
    if kind == "tiered":  # and a stalled copy's day on top of the local retention
        volume = max(volume, stalled_volume_gib(workload, local_hours=local, partitions=partitions,
                                                replication_factor=replication_factor, broker_count=count))  # fmt: skip
    volume = max(1.0, min(MAX_STORAGE_PER_BROKER.value, math.ceil(volume / 100) * 100))
    return MskDesign(kind, instance, count, volume, primary_retention_hours if kind == "tiered" else None)


def cheapest(candidates: Sequence[Candidate], monthly_usd: Callable[[Candidate], float | None]) -> Candidate | None:
    """The candidate with the lowest monthly price; one the price function cannot price is skipped."""
    priced = [(usd, c) for c in candidates if (usd := monthly_usd(c)) is not None]
    return min(priced, key=lambda pair: pair[0])[1] if priced else None
