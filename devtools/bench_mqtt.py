#!/usr/bin/env python3
"""MQTT publish rate of one simulator process per core of CPU, over TLS and without, next to the
same figure for the Kafka transport (`make bench`).

Per core means messages per second of the producer process's own CPU time (its Python thread
and the client's threads: awscrt's event loops or librdkafka's). That time includes start-up
(imports, connections, templates), so each figure comes from two runs of different length at
the same rate: (messages of the long run - messages of the short run) / (CPU of the long run -
CPU of the short run) is what one more message costs, start-up left out.

The broker is a local mosquitto (devtools/local_mosquitto.py) with the devices' TLS listener and,
for this benchmark only, a plaintext listener on 127.0.0.1; Kafka is a local broker of its own
(devtools/local_kafka.py). The rate is above what one process can publish over MQTT here, so the
process sends as fast as it can; every run is bounded by its message count.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from devtools import local_kafka, local_mosquitto  # noqa: E402
from devtools.figures import write_figures  # noqa: E402

DEFAULT_OUTPUT = REPO_ROOT / "bench-results" / "mqtt.json"
PUBLISHES_PER_DEVICE_S = 100  # AWS IoT's per-connection quota, which the CLI enforces


class BenchError(Exception):
    pass


def simulate(folder: Path, name: str, flags: list[str], rate: float, duration: float) -> dict:
    report = folder / f"{name}-{duration:g}s.json"
    command = [
        sys.executable, "-m", "simulator", "run", *flags, "--rate", f"{rate:g}",
        "--duration", f"{duration:g}", "--warmup", "0", "--processes", "1", "--no-consume",
        "--slo-min-rate", "0", "--progress-interval", "60", "--report", str(report),
    ]  # fmt: skip
    print(f"  $ python -m simulator run {' '.join(flags[:2])} --rate {rate:g} "
          f"--duration {duration:g}", file=sys.stderr)  # fmt: skip
    result = subprocess.run(
        command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, check=False,
    )  # fmt: skip
    if result.returncode not in (0, 1):
        raise BenchError(f"simulator failed: {result.stderr.strip().splitlines()[-1:]}")
    return json.loads(report.read_text())


def per_core(folder: Path, name: str, flags: list[str], args) -> dict:
    short = simulate(folder, name, flags, args.rate, args.short)
    long = simulate(folder, name, flags, args.rate, args.long)
    for report in (short, long):
        if report["delivery_errors"]:
            raise BenchError(f"{name}: {report['delivery_errors']} messages were not acknowledged")
    messages = long["acked"] - short["acked"]
    cpu_s = long["hosts"][0]["producer_cpu_s"] - short["hosts"][0]["producer_cpu_s"]
    lag = (long["publish_delay_ms"] or {}).get("max") or 0.0
    if "{linger}" in name:  # the simulator's default linger for this rate, as it ran
        name = name.format(linger=f"{long['config']['linger_ms']:g}")
    return {
        "name": name,
        "msgs_per_core_s": round(messages / cpu_s),
        # What the long run reached on the wall clock: its messages over its scheduled period
        # plus how far the last send fell behind.
        "msgs_per_s": round(long["sent"] / (args.long + lag / 1000.0)),
        "ack_p99_ms": long["ack_latency_ms"]["p99"],
        "runs": [
            {key: report[key] for key in ("sent", "acked", "duration_s")}
            | {"producer_cpu_s": report["hosts"][0]["producer_cpu_s"]}
            for report in (short, long)
        ],
    }


def run_bench(args) -> dict:
    devices = math.ceil(args.rate / PUBLISHES_PER_DEVICE_S)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-mqtt-") as name:
        folder = Path(name)
        pki = local_mosquitto.make_pki(folder / "pki", [f"bench-{i:04d}" for i in range(devices)])
        broker = local_mosquitto.start_mosquitto(
            folder / "mosquitto", pki, environment=local_mosquitto.LOCAL_ENVIRONMENT, plaintext=True, debug=False
        )
        try:
            mqtt = [
                "--transport", "mqtt", "--device-certificates", str(pki.devices), "--environment", broker.environment,
                "--devices", str(devices), "--message-bytes", str(args.message_bytes),
            ]  # fmt: skip
            tls = ["--mqtt-endpoint", broker.endpoint, "--mqtt-ca", str(pki.ca)]
            plaintext = ["--mqtt-endpoint", f"127.0.0.1:{broker.plaintext_port}", "--mqtt-plaintext"]
            rows.append(per_core(folder, "MQTT over TLS (client certificates)", mqtt + tls, args))
            rows.append(per_core(folder, "MQTT without TLS", mqtt + plaintext, args))
        finally:
            broker.stop()
        if not args.no_kafka:
            print("starting a local Kafka broker ...", file=sys.stderr)
            state_dir = folder / "kafka"
            kafka = local_kafka.start_broker(state_dir=state_dir)
            try:
                topic = "bench-mqtt-kafka"
                local_kafka.create_topic(kafka.bootstrap_servers, topic, 6)
                time.sleep(1.0)  # let every partition elect its leader
                rows.append(per_core(folder, "Kafka (acks=all, lz4, linger {linger} ms)", [
                    "--transport", "kafka", "--bootstrap-servers", kafka.bootstrap_servers,
                    "--topic", topic, "--devices", str(devices),
                    "--message-bytes", str(args.message_bytes)], args))  # fmt: skip
            finally:
                local_kafka.stop_broker(state_dir)
    return {
        "settings": {
            "rate": args.rate, "devices": devices, "message_bytes": args.message_bytes,
            "short_s": args.short, "long_s": args.long, "cores": os.cpu_count(),
            "load_average_at_start": os.getloadavg(),
        },  # fmt: skip
        "one_process": rows,
    }


def print_table(results: dict) -> None:
    s = results["settings"]
    print(
        f"\none simulator process, {s['message_bytes']}-byte messages, {s['devices']} devices "
        f"(one connection each), QoS 1 / acks=all, {s['cores']} cores"
    )
    print(f"  asked for {s['rate']:,.0f} msg/s: MQTT falls behind, so its ack latency is queueing")
    print(f"  {'transport':<40}{'msg/s per core':>16}{'msg/s':>10}{'ack p99 ms':>12}")
    for row in results["one_process"]:
        print(
            f"  {row['name']:<40}{row['msgs_per_core_s']:>16,}{row['msgs_per_s']:>10,}"
            f"{row['ack_p99_ms']:>12.2f}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Exit codes: 0 done; 2 a run or a broker failed.",
    )
    parser.add_argument("--report", type=Path, default=DEFAULT_OUTPUT, metavar="PATH.json",
                        help="where to write the figures (default: %(default)s)")  # fmt: skip
    parser.add_argument("--rate", type=float, default=20000.0,
                        help="msg/s asked for, above what one process publishes over MQTT "
                        "(default: %(default)s)")  # fmt: skip
    parser.add_argument("--message-bytes", type=int, default=512)
    parser.add_argument("--short", type=float, default=1.0, help="seconds of the short run")
    parser.add_argument("--long", type=float, default=4.0, help="seconds of the long run")
    parser.add_argument("--no-kafka", action="store_true", help="leave out the Kafka figure")
    args = parser.parse_args(argv)
    try:
        results = run_bench(args)
    except (BenchError, local_kafka.LocalKafkaError, local_mosquitto.LocalMosquittoError) as error:
        print(f"bench_mqtt: {error}", file=sys.stderr)
        return 2
    print_table(results)
    write_figures(results, args.report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
