"""The capacity model: each constraint refuses a load it cannot hold and passes one it can, the
three workloads of issue #30 come out as derived by hand below, and every limit names its page.

Hand derivations (compression_ratio 10.02, measured by devtools/measure_compression.py; peak =
average; one consumer group; replication 3; every message produced to Kafka, none through AWS IoT
Core; MiB = 2^20 bytes, GiB = 2^30). Storage: the fullest broker's share of the retention plus one
open 1 GiB segment per replica, filled to the 70% storage auto scaling target.

POC, 73,800 msg/s x 512 B, 168 h, 48 partitions:
  broker bytes/s = 73,800 x 512 / 10.02 = 3,770,778 B/s = 3.596 MiB/s; x 3,600 / 1,024 = 12.64 GiB/h
  prod before sizing (6 x kafka.m7g.xlarge, 1,000 GiB): fullest broker holds 48 x 3 / 6 = 24
  replicas, half the topic: (6.32 GiB/h x 168 h + 24 GiB) / 0.70 = 1,551 GiB > 1,000: refused;
  it holds (1,000 x 0.70 - 24) / 6.32 = 106.9 h; 6 x 1,600 GiB holds the 168 h.
  smallest Standard: 3 x kafka.m7g.large, every broker all 48 x 3 / 3 = 48 replicas:
  (12.64 x 168 + 48) / 0.70 = 3,102 GiB -> 3,200 GiB; volume writes with a zone down
  3.596 x 3 / 2 live = 5.39 MiB/s, plus AWS's reserves for lagging consumers and reassignment
  3.596 / 3 x (0.5 + 3.0) = 4.20: 9.59 MiB/s against 78.75 MB/s = 75.1 MiB/s x 0.5 = 37.6.
  tiered (6 h on brokers): (12.64 x 6 + 48 open segments x 128 MiB = 6 GiB) / 0.70 = 117 GiB -> 200 GiB.
  Express: 3 x express.m7g.large, ingress 3.596 / 2 live = 1.80 MiB/s against 15.625.
  sink: 73,800 / (84,000 x 0.75 = 63,000 per KPU) -> 2 KPU.
5,000 msg/s x 1,024 B, 72 h, 24 partitions:
  0.4873 MiB/s = 1.713 GiB/h; 3 brokers hold all 72 replicas: (1.713 x 72 + 24) / 0.70 = 211 -> 300 GiB.
  sink: 1 KPU.
200,000 msg/s x 256 B, 24 h, 48 partitions:
  4.873 MiB/s = 17.13 GiB/h; (17.13 x 24 + 48) / 0.70 = 656 -> 700 GiB on 3 x kafka.m7g.large;
  24 h is below the 72 h MSK requires of a tiered topic, so no tiered design is offered.
  sink: 200,000 / 63,000 -> 4 KPU.
"""

from __future__ import annotations

import math

import pytest

from stacks import capacity
from stacks.capacity import (
    DATA_PATH,
    Flow,
    MskDesign,
    Workload,
    assess,
    iot_constraints,
    msk_constraints,
    msk_express_constraints,
    msk_standard_constraints,
    network_path_constraints,
    propose,
    sink_constraints,
)

RATIO = 10.02
POC = Workload(73_800, 73_800, 512, RATIO, 1, 100_000)
MEDIUM = Workload(5_000, 5_000, 1024, RATIO, 1, 50_000)
HIGH = Workload(200_000, 200_000, 256, RATIO, 1, 100_000)
PROD = dict(broker_instance_type="kafka.m7g.xlarge", broker_count=6, ebs_volume_gib=1000, partitions=48,
            replication_factor=3, retention_hours=168)  # fmt: skip


def by_name(rows, prefix):
    return next(row for row in rows if row.name.startswith(prefix))


def standard(workload, **overrides):
    return msk_standard_constraints(workload, **{**PROD, **overrides})


# --- limits -------------------------------------------------------------------------------------


def test_every_limit_names_its_page_url_and_date():
    rows = capacity.limits()
    assert len(rows) > 40
    for row in rows:
        assert row.page and row.url and row.read_on == "2026-11-26", row
        assert row.value > 0, row
    names = [row.name for row in rows]
    assert len(names) == len(set(names))


def test_the_iot_quotas_are_the_fleet_plans():
    from stacks import fleet_plan

    values = {row.name: row.value for row in capacity.limits()}
    assert values["AWS IoT Core publishes per second per connection (fixed)"] == fleet_plan.IOT_PUBLISHES_PER_CONNECTION_S
    assert values["AWS IoT Core concurrent connections per account (adjustable)"] == fleet_plan.IOT_CONCURRENT_CONNECTIONS


