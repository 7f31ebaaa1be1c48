import json

import numpy as np
import pytest

from simulator import histograms
from simulator.accounting import DeliveryOutcome, SequenceLedger, devices_of_process
from simulator.config import RunConfig, SloThresholds
from simulator.errors import SimulatorError
from simulator.host_run import HostRun
from simulator.sending import ProducerResult
from simulator.report import format_summary, host_report, merge_reports, read_report
from simulator.schedule import NS_PER_S

START_NS = 1_800_000_000 * NS_PER_S


def config(producer_id="host-a", rate=1000.0, **overrides):
    settings = {
        "bootstrap_servers": "127.0.0.1:9092",
        "topic": "telemetry",
        "rate": rate,
        "duration_s": 10.0,
        "warmup_s": 2.0,
        "processes": 1,
        "devices": 10,
        "message_bytes": 512,
        "acks": "all",
        "idempotence": True,
        "linger_ms": 2.0,
        "batch_bytes": 1_000_000,
        "compression": "lz4",
        "security_protocol": "PLAINTEXT",
        "region": None,
        "run_id": "run1",
        "producer_id": producer_id,
        "consume": True,
        "progress_interval_s": 5.0,
        "drain_timeout_s": 30.0,
        "slo": SloThresholds(),
    }
    settings.update(overrides)
    return RunConfig(**settings)


def encoded(values_us):
    histogram = histograms.new_histogram()
    histograms.record_microseconds(histogram, np.asarray(values_us))
    return histograms.encode(histogram)


def host_run(run_config, e2e_us, sent=12_000, missing=(), failed=(), ack_us=(1500,)):
    ledger = SequenceLedger(run_config.devices, 1, [sent])
    own = devices_of_process(run_config.devices, 1, 0)
    for index in range(sent):
        if index not in missing:
            ledger.record(own[index % len(own)], index // len(own))
    e2e = histograms.LatencyRecorder()
    histograms.record_microseconds(e2e.histogram, np.asarray(e2e_us))
    result = ProducerResult(
        process_index=0,
        producer_id=f"{run_config.producer_id}/p00",
        outcome=DeliveryOutcome(sent=sent, acked=sent - len(failed), failed_indices=tuple(failed)),
        measured_acked=10_000 - len(failed),
        period_end_ns=START_NS + 12 * NS_PER_S,
        ack_histogram=encoded(ack_us),
        publish_delay_histogram=encoded([50]),
        ack_clamped=0,
        cpu_s=1.0,
    )
    return HostRun(
        config=run_config,
        start_ns=START_NS,
        results=[result],
        ledger=ledger,
        e2e=e2e,
        consumer_errors=[],
        drained=True,
    )


def test_host_report_has_the_fields_the_fleet_tools_read():
    report = host_report(host_run(config(), e2e_us=[1000] * 10_000))
    for key in (
        "sent",
        "acked",
        "delivery_errors",
        "received",
        "lost",
        "duplicates",
        "out_of_order",
        "duration_s",
        "throughput_msgs_per_s",
        "e2e_latency_ms",
        "ack_latency_ms",
        "publish_delay_ms",
        "histograms",
        "slo",
        "config",
        "hosts",
        "version",
    ):
        assert key in report
    assert set(report["e2e_latency_ms"]) >= {"p50", "p99", "p999", "max"}
    assert set(report["histograms"]) >= {"e2e", "ack"}
    assert report["throughput_msgs_per_s"] == pytest.approx(1000.0)
    assert report["duration_s"] == pytest.approx(10.0)
    json.dumps(report)


def test_slo_verdict_names_each_failed_check():
    report = host_report(host_run(config(), e2e_us=[1000] * 9_890 + [150_000] * 110, missing=(7,)))
    failed = {check["name"] for check in report["slo"]["checks"] if not check["passed"]}
    assert failed == {"throughput_msgs_per_s >=", "e2e p99 ms <=", "e2e max ms <=", "lost <="}
    assert report["slo"]["passed"] is False
    assert report["lost"] == 1
    assert "SLO FAIL" in format_summary(report)


def test_merge_adds_counts_and_throughput_and_merges_histograms():
    fast = host_report(host_run(config("host-a"), e2e_us=[1000] * 990))
    slow = host_report(
        host_run(config("host-b"), e2e_us=[400_000] * 10, missing=(3, 4), failed=(9,))
    )
    merged = merge_reports([fast, slow])
    assert merged["sent"] == 24_000
    assert merged["acked"] == 23_999
    assert merged["lost"] == 2
    assert merged["delivery_errors"] == 1
    assert merged["throughput_msgs_per_s"] == pytest.approx(
        fast["throughput_msgs_per_s"] + slow["throughput_msgs_per_s"]
    )
    assert [h["producer_id"] for h in merged["hosts"]] == ["host-a", "host-b"]
    # p99 of the merged histogram, not the mean of the two hosts' p99 (about 200 ms)
    assert merged["e2e_latency_ms"]["p99"] == pytest.approx(1.0, rel=1e-3)
    assert merged["e2e_latency_ms"]["max"] == pytest.approx(400.0, rel=1e-2)
    assert merged["e2e_latency_ms"]["count"] == 1000
    assert merged["config"]["rate"] == 2000.0
    assert "producer_id" not in merged["config"]


def test_merge_uses_given_thresholds_or_those_of_the_first_report():
    strict = config(slo=SloThresholds(max_p99_ms=0.5))
    report = host_report(host_run(strict, e2e_us=[1000] * 10_000))
    assert merge_reports([report])["slo"]["thresholds"]["max_p99_ms"] == 0.5
    relaxed = merge_reports([report], SloThresholds(min_rate_msgs_per_s=1, max_p99_ms=5))
    assert relaxed["slo"]["passed"] is True


def test_a_host_that_did_not_consume_leaves_loss_and_e2e_unknown():
    measured = host_report(host_run(config("host-a"), e2e_us=[1000] * 100))
    blind = host_report(host_run(config("host-b", consume=False), e2e_us=[]))
    merged = merge_reports([measured, blind])
    assert merged["lost"] is None and merged["e2e_latency_ms"] is None
    assert merged["slo"]["passed"] is False


def test_reading_something_that_is_not_a_report_is_one_clear_error(tmp_path):
    not_json = tmp_path / "a.json"
    not_json.write_text("{nope")
    with pytest.raises(SimulatorError, match="is not JSON"):
        read_report(not_json)
    other = tmp_path / "b.json"
    other.write_text('{"hello": 1}')
    with pytest.raises(SimulatorError, match="not a simulator report"):
        read_report(other)
    with pytest.raises(SimulatorError, match="cannot read report"):
        read_report(tmp_path / "missing.json")
