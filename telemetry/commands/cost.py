"""`telemetry cost`: what an environment costs a month, per million messages and per device, priced
from its synthesized templates (telemetry/shared/estimate.py) with the region's price table
(telemetry/shared/price_tables/), offline. --live refreshes the prices from the AWS Price List Query API
first, which needs credentials.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from telemetry import REPO
from telemetry.shared.arguments import bounded_number
from telemetry.shared.errors import UsageError
from telemetry.shared.output import TEXT_WIDTH

DEVICES_PER_HOST = 1000  # the simulator's --devices default, per fleet host
MESSAGE_BYTES = 512  # the simulator's --message-bytes default
MAX_MESSAGE_BYTES = 1_048_576  # Kafka's default message.max.bytes; AWS IoT Core takes up to 128 KB


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rate", type=bounded_number(float, "a number of messages per second", 0), default=0.0,
                        metavar="MSG_PER_S", help="messages per second, the whole fleet (default 0: the idle floor)")
    parser.add_argument("--devices", type=bounded_number(int, "a whole number of devices", 0), metavar="N",
                        help="devices connected all month (default: the simulator fleet's, "
                        f"{DEVICES_PER_HOST} per host)")
    parser.add_argument("--message-bytes", type=bounded_number(int, "a whole number of bytes", 1, MAX_MESSAGE_BYTES),
                        default=MESSAGE_BYTES, metavar="B", help=f"bytes per message (default {MESSAGE_BYTES}, the simulator's)")
    parser.add_argument("--transport", choices=("kafka", "mqtt", "basic-ingest"), default="kafka",
                        help="how messages enter: produced to MSK directly (default), MQTT through AWS IoT Core, "
                        "or IoT Basic Ingest")
    parser.add_argument("--live", action="store_true",
                        help="refresh the prices from the AWS Price List Query API first (needs credentials)")
    parser.add_argument("--save-prices", action="store_true",
                        help="with --live: write the refreshed prices into the region's price table "
                        "(telemetry/shared/price_tables/REGION.json), marked checked, for the next offline run")
    parser.add_argument("--plot", type=Path, metavar="PATH.png", help="also draw the fixed and usage split per stack")
    from telemetry.shared.cloud_assembly import add_cdk_out_argument

    add_cdk_out_argument(parser)


def check_arguments(args: argparse.Namespace) -> None:
    if args.save_prices and not args.live:
        raise UsageError("--save-prices goes with --live: it writes the prices the AWS Price List answered")
    if args.plot is not None and args.plot.suffix.lower() != ".png":
        raise UsageError(f"--plot writes a PNG: give a path ending in .png, not {args.plot}")


def run(args: argparse.Namespace, session_factory: Callable[[str], Any]) -> int:
    from telemetry.shared import estimate as pricing_model
    from telemetry.shared import prices
    from telemetry.shared.cloud_assembly import synthesized_stacks
    from stacks.config import load_environment, read_environments

    config = load_environment(read_environments(), args.env)
    table = prices.load(config.region)
    today = datetime.date.today()
    if args.live:
        table = prices.refresh(table, session_factory(prices.PRICE_LIST_REGION).client("pricing"), today)
        if args.save_prices:
            saved = prices.save(table)
            print(f"wrote {len(table.refreshed)} refreshed prices into {saved}", file=sys.stderr)
    stacks = synthesized_stacks(args.cdk_out, config)
    devices = args.devices if args.devices is not None else DEVICES_PER_HOST * config.simulator_fleet.host_count
    scenario = pricing_model.Scenario(args.rate, devices, args.message_bytes, args.transport)
    result = pricing_model.estimate(config, stacks, table, scenario)
    paths = pricing_model.paths(config, stacks, table, scenario)
    designs = pricing_model.msk_designs(config, table)
    warning = table.staleness_warning(today)
    if args.format == "json":
        body = result.as_dict(paths)
        body["msk_designs"] = designs
        body["prices"] = {"as_of": table.as_of.isoformat(), "refreshed": table.refreshed, "kept": table.kept}
        from telemetry.shared.output import document

        document(body)
    else:
        print(describe(result, paths, table, warning, designs))
    if warning and args.format == "json":
        print(warning, file=sys.stderr)
    if args.plot:
        draw(result, args.plot)
        print(f"wrote {args.plot}")
    return 0


def priced(quantity: float, unit: str, unit_usd: float) -> str:
    """A line's quantity at its price, as a person writes it: "100,000 requests x $0.03 per 10,000",
    "730 x $0.005 per hour" (a price table's unit may be a count of things: "10,000 requests",
    "million messages (5 KB each)")."""
    count, _, noun = unit.partition(" ")
    per = 1_000_000 if count == "million" else int(count.replace(",", "")) if count.replace(",", "").isdigit() else 0
    if per and noun:
        return f"{_amount(quantity * per)} {noun} x {_price(unit_usd)} per {count}"
    return f"{_amount(quantity)} x {_price(unit_usd)} per {unit}"


def _price(usd: float) -> str:
    """A unit price: cents always ($0.30, $3.00), and what a price table has past them ($0.2285)."""
    digits = f"{usd:,.6f}".rstrip("0")
    whole, _, cents = digits.partition(".")
    return f"${whole}.{cents.ljust(2, '0')}"


def _amount(value: float) -> str:
    """Whole numbers with thousands separators, fractions to three places at most."""
    return f"{value:,.0f}" if abs(value - round(value)) < 1e-9 else f"{value:,.3f}".rstrip("0").rstrip(".")


def _usd(value: float) -> str:
    return f"${value:,.2f}"


def describe(result: Any, paths: dict[str, float], table: Any, warning: str | None,
             designs: list[dict[str, Any]] | None = None) -> str:  # fmt: skip
    scenario = result.scenario
    out = [
        f"{result.environment} in {result.region}: prices as of {table.as_of} (On-Demand, USD, a 730-hour month)",
        f"scenario: {scenario.rate:,.0f} msg/s, {scenario.devices:,} devices, {scenario.message_bytes:,}-byte messages, "
        f"transport {scenario.transport}",
    ]
    if warning:
        out.append(warning)
    if table.refreshed or table.kept:
        out.append(f"--live: {len(table.refreshed)} prices refreshed from the Price List API, {len(table.kept)} kept "
                   "from the table (--format json lists them)")
    by_stack: dict[str, list[Any]] = defaultdict(list)
    for line in result.lines:
        by_stack[line.stack].append(line)
    free: dict[str, Counter] = defaultdict(Counter)
    for item in result.no_charge:
        free[item.stack][item.type.split("::", 1)[-1]] += 1
    out += ["", *summary_table(result)]
    for stack in list(dict.fromkeys([*by_stack, *free])):
        lines = by_stack.get(stack, [])
        out += ["", f"{stack}: {_usd(sum(line.monthly_usd for line in lines))} a month"]
        resource = None
        for line in lines:
            if (line.logical_id, line.type) != resource:
                resource = (line.logical_id, line.type)
                out.append(f"  {line.logical_id} ({line.type})")
            mark = "*" if line.usage else " "
            out.append(f"   {mark} {line.item}: {priced(line.quantity, line.unit, line.unit_usd)} = {_usd(line.monthly_usd)}")
        if free.get(stack):
            counted = ", ".join(f"{kind} {count}" for kind, count in sorted(free[stack].items()))
            out.append(f"  no charge: {sum(free[stack].values())} resources ({counted})")
    out += [
        "",
        f"monthly total: {_usd(result.monthly_usd)} = fixed floor {_usd(result.floor_usd)} + usage "
        f"{_usd(result.usage_usd)} (usage lines are marked *)",
    ]
    if result.per_million_messages_usd is not None:
        out.append(f"per million messages: {_usd(result.per_million_messages_usd)}")
    if result.per_device_year_usd is not None:
        out.append(f"per device per year: {_usd(result.per_device_year_usd)} ({scenario.devices:,} devices)")
    out.append("the same rate over each ingestion path: " + ", ".join(
        f"{name.replace('_', ' ')} {_usd(total)}" for name, total in paths.items()))
    if result.athena_per_query_gb:
        out.append(f"Athena: a query over one day of messages scans {result.athena_per_query_gb:,.1f} GB: "
                   f"{_usd(result.athena_per_query_usd)} a query (not in the total)")
    for note in result.notes:
        out.append(f"note: {note}")
    if result.unpriced:
        out.append("unpriced: " + ", ".join(f"{u.stack}/{u.logical_id} ({u.type})" for u in result.unpriced))
    out.append("assumptions (the templates cannot say): see telemetry/shared/estimate.py ASSUMPTIONS, or --format json")
    if designs:
        out += ["", *designs_table(designs, result.environment)]
    out += ["", f"monthly total: {_usd(result.monthly_usd)}"]
    return "\n".join(_fit(line) for line in out)


def _fit(line: str) -> str:
    """A line longer than the text's width, wrapped under its own indentation and then some."""
    if len(line) <= TEXT_WIDTH:
        return line
    import textwrap

    indent = " " * (len(line) - len(line.lstrip()) + 4)
    return "\n".join(textwrap.wrap(line, TEXT_WIDTH, subsequent_indent=indent, break_on_hyphens=False))


