"""Run reports: one host's JSON, the merge of many hosts' JSON, and the summary table.

Counts add up; histograms merge bucket by bucket; percentiles are always read from the merged
histogram, never averaged. Throughputs of hosts that ran at the same time add up.
"""

from __future__ import annotations

import datetime
import json
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from simulator import __version__, connecting, histograms, slo
from simulator.config import SloThresholds
from simulator.errors import SimulatorError
from simulator.schedule import NS_PER_S

if TYPE_CHECKING:  # merging reports must not need a Kafka client
    from simulator.host_run import HostRun

REPORT_VERSION = 2  # 2: publish_delay replaced schedule_lag (exact per message, measured period)
COUNTS = ("sent", "acked", "delivery_errors", "received", "lost", "duplicates", "out_of_order")
LATENCIES = {"e2e": "e2e_latency_ms", "ack": "ack_latency_ms", "publish_delay": "publish_delay_ms"}
# The summary table's rows: end to end, and the two parts of it a producer sees.
LATENCY_ROWS = (
    ("end-to-end", "e2e_latency_ms"),
    ("ack", "ack_latency_ms"),
    ("publish delay", "publish_delay_ms"),
)


def _iso(ns: int) -> str:
    return datetime.datetime.fromtimestamp(ns / NS_PER_S, datetime.UTC).isoformat()


def host_report(run: HostRun) -> dict:
    config = run.config
    outcomes = [result.outcome for result in run.results]
    accounting = run.ledger.account(outcomes)
    measure_start_ns = run.start_ns + round(config.warmup_s * NS_PER_S)
    period_s = (max(result.period_end_ns for result in run.results) - measure_start_ns) / NS_PER_S
    throughput = sum(result.measured_acked for result in run.results) / period_s
    encoded = {
        "e2e": histograms.encode(run.e2e.histogram) if config.consume else None,
        "ack": (  # None flat out: only failures are reported there
            histograms.encode(histograms.merge([r.ack_histogram for r in run.results]))
            if config.rate > 0
            else None
        ),
        "publish_delay": (
            histograms.encode(histograms.merge([r.publish_delay_histogram for r in run.results]))
            if config.rate > 0
            else None
        ),
    }
    report = {
        "version": REPORT_VERSION,
        "simulator_version": __version__,
        "run_id": config.run_id,
        "started_at": _iso(run.start_ns),
        "hosts": [
            {
                "producer_id": config.producer_id,
                "hostname": socket.gethostname(),
                "processes": config.processes,
                "rate": config.rate,
                "throughput_msgs_per_s": round(throughput, 1),
                "producer_cpu_s": round(sum(r.cpu_s for r in run.results), 2),
            }
        ],
        **{name: getattr(accounting, name) for name in COUNTS},
        "duration_s": round(period_s, 3),
        "warmup_s": config.warmup_s,
        "throughput_msgs_per_s": round(throughput, 1),
        **_latency_summaries(encoded),
        "histograms": encoded,
        "clamped_over_60s": {
            "e2e": run.e2e.clamped,
            "ack": sum(r.ack_clamped for r in run.results),
        },
        "consumer": {
            "drained": run.drained,
            "errors": run.consumer_errors,
            "partitions": run.consumer_partitions,
            "foreign": run.consumer_foreign,
        },
        "config": config.to_report(),
    }
    connections = connecting.merge([r.connections for r in run.results])
    if connections is not None:
        report["connections"] = connections
    if not config.consume:  # nothing was read back: received, lost and friends are unknown
        report.update({name: None for name in ("received", "lost", "duplicates", "out_of_order")})
    report["slo"] = slo.evaluate(report, config.slo)
    return report


def _latency_summaries(encoded: dict) -> dict:
    return {
        field: (
            histograms.summary_ms(histograms.merge([encoded[name]])) if encoded.get(name) else None
        )
        for name, field in LATENCIES.items()
    }


def _sum_or_none(values: list):
    return None if any(value is None for value in values) else sum(values)


