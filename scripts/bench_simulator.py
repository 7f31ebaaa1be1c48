#!/usr/bin/env python3
"""Benchmark the telemetry simulator against Kafka's own tools on a local broker (`make bench`).

1. Maximum produce rate: the simulator with 1 and with N processes (--rate 0) against
   org.apache.kafka.tools.ProducerPerformance, same record size, acks, linger, compression.
2. End-to-end latency at 5,000 msg/s and at half the simulator's maximum rate, and against
   org.apache.kafka.tools.EndToEndLatency (closed loop, one message in flight) at its own rate.

Starts a broker of its own (never the one `make demo` uses), prints a side-by-side table and
writes the figures as JSON. Runs from the simulator's virtual environment.
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
from simulator.payload import TelemetryTemplate  # noqa: E402  (needs the repository on the path)

DEFAULT_OUTPUT = REPO_ROOT / "bench-results" / "simulator.json"
PP_WINDOW = re.compile(r"^(\d+) records sent, ([\d.]+) records/sec")
E2E_PERCENTILES = re.compile(r"Percentiles: 50th = (\d+), 99th = (\d+), 99.9th = (\d+)")
E2E_AVERAGE = re.compile(r"Avg latency: ([\d.]+) ms")


class BenchError(Exception):
    pass


def create_topic(bootstrap: str, name: str, partitions: int) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions,
                                  replication_factor=1)])[name].result(timeout=30)
    time.sleep(1.0)  # let every partition elect its leader
    return name


def simulate(bootstrap: str, topic: str, rate: float, args, *extra: str) -> dict:
    """One `python -m simulator run`; returns its report."""
    with tempfile.TemporaryDirectory() as folder:
        report_path = Path(folder) / "report.json"
        command = [sys.executable, "-m", "simulator", "run", "--bootstrap-servers", bootstrap,
                   "--topic", topic, "--rate", str(rate), "--duration", str(args.duration),
                   "--warmup", str(args.warmup), "--message-bytes", str(args.message_bytes),
                   "--progress-interval", "5", "--report", str(report_path), *extra]
        print(f"  $ python -m simulator run --rate {rate:g} {' '.join(extra)}", file=sys.stderr)
        result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True,
                                env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
        if result.returncode not in (0, 1):
            raise BenchError(f"simulator failed: {result.stderr.strip().splitlines()[-1:]}")
        return json.loads(report_path.read_text())


def write_telemetry_payloads(path: Path, message_bytes: int, count: int = 1000) -> Path:
    """Messages exactly as the simulator renders them, one per line, so ProducerPerformance
    sends the same bytes (and lz4 gets the same chance to compress them)."""
    template = TelemetryTemplate(run_id="bench", producer_id="bench-host", process_index=0,
                                 devices=list(range(100)), message_bytes=message_bytes)
    now = time.time_ns()
    path.write_bytes(b"\n".join(template.render(i % 100, i // 100, now + i * 1000, i)
                                for i in range(count)))
    return path


def producer_performance(bootstrap: str, topic: str, records: int, args,
                         payloads: Path) -> dict:
    command = local_kafka.kafka_tool_command(
        "org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
        "--num-records", str(records), "--payload-file", str(payloads),
        "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all",
        f"linger.ms={args.linger_ms:g}", "compression.type=lz4", "enable.idempotence=true")
    print(f"  $ ProducerPerformance --num-records {records}", file=sys.stderr)
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    windows = [(int(m.group(1)), float(m.group(2))) for line in output.splitlines()
               if (m := PP_WINDOW.match(line)) and "50th" not in line]
    total = [line for line in output.splitlines() if "50th" in line]
    if not total:
        raise BenchError(f"ProducerPerformance printed no summary: {output[-300:]}")
    overall = float(PP_WINDOW.match(total[-1]).group(2))
    # Like the simulator's warmup, leave out the first 5-second window (JVM start, JIT).
    steady = windows[1:] or windows
    steady_rate = sum(n for n, _ in steady) / sum(n / rate for n, rate in steady)
    return {"records": records, "overall_msgs_per_s": overall,
            "steady_msgs_per_s": round(steady_rate, 1), "windows": windows}


def end_to_end_latency(bootstrap: str, topic: str, messages: int, args) -> dict:
    command = local_kafka.kafka_tool_command(
        "org.apache.kafka.tools.EndToEndLatency", bootstrap, topic, str(messages), "all",
        str(args.message_bytes))
    print(f"  $ EndToEndLatency {messages} messages", file=sys.stderr)
    started = time.monotonic()
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    elapsed = time.monotonic() - started
    percentiles, average = E2E_PERCENTILES.search(output), E2E_AVERAGE.search(output)
    if not percentiles:
        raise BenchError(f"EndToEndLatency printed no percentiles: {output[-300:]}")
    p50, p99, p999 = (float(v) for v in percentiles.groups())
    return {"messages": messages, "rate_msgs_per_s": round(messages / elapsed, 1),
            "avg_ms": float(average.group(1)), "p50": p50, "p99": p99, "p999": p999,
            "max": None, "note": "closed loop, one message in flight; whole-ms percentiles"}


def latency_row(name: str, report: dict) -> dict:
    e2e = report["e2e_latency_ms"] or {}
    return {"name": name, "rate_msgs_per_s": report["config"]["rate"],
            "throughput_msgs_per_s": report["throughput_msgs_per_s"],
            **{key: e2e.get(key) for key in ("p50", "p99", "p999", "max")},
            "lost": report["lost"], "schedule_lag_p99_ms":
                (report["schedule_lag_ms"] or {}).get("p99")}


def _cell(value, digits=2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def print_table(results: dict) -> None:
    s = results["settings"]
    base = results["max_rate"]["producer_performance"]["steady_msgs_per_s"]
    print(f"\nmax produce rate: {s['message_bytes']}-byte telemetry JSON, acks=all, idempotent, "
          f"linger {s['linger_ms']:g} ms, lz4, {s['partitions']} partitions, "
          f"{s['cores']} cores")
    print(f"  {'producer':<52}{'msg/s':>12}{'vs Java':>10}")
    for row in results["max_rate"]["rows"]:
        print(f"  {row['name']:<52}{row['msgs_per_s']:>12,.0f}{row['msgs_per_s'] / base:>10.0%}")
    print("\nend-to-end latency, ms (simulator: from intended send time; open loop)")
    print(f"  {'run':<46}{'msg/s':>10}{'p50':>10}{'p99':>10}{'p99.9':>10}{'max':>10}{'lost':>6}")
    for row in results["latency"]:
        lost = "-" if row.get("lost") is None else str(row["lost"])
        print(f"  {row['name']:<46}{row['throughput_msgs_per_s']:>10,.0f}"
              + "".join(f"{_cell(row[key]):>10}" for key in ("p50", "p99", "p999", "max"))
              + f"{lost:>6}")


def run_bench(args) -> dict:
    cores = os.cpu_count() or 1
    processes = args.processes or cores
    settings = {"message_bytes": args.message_bytes, "linger_ms": args.linger_ms,
                "partitions": args.partitions, "duration_s": args.duration,
                "warmup_s": args.warmup, "cores": cores, "processes": processes,
                "python": platform.python_version(), "machine": platform.machine()}
    max_flags = ["--no-consume", "--linger-ms", f"{args.linger_ms:g}", "--compression", "lz4",
                 "--acks", "all", "--slo-min-rate", "0"]
    with tempfile.TemporaryDirectory(prefix="bench-kafka-") as state_dir:
        print("starting a local Kafka broker ...", file=sys.stderr)
        broker = local_kafka.start_broker(state_dir=Path(state_dir), full_jit=True)
        bootstrap = broker.bootstrap_servers
        try:
            def topic(name):
                return create_topic(bootstrap, f"bench-{name}", args.partitions)
            # Traffic first, until the broker's JIT has compiled its hot paths: no tool
            # should meet a cold JVM.
            simulate(bootstrap, topic("warmup"), 0, argparse.Namespace(
                duration=args.broker_warmup, warmup=0, message_bytes=args.message_bytes),
                "--slo-min-rate", "0", "--processes", "1")
            print("1. maximum produce rate", file=sys.stderr)
            payloads = write_telemetry_payloads(Path(state_dir) / "payloads.txt",
                                                args.message_bytes)
            java = producer_performance(bootstrap, topic("pp"), args.pp_records, args, payloads)
            one = simulate(bootstrap, topic("sim-1"), 0, args, "--processes", "1", *max_flags)
            many = simulate(bootstrap, topic("sim-n"), 0, args, "--processes", str(processes),
                            *max_flags)
            consuming = simulate(bootstrap, topic("sim-1-consume"), 0, args, "--processes", "1",
                                 *max_flags[1:])
            rows = [
                {"name": "Kafka ProducerPerformance (Java, 1 producer)",
                 "msgs_per_s": java["steady_msgs_per_s"]},
                {"name": "simulator, 1 process", "msgs_per_s": one["throughput_msgs_per_s"]},
                {"name": f"simulator, {processes} processes",
                 "msgs_per_s": many["throughput_msgs_per_s"]},
                {"name": "simulator, 1 process + consumer (e2e measured)",
                 "msgs_per_s": consuming["throughput_msgs_per_s"]},
            ]
            simulator_max = max(one["throughput_msgs_per_s"], many["throughput_msgs_per_s"])
            half = round(simulator_max / 2, -3)

            print("2. end-to-end latency", file=sys.stderr)
            java_e2e = end_to_end_latency(bootstrap, topic("e2e-java"), args.e2e_messages, args)
            latency = [
                latency_row("simulator @ 5,000 msg/s", simulate(
                    bootstrap, topic("e2e-5000"), 5000, args, "--processes", str(processes))),
                latency_row(f"simulator @ half its max ({half:,.0f} msg/s)", simulate(
                    bootstrap, topic("e2e-half"), half, args, "--processes", str(processes))),
                {"name": "Kafka EndToEndLatency (closed loop)",
                 "throughput_msgs_per_s": java_e2e["rate_msgs_per_s"], **java_e2e,
                 "lost": None},
                latency_row("simulator @ EndToEndLatency's rate", simulate(
                    bootstrap, topic("e2e-java-rate"), round(java_e2e["rate_msgs_per_s"]), args,
                    "--processes", "1")),
            ]
        finally:
            local_kafka.stop_broker(Path(state_dir))
    return {"settings": settings,
            "max_rate": {"rows": rows, "producer_performance": java,
                         "simulator_1_process_vs_java": round(
                             one["throughput_msgs_per_s"] / java["steady_msgs_per_s"], 3)},
            "latency": latency}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="Exit codes: 0 done; 2 a tool or the broker failed.")
    parser.add_argument("--report", type=Path, default=DEFAULT_OUTPUT, metavar="PATH.json",
                        help="where to write the figures (default: %(default)s)")
    parser.add_argument("--message-bytes", type=int, default=512)
    parser.add_argument("--linger-ms", type=float, default=5.0,
                        help="linger for the maximum-rate runs (default: %(default)s)")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--processes", type=int, default=None,
                        help="the N of the N-process runs (default: cores)")
    parser.add_argument("--broker-warmup", type=float, default=20.0, metavar="SECONDS",
                        help="seconds of traffic before any measurement (default: %(default)s)")
    parser.add_argument("--pp-records", type=int, default=3_000_000,
                        help="records ProducerPerformance sends (default: %(default)s)")
    parser.add_argument("--e2e-messages", type=int, default=5000,
                        help="messages EndToEndLatency sends (default: %(default)s)")
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