def _table(rows: list[tuple[str, ...]], right: set[int]) -> list[str]:
    """Rows in aligned columns: the columns in `right` aligned right (numbers), the rest left."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
                             for i, cell in enumerate(row)).rstrip() for row in rows]  # fmt: skip


def summary_table(result: Any) -> list[str]:
    """Per stack: the fixed floor, what the scenario's usage adds, and the total; the total last."""
    rows = [("stack", "fixed", "usage", "total")]
    for stack in dict.fromkeys(line.stack for line in result.lines):
        lines = [line for line in result.lines if line.stack == stack]
        fixed = sum(line.monthly_usd for line in lines if not line.usage)
        usage = sum(line.monthly_usd for line in lines if line.usage)
        rows.append((stack, _usd(fixed), _usd(usage), _usd(fixed + usage)))
    rows.append(("total", _usd(result.floor_usd), _usd(result.usage_usd), _usd(result.monthly_usd)))
    return ["summary (USD a month; per resource below):", *_table(rows, {1, 2, 3})]


def designs_table(designs: list[dict[str, Any]], environment: str) -> list[str]:
    """The environment's MSK design beside the smallest sound one of each kind, priced alike."""
    rows = [("", "MSK design", "holds", "USD a month")]
    for design in designs:
        mark = "this environment" if design["this_environment"] else design["kind"]
        price = "no price" if design["monthly_usd"] is None else _usd(design["monthly_usd"])
        rows.append((mark, design["design"] + (" (cheapest)" if design["cheapest"] else ""),
                     "yes" if design["holds"] else "NO", price))  # fmt: skip
    return [f"MSK designs for {environment}'s declared workload (stacks/capacity.propose), brokers and storage "
            "priced from the same table (estimate.msk_designs):", *_table(rows, {3})]


def draw(result: Any, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stacks = list(dict.fromkeys(line.stack for line in result.lines))
    fixed = [sum(line.monthly_usd for line in result.lines if line.stack == s and not line.usage) for s in stacks]
    usage = [sum(line.monthly_usd for line in result.lines if line.stack == s and line.usage) for s in stacks]
    figure, axes = plt.subplots(figsize=(10, 5))
    labels = [s.split("-")[-1] for s in stacks]
    axes.barh(labels, fixed, label="fixed floor")
    bars = axes.barh(labels, usage, left=fixed, label="usage")
    # Each bar's total at its end, and room on the right for the longest one's label.
    totals = [f + u for f, u in zip(fixed, usage)]
    axes.bar_label(bars, labels=[f"${total:,.0f}" for total in totals], padding=4)
    axes.set_xlim(0, max(totals, default=0) * 1.2 or 1)
    axes.invert_yaxis()  # the report's order, top to bottom
    axes.set_xlabel("USD a month")
    scenario = result.scenario
    axes.set_title(f"{result.environment}: ${result.monthly_usd:,.0f} a month at {scenario.rate:,.0f} msg/s "
                   f"({scenario.transport})")
    axes.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