# --- MSK Standard -------------------------------------------------------------------------------


def test_volume_throughput_refuses_a_rate_three_large_brokers_cannot_write():
    heavy = Workload(400_000, 400_000, 1024, 1.0, 1, 1)  # 390.6 MiB/s x 3 / 2 live = 586 per broker
    rows = standard(heavy, broker_instance_type="kafka.m7g.large", broker_count=3, ebs_volume_gib=16_384,
                    retention_hours=1)  # fmt: skip
    row = by_name(rows, "msk: volume throughput")
    assert not row.ok and row.provided == pytest.approx(78.75 * 1e6 / 2**20 * 0.5)  # the EC2 table's MB/s
    assert "brokers" in row.fix
    assert by_name(standard(POC), "msk: volume throughput").ok


def test_network_out_counts_replication_and_every_consumer_group():
    # 20 MiB/s at peak, 10 groups, RF 3: (2 + 10) x 20 / 4 live = 60 MiB/s out per broker, plus the
    # reserves 20 / 6 x 3.5 = 11.67: 71.67 against 117 MB/s x 0.5 = 55.8 MiB/s; volume writes
    # 3 x 20 / 4 + 11.67 = 26.67 against 37.6 stay fine. With 7 groups: 45 + 11.67 = 56.67, refused;
    # with 6: 51.67, held.
    fan_out = Workload(20 * 2**20 / 512, 20 * 2**20 / 512, 512, 1.0, 10, 1)
    rows = standard(fan_out, broker_instance_type="kafka.m7g.large", broker_count=6, ebs_volume_gib=16_384,
                    retention_hours=1)  # fmt: skip
    assert by_name(rows, "msk: volume throughput").ok
    network = by_name(rows, "msk: network out")
    assert network.need == pytest.approx(60 + 20 / 6 * 3.5) and not network.ok
    seven = Workload(fan_out.messages_per_second, fan_out.messages_per_second, 512, 1.0, 7, 1)
    assert not by_name(standard(seven, broker_instance_type="kafka.m7g.large", broker_count=6, ebs_volume_gib=16_384,
                                retention_hours=1), "msk: network out").ok  # fmt: skip
    fewer = Workload(fan_out.messages_per_second, fan_out.messages_per_second, 512, 1.0, 6, 1)
    assert by_name(standard(fewer, broker_instance_type="kafka.m7g.large", broker_count=6, ebs_volume_gib=16_384,
                            retention_hours=1), "msk: network out").ok  # fmt: skip


# AWS's factors (msk_sizing.py d6ad2e44): volume I/O per MiB/s of a broker's share of the peak,
# STORAGE_IO_FACTOR_BASE 6.5 (+ STORAGE_IO_FACTOR_TS_ADD 1.5 when tiered); network out
# NETWORK_IO_BASE 5.7 (+ NETWORK_IO_TS_ADD 1.5) + 1.5 per consumer group (fan-out x AZ_SCALE_FACTOR).
@pytest.mark.parametrize("groups", [1, 2, 5])
@pytest.mark.parametrize("tiered", [False, True])
@pytest.mark.parametrize("replication", [3, 4])
def test_throughput_reserves_at_least_what_aws_sizing_reserves(groups, tiered, replication):
    share = 10.0  # MiB/s of the peak per broker with all six up
    load = Workload(share * 6 * 2**20 / 512, share * 6 * 2**20 / 512, 512, 1.0, groups, 1)
    rows = standard(load, replication_factor=replication, retention_hours=168,
                    primary_retention_hours=12 if tiered else None)  # fmt: skip
    aws_volume = 6.5 + (1.5 if tiered else 0.0)
    aws_network = 5.7 + (1.5 if tiered else 0.0) + 1.5 * groups
    volume, network = by_name(rows, "msk: volume throughput").need, by_name(rows, "msk: network out").need
    assert volume / share >= aws_volume and network / share >= aws_network
    # at replication 3 with one group and no tiering: 4.5 + 3.5 = 8.0 and 4.5 + 3.5 = 8.0
    if (replication, groups, tiered) == (3, 1, False):
        assert (volume / share, network / share) == (pytest.approx(8.0), pytest.approx(8.0))


