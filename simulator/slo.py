"""The SLO verdict of a report (one host's or a merged fleet's)."""

from __future__ import annotations

import dataclasses

from simulator.config import SloThresholds


def _check(name: str, actual, limit, passed_when) -> dict:
    passed = actual is not None and passed_when(actual, limit)
    return {"name": name, "actual": actual, "limit": limit, "passed": passed}


def evaluate(report: dict, thresholds: SloThresholds) -> dict:
    """Checks a report against the thresholds; anything not measured fails its check."""
    e2e = report.get("e2e_latency_ms") or {}
    checks = [
        _check(
            "throughput_msgs_per_s >=",
            report.get("throughput_msgs_per_s"),
            thresholds.min_rate_msgs_per_s,
            lambda actual, limit: actual >= limit,
        ),
        _check(
            "e2e p99 ms <=",
            e2e.get("p99"),
            thresholds.max_p99_ms,
            lambda actual, limit: actual <= limit,
        ),
        _check(
            "e2e max ms <=",
            e2e.get("max"),
            thresholds.max_latency_ms,
            lambda actual, limit: actual <= limit,
        ),
        _check(
            "lost <=",
            report.get("lost"),
            thresholds.max_lost,
            lambda actual, limit: actual <= limit,
        ),
        _check(
            "delivery_errors <=",
            report.get("delivery_errors"),
            thresholds.max_delivery_errors,
            lambda actual, limit: actual <= limit,
        ),
    ]
    return {
        "thresholds": dataclasses.asdict(thresholds),
        "checks": checks,
        "passed": all(check["passed"] for check in checks),
    }


def thresholds_of(report: dict) -> SloThresholds:
    """The thresholds a report was judged against."""
    return SloThresholds(**report["slo"]["thresholds"])
