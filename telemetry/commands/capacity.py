"""`telemetry capacity`: what an environment's declared workload (cdk.json `workload`) needs from
MSK, the Flink sink, the network paths and AWS IoT Core, against what it provides; the binding
constraint named, and every limit the model uses with the page it was read on. Offline: it reads
cdk.json, not the account.

  telemetry capacity --env prod [--rate MSG_PER_S] [--limits] [--format json]

--rate asks the same question at another average (and peak) rate. Exit codes, as every `telemetry`
command: 0 the environment holds the load; 1 it does not (the same refusal synthesis prints);
2 bad input.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from telemetry.shared.arguments import bounded_number
from telemetry.shared.output import TEXT_WIDTH


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rate", type=bounded_number(float, "a number of messages per second", 0), metavar="MSG_PER_S",
                        help="the average and peak rate to check (default: the environment's declared workload)")
    parser.add_argument("--limits", action="store_true",
                        help="also list every limit the model uses, with the page and date it was read")


def _number_or_none(value: float) -> float | None:
    """JSON has no infinity: an unlimited provision (Express storage) is null."""
    return None if math.isinf(value) else value


def report(config: Any, rate: float | None) -> dict:
    from stacks import capacity, sizing

    workload = sizing.workload_of(config, rate=rate)
    assessment = sizing.assess_environment(config, rate=rate)
    topic = sizing.sink_topic(config)
    held = sizing.retention_hours_held(config, rate=rate)
    return {
        "environment": config.name,
        "workload": {**asdict(workload), "declared": rate is None},
        "topic": {"name": topic.name, "partitions": topic.partitions, "replication_factor": topic.replication_factor,
                  "retention_hours": topic.retention_hours,
                  "local_retention_hours": sizing.local_hours(config, topic) if config.msk.tiered(topic) else None},
        "retention_hours_held": None if math.isinf(held) else round(held, 1),
        "constraints": [
            {"name": c.name, "need": round(c.need, 3), "provided": _number_or_none(round(c.provided, 3)),
             "unit": c.unit, "headroom": _number_or_none(round(c.headroom, 2)),
             "ok": c.ok, "binding": c.binding, "rule": c.rule, "fix": None if c.ok else c.fix}
            for c in assessment.constraints
        ],
        "binding": next((c.name for c in assessment.constraints if c.binding), None),
        "ok": assessment.ok,
        "refusal": assessment.refusal(),
        "limits": [asdict(limit) for limit in capacity.limits()],
    }


def _text(found: dict, limits: bool) -> str:
    import textwrap

    workload = found["workload"]
    topic = found["topic"]
    lines = [
        f"{found['environment']}: {workload['messages_per_second']:,.0f} msg/s average, "
        f"{workload['peak_messages_per_second']:,.0f} at peak, {workload['message_bytes']:,} bytes, compression "
        f"{workload['compression_ratio']:g}x, {workload['consumer_groups']} consumer group(s), "
        f"{workload['devices']:,} devices, {workload['iot_share']:.0%} through AWS IoT Core"
        + ("" if workload["declared"] else " (--rate; the declared workload differs)"),
        f"topic {topic['name']}: {topic['partitions']} partitions, replication {topic['replication_factor']}, "
        f"{topic['retention_hours']:g} h kept"
        + ("" if topic["local_retention_hours"] is None else
           f", the last {topic['local_retention_hours']:g} h on the brokers and all of it in the remote tier (tiered storage)")
        + "; the brokers hold "
        + ("every hour" if found["retention_hours_held"] is None else f"{found['retention_hours_held']:,.1f} h")
        + " at this rate below the disk alarm",
    ]
    lines = [wrapped for line in lines for wrapped in textwrap.wrap(line, TEXT_WIDTH, subsequent_indent="  ")] + [""]
    rows = [("constraint", "need", "provided", "unit", "headroom", "")]
    for c in found["constraints"]:
        mark = "BINDING" if c["binding"] else "" if c["ok"] else "FAILS"
        if c["binding"] and not c["ok"]:
            mark = "FAILS, BINDING"
        if c["rule"]:  # a minimum the service sets: met or not, no headroom to speak of
            headroom = "met" if c["ok"] else "not met"
        else:
            headroom = "-" if c["headroom"] is None else f"{c['headroom']:,.2f}x"
        rows.append((c["name"], _figure(c["need"], c["unit"]), _figure(c["provided"], c["unit"]), c["unit"], headroom,
                     mark))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    widths[0] = min(widths[0], TEXT_WIDTH - sum(widths[1:]) - 2 * (len(widths) - 1))
    for row in rows:
        name, *rest = textwrap.wrap(row[0], widths[0], subsequent_indent="  ")
        lines.append("  ".join(cell.ljust(widths[i]) if i in (0, 3, 5) else cell.rjust(widths[i])
                               for i, cell in enumerate((name, *row[1:]))).rstrip())
        lines += rest
    lines.append("")
    binding = f"binding: {found['binding']}" if found["ok"] else f"does not hold the load: {found['refusal']}"
    lines += textwrap.wrap(binding, TEXT_WIDTH, subsequent_indent="  ")
    if limits:
        lines += ["", "limits (value, unit, page, read on):"]
        lines += [f"  {limit['name']}: {limit['value']:g} {limit['unit']} ({limit['page']}, {limit['url']}, "
                  f"{limit['read_on']})" for limit in found["limits"]]
    return "\n".join(lines)


def _figure(value: float | None, unit: str) -> str:
    """A figure as a person writes it: a version as 3.6, a whole number without decimals."""
    if value is None:
        return "unlimited"
    if unit == "version":  # stacks/capacity.py: major + minor / 100
        major = int(value)
        return f"{major}.{round((value - major) * 100)}"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"


def run(args: argparse.Namespace, session_factory: Callable[[str], Any]) -> int:
    from stacks.config import load_environment, read_environments

    config = load_environment(read_environments(), args.env)
    found = report(config, args.rate)
    if args.format == "json":
        if not args.limits:
            found.pop("limits")
        from telemetry.shared.output import document

        document(found)
    else:
        print(_text(found, args.limits))
    return 0 if found["ok"] else 1