def test_partition_replicas_per_broker_against_the_recommended_maximum():
    crowded = by_name(standard(POC, partitions=1200, broker_count=3), "msk: partition replicas")
    assert crowded.need == 1200 and crowded.provided == 1000 and not crowded.ok
    assert crowded.fix.startswith("use 6 brokers")
    assert by_name(standard(POC), "msk: partition replicas").need == 24


def test_prod_as_shipped_cannot_keep_168_hours_of_the_poc_rate():
    storage = by_name(standard(POC), "msk: broker storage")
    assert storage.need == pytest.approx(1551, abs=1) and storage.provided == 1000 and not storage.ok
    assert "enable tiered storage with at most 106 h on brokers" in storage.fix
    assert "use 6 x 1,600 GiB" in storage.fix
    held = capacity.retention_hours_held(POC, partitions=48, replication_factor=3, broker_count=6,
                                         ebs_volume_gib=1000, fill_percent=70)  # fmt: skip
    assert math.floor(held) == 106
    assert by_name(standard(POC, ebs_volume_gib=1600), "msk: broker storage").ok


def test_the_storage_fix_leaves_out_tiered_storage_below_its_minimum_retention():
    storage = by_name(standard(HIGH, broker_count=3, ebs_volume_gib=100, retention_hours=24), "msk: broker storage")
    assert not storage.ok and "tiered" not in storage.fix and "use 3 x 700 GiB" in storage.fix


def test_the_refusal_is_one_line_naming_the_constraint_and_its_fix():
    line = assess(standard(POC)).refusal()
    assert "\n" not in line
    assert line.startswith("msk: broker storage for 168 h at 73,800 msg/s")
    assert "1,000 provided" in line and "enable tiered storage" in line
    assert assess(standard(POC, ebs_volume_gib=1600)).refusal() is None


def test_tiered_storage_keeps_only_the_primary_hours_on_brokers():
    rows = standard(POC, primary_retention_hours=6)
    assert by_name(rows, "msk: broker storage for 6 h").ok
    assert by_name(rows, "msk: tiered topic retention").ok
    uploads = by_name(rows, "msk: volume throughput").need
    assert uploads > by_name(standard(POC), "msk: volume throughput").need  # segments read back for upload


def test_a_volume_the_local_hours_alone_overfill_says_so_in_words_not_negative_hours():
    # Uncompressed, prod's 12 local hours on 300 GiB: 12.6 GiB/h x 12 h and the open segments are
    # past the volume before any stall (the issue's -7.31 h).
    raw = Workload(73_800, 73_800, 512, 1.0, 2, 3_000)
    row = by_name(standard(raw, ebs_volume_gib=300, primary_retention_hours=12), "msk: hours of stalled copying")
    assert not row.ok and row.provided == 0.0
    assert row.fix.startswith("the 12 h kept on the brokers and their open segments alone overfill the volume, before any stall; use")
    assert "-" not in row.line().split("provided")[1].split("(")[0]


def test_tiered_storage_refuses_a_topic_kept_less_than_three_days():
    row = by_name(standard(HIGH, retention_hours=24, primary_retention_hours=6), "msk: tiered topic retention")
    assert not row.ok and row.need == 72


def test_tiered_storage_needs_kafka_3_6():
    old = by_name(standard(POC, primary_retention_hours=6, kafka_version="3.5.x"), "msk: Kafka version")
    assert not old.ok
    assert by_name(standard(POC, primary_retention_hours=6, kafka_version="3.9.x"), "msk: Kafka version").ok


# --- Express ------------------------------------------------------------------------------------


def express(workload, **overrides):
    values = dict(broker_instance_type="express.m7g.large", broker_count=3, partitions=48, retention_hours=168)
    return msk_express_constraints(workload, **{**values, **overrides})


def test_express_ingress_per_broker_with_a_zone_down():
    # 20 MiB/s over 2 live brokers = 10 < 15.625; 40 MiB/s = 20 > 15.625.
    assert by_name(express(Workload(20 * 2**20 / 512, 20 * 2**20 / 512, 512, 1.0, 1, 1)), "msk express: ingress").ok
    row = by_name(express(Workload(40 * 2**20 / 512, 40 * 2**20 / 512, 512, 1.0, 1, 1)), "msk express: ingress")
    assert not row.ok and row.fix == "use 6 Express brokers"


def test_express_egress_with_every_consumer_group():
    groups = Workload(10 * 2**20 / 512, 10 * 2**20 / 512, 512, 1.0, 7, 1)  # 70 / 2 = 35 > 31.25
    assert not by_name(express(groups), "msk express: egress").ok
    assert by_name(express(Workload(10 * 2**20 / 512, 10 * 2**20 / 512, 512, 1.0, 6, 1)), "msk express: egress").ok


