"""An environment's declared workload (cdk.json `workload`) against what it provisions: the
capacity model (stacks/capacity.py) fed from the environment's configuration.

Synthesis refuses an environment whose declared workload does not fit (platform.build_platform),
`telemetry capacity` prints every constraint, and `telemetry cost` says when a rate it prices is
outside what the environment was sized for. The brokers hold every declared topic, but the
workload is the telemetry topic's: the one the Flink sink reads (telemetry_sink.topic), whose
partitions, replication and retention the MSK constraints take.
"""

from __future__ import annotations

from stacks import capacity
from stacks.config import EnvironmentConfig, TopicConfig


def workload_of(config: EnvironmentConfig, *, rate: float | None = None) -> capacity.Workload:
    """The declared workload; with `rate`, the same workload at that average and peak rate."""
    declared = config.workload
    average = declared.messages_per_second if rate is None else rate
    peak = declared.peak_messages_per_second if rate is None else rate
    return capacity.Workload(
        messages_per_second=average,
        peak_messages_per_second=peak,
        message_bytes=declared.message_bytes,
        compression_ratio=declared.compression_ratio,
        consumer_groups=declared.consumer_groups,
        devices=declared.devices,
        iot_share=declared.iot_share,
    )


def sink_topic(config: EnvironmentConfig) -> TopicConfig:
    return next(t for t in config.msk.topics if t.name == config.telemetry_sink.topic)


def local_hours(config: EnvironmentConfig, topic: TopicConfig) -> float:
    """The hours of a topic its brokers keep: all of them, or the local retention of a tiered topic."""
    tiered = config.msk.tiered_storage
    return tiered.local_retention_hours if config.msk.tiered(topic) else topic.retention_hours


def segment_bytes(config: EnvironmentConfig, topic: TopicConfig) -> int:
    """The segment size of a topic: what `telemetry topics` declares on a tiered topic (the model's
    tiered segment row, above MSK's 48 MiB minimum), else the brokers' default (Kafka's 1 GiB)."""
    row = capacity.TIERED_SEGMENT_BYTES_DEFAULT if config.msk.tiered(topic) else capacity.KAFKA_SEGMENT_BYTES
    return int(row.value) * capacity.MIB


def constraints(config: EnvironmentConfig, workload: capacity.Workload) -> list[capacity.Constraint]:
    topic = sink_topic(config)
    msk = config.msk
    return [
        *capacity.msk_standard_constraints(
            workload,
            broker_instance_type=msk.broker_instance_type,
            broker_count=msk.broker_count,
            ebs_volume_gib=msk.ebs_volume_gib,
            partitions=topic.partitions,
            replication_factor=topic.replication_factor,
            retention_hours=topic.retention_hours,
            fill_percent=msk.storage_autoscaling_target_percent,
            primary_retention_hours=local_hours(config, topic) if msk.tiered(topic) else None,
            kafka_version=msk.kafka_version,
        ),
        *capacity.sink_constraints(
            workload,
            parallelism=config.telemetry_sink.parallelism,
            parallelism_per_kpu=config.telemetry_sink.parallelism_per_kpu,
            partitions=topic.partitions,
        ),
        *capacity.network_path_constraints(workload, nat_gateways=config.network.nat_gateways),
        *capacity.iot_constraints(
            workload,
            publish_quota_per_s=config.device_gateway.publish_quota_per_s,
            connect_quota_per_s=config.device_gateway.connect_quota_per_s,
        ),
    ]


def assess_environment(config: EnvironmentConfig, *, rate: float | None = None) -> capacity.Assessment:
    return capacity.assess(constraints(config, workload_of(config, rate=rate)))


def retention_hours_held(config: EnvironmentConfig, *, rate: float | None = None) -> float:
    """How many hours of the sink topic the brokers hold at the rate, at the storage auto scaling
    target (below the disk alarm). For a tiered topic that is what stays local: the remote tier
    keeps the rest of its retention."""
    topic = sink_topic(config)
    msk = config.msk
    return capacity.retention_hours_held(
        workload_of(config, rate=rate), partitions=topic.partitions, replication_factor=topic.replication_factor,
        broker_count=msk.broker_count, ebs_volume_gib=msk.ebs_volume_gib, fill_percent=msk.storage_autoscaling_target_percent,
        segment_mib=segment_bytes(config, topic) / capacity.MIB,
    )  # fmt: skip


# The guard on what each declared topic keeps on the brokers (`telemetry topics` sets it):
# retention.bytes, or local.retention.bytes on a tiered topic (Kafka topic configuration:
# "local.retention.bytes: the maximum size of local log segments that can grow for a partition
# before it deletes the old segments"; the remote tier is not on the brokers' volumes). It is per
# partition, and Kafka deletes whole closed segments past it, so a partition can hold up to one
# segment more ("retention.bytes": "the maximum size a partition ... can grow to before we will
# discard old log segments"; log.segment.bytes defaults to 1 GiB, which the brokers' configuration
# keeps, msk_cluster.server_properties; a tiered topic declares its own, segment_bytes). Sized so
# that every partition replica a broker holds, at the guard plus one segment, fits in GUARD_PERCENT
# of a volume:
# - a tiered topic's local.retention.bytes: of the provisioned volume. What it deletes is in the
#   remote tier already (only copied segments are deleted locally, KIP-405), so it may act early,
#   and it must: storage auto scaling grows a volume at most every six hours ("Automatic scaling
#   for Amazon MSK storage"), and a guard sized on its ceiling would let the disk fill first.
# - an untiered topic's retention.bytes: of the volume storage auto scaling may grow to, since what
#   it deletes is gone; the disk alarm (85% of the current volume) pages long before, and it only
#   ever deletes data when auto scaling has reached its ceiling and nobody acted.
GUARD_PERCENT = 95
SEGMENT_BYTES = int(capacity.KAFKA_SEGMENT_BYTES.value) * capacity.MIB  # the model's open-segment row


