#!/usr/bin/env python3
"""Benchmark the telemetry simulator against Kafka's own tools on a local broker (`make bench`).

1. Maximum produce rate: the simulator with 1 and with N processes (--rate 0) against
   org.apache.kafka.tools.ProducerPerformance with the same record size, acks, linger and
   compression, once with its own random records (--record-size) and once with the simulator's
   messages (--payload-file; unkeyed, so it fills one partition's batch at a time where the
   simulator keys by device), and both on a one-partition topic where keys cannot matter.
2. End-to-end latency at 5,000 msg/s and at half the rate the simulator reaches while it also
   consumes, and against org.apache.kafka.tools.EndToEndLatency (closed loop, one message in
   flight) at that tool's own rate.

Starts a broker of its own (never the one `make demo` uses), warms it up, prints a side-by-side
table and writes the figures as JSON. Runs from the project's virtual environment.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import local_kafka

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
from simulator.payload import TelemetryTemplate  # after REPO_ROOT joined sys.path

DEFAULT_OUTPUT = REPO_ROOT / "bench-results" / "simulator.json"
PP_WINDOW = re.compile(r"^(\d+) records sent, ([\d.]+) records/sec")
E2E_PERCENTILES = re.compile(r"Percentiles: 50th = (\d+), 99th = (\d+), 99.9th = (\d+)")


class BenchError(Exception):
    pass


class Bench:
    def __init__(self, args, bootstrap: str, folder: Path):
        self.args, self.bootstrap, self.folder = args, bootstrap, folder

    def topic(self, name: str) -> str:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        partitions = 1 if name.endswith("-1p") else self.args.partitions
        new = NewTopic(f"bench-{name}", num_partitions=partitions, replication_factor=1)
        admin.create_topics([new])[new.topic].result(timeout=30)
        time.sleep(1.0)  # let every partition elect its leader
        return new.topic

    def simulate(self, name: str, rate: float, *flags: str, duration: float | None = None) -> dict:
        """One `python -m simulator run` on a topic of its own; returns its report."""
        report = self.folder / f"{name}.json"
        args = self.args
        command = [
            sys.executable,
            "-m",
            "simulator",
            "run",
            "--bootstrap-servers",
            self.bootstrap,
            "--topic",
            self.topic(name),
            "--rate",
            f"{rate:g}",
            "--duration",
            f"{duration or args.duration:g}",
            "--warmup",
            f"{args.warmup:g}",
            "--message-bytes",
            str(args.message_bytes),
            "--report",
            str(report),
            *flags,
        ]
        print(f"  $ python -m simulator run --rate {rate:g} {' '.join(flags)}", file=sys.stderr)
        result = subprocess.run(
            command,
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            check=False,
        )
        if result.returncode not in (0, 1):
            raise BenchError(f"simulator failed: {result.stderr.strip().splitlines()[-1:]}")
        return json.loads(report.read_text())

    def producer_performance(self, name: str, *payload: str) -> dict:
        """Kafka's ProducerPerformance; the steady rate leaves out its first 5-second window
        (JVM start), as the simulator's warmup does."""
        args = self.args
        command = local_kafka.kafka_tool_command(
            "org.apache.kafka.tools.ProducerPerformance",
            "--topic",
            self.topic(name),
            "--num-records",
            str(args.pp_records),
            *payload,
            "--throughput",
            "-1",
            "--producer-props",
            f"bootstrap.servers={self.bootstrap}",
            "acks=all",
            f"linger.ms={args.linger_ms:g}",
            "compression.type=lz4",
            "enable.idempotence=true",
        )
        print(f"  $ ProducerPerformance {' '.join(payload[:1])}", file=sys.stderr)
        output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        windows = [
            (int(m.group(1)), float(m.group(2)))
            for line in output.splitlines()
            if (m := PP_WINDOW.match(line)) and "50th" not in line
        ]
        if not windows:
            raise BenchError(f"ProducerPerformance printed no figures: {output[-300:]}")
        steady = windows[1:] or windows
        return {
            "steady_msgs_per_s": round(
                sum(n for n, _ in steady) / sum(n / rate for n, rate in steady), 1
            ),
            "windows": windows,
        }

    def end_to_end_latency(self) -> dict:
        args = self.args
        command = local_kafka.kafka_tool_command(
            "org.apache.kafka.tools.EndToEndLatency",
            self.bootstrap,
            self.topic("e2e-java"),
            str(args.e2e_messages),
            "all",
            str(args.message_bytes),
        )
        print(f"  $ EndToEndLatency {args.e2e_messages} messages", file=sys.stderr)
        started = time.monotonic()
        output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        rate = args.e2e_messages / (time.monotonic() - started)
        percentiles = E2E_PERCENTILES.search(output)
        if not percentiles:
            raise BenchError(f"EndToEndLatency printed no percentiles: {output[-300:]}")
        p50, p99, p999 = (float(v) for v in percentiles.groups())
        return {
            "name": "Kafka EndToEndLatency (closed loop, ms rounded down)",
            "throughput_msgs_per_s": round(rate, 1),
            "p50": p50,
            "p99": p99,
            "p999": p999,
            "max": None,
            "lost": None,
        }

    def telemetry_payloads(self, count: int = 1000) -> Path:
        """The simulator's own messages, one per line, for ProducerPerformance."""
        template = TelemetryTemplate(
            run_id="bench",
            producer_id="bench-host",
            process_index=0,
            devices=list(range(100)),
            message_bytes=self.args.message_bytes,
        )
        path, now = self.folder / "payloads.txt", time.time_ns()
        path.write_bytes(
            b"\n".join(template.render(i % 100, i // 100, now + i, i) for i in range(count))
        )
        return path


def latency_row(name: str, report: dict) -> dict:
    e2e = report["e2e_latency_ms"] or {}
    return {
        "name": name,
        "throughput_msgs_per_s": report["throughput_msgs_per_s"],
        **{key: e2e.get(key) for key in ("p50", "p99", "p999", "max")},
        "lost": report["lost"],
        "publish_delay_p99_ms": (report["publish_delay_ms"] or {}).get("p99"),
    }


def measure(bench: Bench, processes: int) -> dict:
    args = bench.args
    # Traffic first, until the broker's JIT has compiled its hot paths: no tool meets a cold JVM.
    bench.simulate("warmup", 0, "--processes", "1", duration=args.broker_warmup)

    print("1. maximum produce rate", file=sys.stderr)
    flat_out = [
        "--linger-ms",
        f"{args.linger_ms:g}",
        "--compression",
        "lz4",
        "--acks",
        "all",
        "--slo-min-rate",
        "0",
    ]
    random_records = bench.producer_performance(
        "pp-random", "--record-size", str(args.message_bytes)
    )
    payloads = str(bench.telemetry_payloads())
    same_messages = bench.producer_performance("pp-telemetry", "--payload-file", payloads)
    one = bench.simulate("sim-1", 0, "--processes", "1", "--no-consume", *flat_out)
    many = bench.simulate("sim-n", 0, "--processes", str(processes), "--no-consume", *flat_out)
    consuming = bench.simulate("sim-1-consume", 0, "--processes", "1", *flat_out)
    # On one partition keys cannot matter: the clients' own efficiency, side by side.
    same_one_partition = bench.producer_performance("pp-telemetry-1p", "--payload-file", payloads)
    one_one_partition = bench.simulate("sim-1-1p", 0, "--processes", "1", "--no-consume", *flat_out)
    rows = [
        ("Kafka ProducerPerformance, --record-size", random_records["steady_msgs_per_s"]),
        ("Kafka ProducerPerformance, simulator's messages", same_messages["steady_msgs_per_s"]),
        ("simulator, 1 process", one["throughput_msgs_per_s"]),
        (f"simulator, {processes} processes", many["throughput_msgs_per_s"]),
        ("simulator, 1 process + its consumer", consuming["throughput_msgs_per_s"]),
        (
            "1 partition: ProducerPerformance, simulator's msgs",
            same_one_partition["steady_msgs_per_s"],
        ),
        ("1 partition: simulator, 1 process", one_one_partition["throughput_msgs_per_s"]),
    ]

    print("2. end-to-end latency", file=sys.stderr)
    half = round(consuming["throughput_msgs_per_s"] / 2, -3)
    java = bench.end_to_end_latency()
    # EndToEndLatency sends with linger.ms=0, one message at a time: the same linger here.
    latency = [
        latency_row(
            "simulator @ 5,000 msg/s", bench.simulate("e2e-5000", 5000, "--processes", "1")
        ),
        latency_row(
            f"simulator @ half its max with consumer ({half:,.0f})",
            bench.simulate("e2e-half", half, "--processes", "1"),
        ),
        java,
        latency_row(
            "simulator @ EndToEndLatency's rate, linger 0",
            bench.simulate(
                "e2e-java-rate",
                round(java["throughput_msgs_per_s"]),
                "--processes",
                "1",
                "--linger-ms",
                "0",
            ),
        ),
    ]
    return {
        "max_rate": [{"name": n, "msgs_per_s": r} for n, r in rows],
        "simulator_1_process_vs_record_size": round(rows[2][1] / rows[0][1], 3),
        "simulator_1_process_vs_same_messages": round(rows[2][1] / rows[1][1], 3),
        "simulator_vs_java_one_partition": round(rows[6][1] / rows[5][1], 3),
        "producer_performance_windows": {
            "record_size": random_records["windows"],
            "same_messages": same_messages["windows"],
        },
        "latency": latency,
    }


def _cell(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def print_table(results: dict) -> None:
    s = results["settings"]
    base = results["max_rate"][0]["msgs_per_s"]
    print(
        f"\nmax produce rate: {s['message_bytes']}-byte records, acks=all, idempotent, linger "
        f"{s['linger_ms']:g} ms, lz4, {s['partitions']} partitions, {s['cores']} cores"
    )
    print(f"  {'producer':<50}{'msg/s':>10}{'vs Java --record-size':>24}")
    for row in results["max_rate"]:
        print(f"  {row['name']:<50}{row['msgs_per_s']:>10,.0f}{row['msgs_per_s'] / base:>24.0%}")
    print("\nend-to-end latency, ms (simulator: from the intended send time, open loop)")
    print(f"  {'run':<50}{'msg/s':>10}{'p50':>9}{'p99':>9}{'p99.9':>9}{'max':>9}{'lost':>6}")
    for row in results["latency"]:
        lost = "-" if row["lost"] is None else str(row["lost"])
        print(
            f"  {row['name']:<50}{row['throughput_msgs_per_s']:>10,.0f}"
            + "".join(f"{_cell(row[key]):>9}" for key in ("p50", "p99", "p999", "max"))
            + f"{lost:>6}"
        )


def run_bench(args) -> dict:
    cores = os.cpu_count() or 1
    settings = {
        "message_bytes": args.message_bytes,
        "linger_ms": args.linger_ms,
        "partitions": args.partitions,
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "cores": cores,
        "python": platform.python_version(),
        "load_average_at_start": os.getloadavg(),
    }
    with tempfile.TemporaryDirectory(prefix="bench-kafka-") as folder:
        print("starting a local Kafka broker ...", file=sys.stderr)
        state_dir = Path(folder) / "broker"
        broker = local_kafka.start_broker(state_dir=state_dir, full_jit=True)
        try:
            results = measure(
                Bench(args, broker.bootstrap_servers, Path(folder)), args.processes or cores
            )
        finally:
            local_kafka.stop_broker(state_dir)
    return {"settings": settings, **results}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Exit codes: 0 done; 2 a tool or the broker failed.",
    )
    parser.add_argument(
        "--report",
        type=Path,
        default=DEFAULT_OUTPUT,
        metavar="PATH.json",
        help="where to write the figures (default: %(default)s)",
    )
    parser.add_argument("--message-bytes", type=int, default=512)
    parser.add_argument(
        "--linger-ms",
        type=float,
        default=5.0,
        help="linger of the maximum-rate runs (default: %(default)s)",
    )
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument(
        "--processes", type=int, default=None, help="the N of the N-process run (default: cores)"
    )
    parser.add_argument(
        "--broker-warmup",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help="seconds of traffic before any measurement (default: %(default)s)",
    )
    parser.add_argument(
        "--pp-records",
        type=int,
        default=6_000_000,
        help="records each ProducerPerformance run sends (default: %(default)s)",
    )
    parser.add_argument(
        "--e2e-messages",
        type=int,
        default=5000,
        help="messages EndToEndLatency sends (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    try:
        results = run_bench(args)
    except (BenchError, local_kafka.LocalKafkaError, subprocess.CalledProcessError) as error:
        print(f"bench_simulator: {error}", file=sys.stderr)
        return 2
    print_table(results)
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nfigures: {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