def test_express_partitions_count_three_replicas():
    row = by_name(express(POC, partitions=1100), "msk express: partition replicas")
    assert row.need == 1100 and not row.ok
    assert by_name(express(POC, partitions=1000), "msk express: partition replicas").ok


def test_express_storage_is_managed_and_reported_for_pricing():
    row = by_name(express(POC), "msk express: storage")
    assert row.ok and math.isinf(row.provided)
    assert row.need == pytest.approx(12.643 * 168 * 3, rel=1e-3)


# --- the sink -----------------------------------------------------------------------------------


def test_sink_kpus_at_peak():
    assert not by_name(sink_constraints(POC, parallelism=1, parallelism_per_kpu=1, partitions=48), "sink: KPUs").ok
    row = by_name(sink_constraints(POC, parallelism=2, parallelism_per_kpu=1, partitions=48), "sink: KPUs")
    assert row.ok and row.need == 2
    # Two subtasks on one KPU share one vCPU: no more records/s.
    assert not by_name(sink_constraints(POC, parallelism=2, parallelism_per_kpu=2, partitions=48), "sink: KPUs").ok


def test_sink_subtasks_need_partitions_to_read():
    assert not by_name(sink_constraints(HIGH, parallelism=4, parallelism_per_kpu=1, partitions=2), "sink: topic partitions").ok
    assert by_name(sink_constraints(HIGH, parallelism=4, parallelism_per_kpu=1, partitions=4), "sink: topic partitions").ok


# --- network paths ------------------------------------------------------------------------------


def test_no_telemetry_crosses_nat_or_interface_endpoints_as_designed():
    rows = network_path_constraints(POC, nat_gateways=3)
    assert all(row.ok and row.need == 0 for row in rows)
    assert {flow.crosses for flow in DATA_PATH} == {"vpc", "s3-gateway"}


def test_a_flow_moved_onto_nat_is_held_against_one_gateway():
    # 200,000 msg/s x 4 KB uncompressed = 6.55 Gbps through one gateway > 5.
    big = Workload(200_000, 200_000, 4096, 1.0, 1, 1)
    flows = [Flow("sink to S3 without the gateway endpoint", "nat", lambda w: w.message_bytes)]
    row = by_name(network_path_constraints(big, nat_gateways=1, flows=flows), "network: telemetry through a NAT")
    assert row.need == pytest.approx(6.5536) and not row.ok
    endpoint = [Flow("through an interface endpoint", "interface-endpoint", lambda w: w.message_bytes * 4)]
    row = by_name(network_path_constraints(big, nat_gateways=1, flows=endpoint), "network: telemetry through an inter")
    assert row.need == pytest.approx(26.2144 / 3) and row.ok


# --- AWS IoT Core -------------------------------------------------------------------------------


def iot(workload, **overrides):
    """The workload with every message sent through AWS IoT Core (iot_share 1)."""
    import dataclasses

    through_iot = dataclasses.replace(workload, iot_share=1.0)
    return iot_constraints(through_iot, **{"publish_quota_per_s": 20_000, "connect_quota_per_s": 500, **overrides})


def test_iot_account_publish_rate_against_the_configured_quota():
    assert not by_name(iot(POC), "iot: inbound publishes").ok
    assert by_name(iot(POC, publish_quota_per_s=80_000), "iot: inbound publishes").ok
    assert not by_name(iot(POC, publish_quota_per_s=80_000), "iot: rule executions").ok


def test_iot_per_connection_quotas():
    few = Workload(5_000, 5_000, 1024, 1.0, 1, 40)  # 125 publishes/s on each connection
    assert not by_name(iot(few), "iot: publishes per second per connection").ok
    assert by_name(iot(MEDIUM), "iot: publishes per second per connection").ok
    large = Workload(1_000, 1_000, 100_000, 1.0, 1, 100)  # 10 x 100 KB = 1 MB/s on each
    assert not by_name(iot(large), "iot: bytes per second").ok
    assert by_name(iot(MEDIUM), "iot: bytes per second").ok


def test_iot_connections_and_reconnect_time():
    crowd = Workload(5_000, 5_000, 512, 1.0, 1, 600_000)
    assert not by_name(iot(crowd), "iot: concurrent connections").ok
    assert not by_name(iot(crowd), "iot: seconds for every device").ok  # 1,200 s at 500/s
    assert by_name(iot(POC), "iot: seconds for every device").ok  # 200 s