def merge_reports(reports: list[dict], thresholds: SloThresholds | None = None) -> dict:
    """One fleet report from host reports of the same run."""
    for report in reports:
        if report.get("version") != REPORT_VERSION:
            raise SimulatorError(
                f"report version {report.get('version')!r} is not "
                f"{REPORT_VERSION}; merge reports of this simulator version"
            )
    encoded = {}
    for name in LATENCIES:
        parts = [report["histograms"].get(name) for report in reports]
        encoded[name] = (
            histograms.encode(histograms.merge([p for p in parts if p])) if any(parts) else None
        )
    if any(report["histograms"].get("e2e") is None for report in reports):
        encoded["e2e"] = None  # a host that did not consume leaves the fleet's e2e unknown
    configs = [report["config"] for report in reports]
    config = {
        key: value
        for key, value in configs[0].items()
        if all(other.get(key) == value for other in configs)
    }
    config.update(
        rate=sum(c["rate"] for c in configs), processes=sum(c["processes"] for c in configs)
    )
    merged = {
        "version": REPORT_VERSION,
        "simulator_version": __version__,
        "run_id": ",".join(sorted({report["run_id"] for report in reports})),
        "started_at": min(report["started_at"] for report in reports),
        "hosts": [host for report in reports for host in report["hosts"]],
        **{name: _sum_or_none([report[name] for report in reports]) for name in COUNTS},
        "duration_s": max(report["duration_s"] for report in reports),
        "warmup_s": max(report["warmup_s"] for report in reports),
        "throughput_msgs_per_s": round(sum(r["throughput_msgs_per_s"] for r in reports), 1),
        **_latency_summaries(encoded),
        "histograms": encoded,
        "clamped_over_60s": {
            name: sum(r["clamped_over_60s"][name] for r in reports) for name in ("e2e", "ack")
        },
        "consumer": {
            "drained": (
                None
                if any(r["consumer"]["drained"] is None for r in reports)
                else all(r["consumer"]["drained"] for r in reports)
            ),
            "errors": [e for r in reports for e in r["consumer"]["errors"]],
            # Messages the hosts read and skipped as another's: 0 when each read its own share.
            "foreign": sum(r["consumer"].get("foreign", 0) for r in reports),
        },
        "config": config,
    }
    connections = connecting.merge([r.get("connections") for r in reports])
    if connections is not None:
        merged["connections"] = connections
    merged["slo"] = slo.evaluate(merged, thresholds or slo.thresholds_of(reports[0]))
    return merged


def read_report(path: Path) -> dict:
    try:
        report = json.loads(Path(path).read_text())
    except OSError as error:
        raise SimulatorError(f"cannot read report {path}: {error.strerror}")
    except ValueError as error:
        raise SimulatorError(f"report {path} is not JSON: {error}")
    missing = [
        key
        for key in ("version", "hosts", "histograms", "config", "slo", *COUNTS)
        if not isinstance(report, dict) or key not in report
    ]
    if missing:
        raise SimulatorError(f"report {path} is not a simulator report (missing {missing[0]!r})")
    return report


def write_report(report: dict, path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")


def _number(value, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def format_summary(report: dict) -> str:
    hosts = report["hosts"]
    config = report["config"]
    rate = "as fast as possible" if config["rate"] == 0 else f"{config['rate']:,.0f} msg/s"
    lines = [
        (
            f"run {report['run_id']}: {len(hosts)} host(s), {config['processes']} producer "
            f"process(es), {rate}, measured {report['duration_s']:.2f} s after "
            f"{report['warmup_s']:g} s warmup"
        ),
        "messages   "
        + "  ".join(f"{name.replace('_', ' ')} {_number(report[name])}" for name in COUNTS),
        f"throughput {_number(report['throughput_msgs_per_s'], 1)} msg/s (acked, measured period)",
        f"{'latency ms':<16}"
        + "".join(
            f"{label:>10}" for label in ("p50", "p90", "p99", "p99.9", "p99.99", "max", "count")
        ),
    ]
    for title, field in LATENCY_ROWS:
        summary = report.get(field)
        if summary is None:
            why = "  (--rate 0: acks are counted, not timed)" if field == "ack_latency_ms" else ""
            lines.append(f"{title:<16}{'not measured':>10}{why}")
            continue
        lines.append(
            f"{title:<16}"
            + "".join(
                f"{_number(summary[key], 3):>10}"
                for key in ("p50", "p90", "p99", "p999", "p9999", "max")
            )
            + f"{summary['count']:>10,}"
        )
    lines.append(
        "  end-to-end: intended send time to read back; ack: produce call to delivery report; "
        "publish delay: intended send time to produce call (the simulator's own share)"
    )
    connections = report.get("connections")
    if connections:
        rss = connections["rss_bytes_per_connection"]
        lines.append(
            f"connections {connections['connected']:,} of {connections['devices']:,} devices in "
            f"{_number(connections['connect_s'], 1)} s (at most {connections['connects_per_s_max']:,} CONNECTs "
            f"in a second), {connections['connect_failures']:,} connects retried, "
            f"{connections['interruptions']:,} lost mid-run and {connections['reconnects']:,} reopened"
            + (f", {rss / 1024:,.1f} KiB each" if rss is not None else "")
        )
    if report["consumer"]["drained"] is False:
        lines.append(
            "warning: the consumer did not reach the end of the topic within "
            "--drain-timeout; messages it never read count as lost"
        )
    verdict = report["slo"]
    checks = ", ".join(
        f"{check['name']} {_number(check['limit'], 1)}: {_number(check['actual'], 2)} "
        f"{'ok' if check['passed'] else 'FAIL'}"
        for check in verdict["checks"]
    )
    lines.append(f"SLO {'PASS' if verdict['passed'] else 'FAIL'} ({checks})")
    return "\n".join(lines)
