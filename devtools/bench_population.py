#!/usr/bin/env python3
"""How many TLS device connections one simulator host holds, and what they cost (`make bench`).

One `simulator run` on this machine against a local mosquitto over TLS with client certificates
(devtools/local_mosquitto.py): --devices devices (default 15,000), each publishing once every
--seconds-between seconds at QoS 1, the connects paced at --connect-rate over one producer
process per core. It prints what the run's `connections` object and accounting say: devices
held, how long the connect phase took and its CONNECTs per second (mean and busiest second),
resident memory per connection, the connect phase's CPU per connection, and the CPU per 1,000
msg/s while holding them (the processes' CPU after the connect phase, over the messages sent).

What stops a host: each CONNECT first builds the device's TLS context (about 10 ms of CPU with a
CA file), so opening is CPU-bound at about 80 connects/s per core; holding is cheap. The
descriptor limit binds next: one per connection, in the simulator and in the broker.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from devtools import local_mosquitto  # noqa: E402
from devtools.figures import write_figures  # noqa: E402

DEFAULT_OUTPUT = REPO_ROOT / "bench-results" / "population.json"


def run_bench(args) -> dict:
    cores = os.cpu_count() or 1
    rate = args.devices / args.seconds_between
    with tempfile.TemporaryDirectory(prefix="bench-population-") as name:
        folder = Path(name)
        pki = local_mosquitto.make_pki(folder / "pki", [f"pop-{i:05d}" for i in range(args.devices)])
        broker = local_mosquitto.start_mosquitto(
            folder / "mosquitto", pki, environment=local_mosquitto.LOCAL_ENVIRONMENT, debug=False
        )
        report = folder / "report.json"
        command = [
            sys.executable, "-m", "simulator", "run", "--transport", "mqtt", "--mqtt-endpoint", broker.endpoint,
            "--device-certificates", str(pki.devices), "--environment", broker.environment, "--mqtt-ca", str(pki.ca), "--devices", str(args.devices),
            "--rate", f"{rate:g}", "--duration", f"{args.duration:g}", "--warmup", "0", "--processes", str(cores),
            "--connect-rate", f"{args.connect_rate:g}", "--no-consume", "--slo-min-rate", "0",
            "--progress-interval", "10", "--report", str(report),
        ]  # fmt: skip
        print(f"  {args.devices:,} devices, {rate:,.0f} msg/s, {cores} processes ...", file=sys.stderr)
        try:
            result = subprocess.run(command, cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                                    capture_output=True, text=True, timeout=3600, check=False)  # fmt: skip
        finally:
            broker.stop()
        if result.returncode not in (0, 1):
            raise SystemExit(f"bench_population: the run failed: {result.stderr.strip().splitlines()[-1:]}")
        body = json.loads(report.read_text())
    made = body["connections"]
    cpu = sum(host["producer_cpu_s"] for host in body["hosts"])
    holding_cpu = cpu - made["connect_cpu_s"]
    return {
        "settings": {"devices": args.devices, "rate": rate, "duration_s": args.duration, "processes": cores,
                     "connect_rate": args.connect_rate, "load_average_at_start": os.getloadavg()},
        "connected": made["connected"],
        "connect_s": made["connect_s"],
        "connects_per_s_mean": round(made["connected"] / made["connect_s"], 1) if made["connect_s"] else None,
        "connects_per_s_max": made["connects_per_s_max"],
        "connect_failures": made["connect_failures"],
        "rss_bytes_per_connection": made["rss_bytes_per_connection"],
        "connect_cpu_ms_per_connection": round(made["connect_cpu_s"] / max(1, made["connected"]) * 1000, 2),
        "cpu_s_per_1000_msgs_holding": round(holding_cpu / max(1, body["sent"]) * 1000, 3),
        "sent": body["sent"], "acked": body["acked"], "delivery_errors": body["delivery_errors"],
        "ack_p99_ms": body["ack_latency_ms"]["p99"],
    }  # fmt: skip


def print_table(results: dict) -> None:
    s = results["settings"]
    print(f"\none host, {s['processes']} processes, {s['devices']:,} TLS devices at {s['rate']:,.0f} msg/s for "
          f"{s['duration_s']:g} s (connect rate asked {s['connect_rate']:g}/s)")
    print(f"  held {results['connected']:,} of {s['devices']:,}; sent {results['sent']:,}, acked {results['acked']:,}, "
          f"delivery errors {results['delivery_errors']:,}; ack p99 {results['ack_p99_ms']:.2f} ms")
    print(f"  connect phase {results['connect_s']:,.1f} s: {results['connects_per_s_mean']:,} connects/s "
          f"(busiest second {results['connects_per_s_max']:,}), {results['connect_cpu_ms_per_connection']} ms CPU each")
    print(f"  {results['rss_bytes_per_connection'] / 1024:,.1f} KiB resident per connection; "
          f"{results['cpu_s_per_1000_msgs_holding']} s CPU per 1,000 messages while holding them")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="Exit codes: 0 done; 2 the run failed.")
    parser.add_argument("--report", type=Path, default=DEFAULT_OUTPUT, metavar="PATH.json")
    parser.add_argument("--devices", type=int, default=15_000)
    parser.add_argument("--seconds-between", type=float, default=15.0, help="seconds between a device's messages")
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--connect-rate", type=float, default=400.0)
    args = parser.parse_args(argv)
    results = run_bench(args)
    print_table(results)
    write_figures(results, args.report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