def test_devices_that_produce_to_kafka_meet_no_iot_quota():
    direct = Workload(73_800, 73_800, 512, RATIO, 1, 100_000, iot_share=0.0)
    assert iot_constraints(direct, publish_quota_per_s=20_000, connect_quota_per_s=500) == []


def test_messages_through_aws_iot_reach_the_brokers_uncompressed():
    """The rule's Kafka action sends each message as it came (compression.type none): a quarter of
    the POC through AWS IoT Core more than triples what the brokers keep."""
    import dataclasses

    quarter = dataclasses.replace(POC, iot_share=0.25)
    assert quarter.broker_bytes_per_message() == pytest.approx(512 * (0.75 / RATIO + 0.25))
    assert quarter.gib_per_hour() > 3 * POC.gib_per_hour()


# --- the binding constraint and the three workloads -----------------------------------------------


def test_assess_names_the_tightest_constraint_binding():
    assessment = assess(standard(POC) + sink_constraints(POC, parallelism=4, parallelism_per_kpu=1, partitions=48))
    assert assessment.binding.name.startswith("msk: broker storage")
    assert sum(row.binding for row in assessment.constraints) == 1
    assert not assessment.ok


@pytest.mark.parametrize(
    "workload, partitions, retention, standard_gib, tiered_gib, kpus",
    # Tiered: 6 h local plus a day of stalled copying (TIERED_STALL_HOURS) on the volume, full:
    # POC 30 h x 12.64 GiB/h + 48 open 128 MiB segments = 385 GiB -> 400.
    [(POC, 48, 168, 3200, 400, 2), (MEDIUM, 24, 72, 300, 100, 1), (HIGH, 48, 24, 700, None, 4)],
    ids=["poc", "5k-1KB-72h", "200k-256B-24h"],
)
def test_the_three_workloads_as_derived_by_hand(workload, partitions, retention, standard_gib, tiered_gib, kpus):
    candidates = {c.design.kind: c for c in propose(workload, partitions=partitions, replication_factor=3,
                                                     retention_hours=retention)}  # fmt: skip
    std = candidates["standard"].design
    assert (std.broker_count, std.broker_instance_type, std.ebs_volume_gib) == (3, "kafka.m7g.large", standard_gib)
    assert candidates["standard"].assessment.binding.name.startswith("msk: broker storage")
    if tiered_gib is None:
        assert "tiered" not in candidates
    else:
        tiered = candidates["tiered"].design
        assert (tiered.broker_count, tiered.ebs_volume_gib, tiered.primary_retention_hours) == (3, tiered_gib, 6)
    assert candidates["express"].design == MskDesign("express", "express.m7g.large", 3)
    assert capacity.kpus_needed(workload) == kpus
    for candidate in candidates.values():
        assert candidate.assessment.ok


def test_the_poc_uncompressed_needs_six_brokers_of_15_tib():
    # The issue's 64 TB: compression_ratio 1 puts 126 GiB/h on six brokers' 24 replicas each.
    raw = Workload(73_800, 73_800, 512, 1.0, 1, 100_000)
    candidates = {c.design.kind: c for c in propose(raw, partitions=48, replication_factor=3, retention_hours=168)}
    assert (candidates["standard"].design.broker_count, candidates["standard"].design.ebs_volume_gib) == (6, 15_300)


def test_msk_constraints_dispatches_on_the_design():
    tiered = msk_constraints(POC, MskDesign("tiered", "kafka.m7g.large", 3, 200, 6), partitions=48,
                             replication_factor=3, retention_hours=168)  # fmt: skip
    assert any(row.name.startswith("msk: tiered topic retention") for row in tiered)
    express_rows = msk_constraints(POC, MskDesign("express", "express.m7g.large", 3), partitions=48,
                                   replication_factor=3, retention_hours=168)  # fmt: skip
    assert all(row.name.startswith("msk express") for row in express_rows)


def test_cheapest_skips_what_it_cannot_price():
    candidates = propose(POC, partitions=48, replication_factor=3, retention_hours=168)
    prices = {"standard": 900.0, "tiered": 500.0, "express": None}
    assert capacity.cheapest(candidates, lambda c: prices[c.design.kind]).design.kind == "tiered"


def test_a_workload_whose_peak_is_below_its_average_is_refused():
    with pytest.raises(ValueError, match="peak"):
        Workload(10, 5, 512, 1.0, 1, 1)