def retention_bytes_guard(config: EnvironmentConfig, topic: TopicConfig | None = None) -> int:
    """The guard for `topic` (default: the sink topic)."""
    msk = config.msk
    topic = topic or sink_topic(config)
    replicas = sum(t.partitions * t.replication_factor for t in msk.topics)
    per_broker = -(-replicas // msk.broker_count)  # the fullest broker, replicas spread evenly
    key, volume_gib = (("ebs_volume_gib", msk.ebs_volume_gib) if msk.tiered(topic)
                       else ("storage_autoscaling_max_gib", msk.storage_autoscaling_max_gib))  # fmt: skip
    usable = volume_gib * 1024**3 * GUARD_PERCENT // 100
    guard = usable // per_broker - segment_bytes(config, topic)
    if guard <= 0:
        raise ValueError(
            f"msk.{key} {volume_gib} leaves no room for a {'local.' if msk.tiered(topic) else ''}retention.bytes "
            f"guard over {per_broker} partition replicas per broker"
        )
    return guard


def autoscaled_volume_gib(config: EnvironmentConfig, *, rate: float, provisioned: float | None = None) -> float:
    """The volume per broker storage auto scaling settles at for `rate`: the topic's retention at
    that rate, with its open segments, held at the scaling target (msk_cluster._storage_autoscaling),
    never below the provisioned volume (the template's, default the config's: it does not shrink)
    nor above its ceiling. What `telemetry cost` prices."""
    topic = sink_topic(config)
    msk = config.msk
    held = capacity.volume_needed_gib(
        workload_of(config, rate=rate), hours=local_hours(config, topic), partitions=topic.partitions,
        replication_factor=topic.replication_factor, broker_count=msk.broker_count,
        fill_percent=msk.storage_autoscaling_target_percent,
        extra_gib=capacity.open_segments_gib(topic.partitions, topic.replication_factor, msk.broker_count,
                                             segment_bytes(config, topic) / capacity.MIB),
    )  # fmt: skip
    floor = float(msk.ebs_volume_gib if provisioned is None else provisioned)
    return min(float(msk.storage_autoscaling_max_gib), max(floor, held))


def remote_tier_gib(config: EnvironmentConfig, *, rate: float | None = None) -> float:
    """GiB the remote tier holds of the sink topic at the rate (0 when it is not tiered)."""
    topic = sink_topic(config)
    if not config.msk.tiered(topic):
        return 0.0
    return capacity.remote_tier_gib(workload_of(config, rate=rate), topic.retention_hours)


# The bytes-in alarm (msk_monitoring.MskMonitoring): a broker taking in more than sizing assumed
# pages before its disk fills (a compression ratio declared too high, or more messages than the
# workload declares). What a broker's volume fills with is what it takes in: its leaders' writes
# from clients plus its followers' copies from the other leaders, RF copies of the topic spread over
# the brokers; the fullest broker holds replicas_per_broker of them. The margin is the model's own:
# it sizes each broker's throughput for the peak with one zone down, AVAILABILITY_ZONES/(zones - 1)
# = 1.5x a broker's share with every zone up (capacity.msk_standard_constraints, "one zone down").
# A zone down does not raise what a broker takes in (Kafka does not move the lost replicas: a
# follower elected leader takes from clients what it copied before), so the alarm fires only when
# the data is 1.5x what sizing assumed: at the declared peak, a ratio 1.5x too optimistic.
BYTES_IN_ALARM_MARGIN = capacity.AVAILABILITY_ZONES / (capacity.AVAILABILITY_ZONES - 1)
# ReplicationBytesInPerSec is published from PER_BROKER up (Amazon MSK Developer Guide, "Amazon MSK
# metrics for monitoring Standard brokers with CloudWatch", PER_BROKER level: "The number of bytes
# per second received from other brokers", dimensions Cluster Name, Broker ID); at DEFAULT only
# BytesInPerSec is (DEFAULT level: "received from clients ... available per broker and also per
# topic"). The DEFAULT row was read on the guide (its translated page); the PER_BROKER row as the
# guide's table is copied in awslabs/mcp's MSK server (metric_config.py), the English page itself not
# being readable here. At DEFAULT the alarm counts the fullest broker's leaders only.
REPLICATION_METRIC_LEVELS = ("PER_BROKER", "PER_TOPIC_PER_BROKER", "PER_TOPIC_PER_PARTITION")


def bytes_in_counts_replication(config: EnvironmentConfig) -> bool:
    """Whether the environment's monitoring level publishes ReplicationBytesInPerSec per broker."""
    return config.msk.enhanced_monitoring in REPLICATION_METRIC_LEVELS


def broker_bytes_in_alarm_bytes_s(config: EnvironmentConfig) -> float:
    """Bytes per second into one broker above which the bytes-in alarm fires: the fullest broker's
    share of the sink topic at the declared peak rate, compressed at workload.compression_ratio
    (capacity.Workload.peak_mib_s), times BYTES_IN_ALARM_MARGIN. Its share is its partition
    replicas (leaders and followers, what BytesInPerSec plus ReplicationBytesInPerSec measure), or
    its leaders alone where the monitoring level does not publish replication (DEFAULT)."""
    topic = sink_topic(config)
    workload = workload_of(config)
    copies = topic.replication_factor if bytes_in_counts_replication(config) else 1
    mib_s = capacity.fullest_broker_mib_s(workload, workload.peak_messages_per_second, partitions=topic.partitions,
                                          replication_factor=copies, broker_count=config.msk.broker_count)  # fmt: skip
    return mib_s * capacity.MIB * BYTES_IN_ALARM_MARGIN
