#!/usr/bin/env python3
"""The compression ratio the capacity model's workloads declare, measured as producers achieve it.

It starts a local broker (devtools/local_kafka.py), runs the simulator itself against it with its
default producer settings (lz4, linger, batch size, key per device: simulator/kafka_config.py,
simulator/flags.py), then reads what the broker wrote: the bytes of the topic's log segments on
disk against the payload bytes the simulator sent (acked messages x --message-bytes). That ratio
is what broker disk and replication traffic scale by, record and batch overhead included.

Batches decide how well lz4 does, and a batch holds the messages one producer sends to one
partition within linger.ms. By default the run is one of production's three fleet hosts at the
POC's rate: 73,800 / 3 = 24,600 msg/s, on its share (--share 1/3) of a 48-partition topic, so each
partition gets the rate per partition and per producer production would see.

  python devtools/measure_compression.py [--rate 24600 --partitions 48 --share 1/3 --duration 20]

Prints one line per figure and writes bench-results/compression.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from devtools.figures import write_figures  # noqa: E402
from devtools.local_kafka import LIBS_DIR, create_topic, start_broker, stop_broker  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_REPORT = REPO_ROOT / "bench-results" / "compression.json"
TOPIC = "compression-measure"


def log_bytes(data_dir: Path, topic: str) -> int:
    """Bytes of the topic's log segments (.log files; indexes left out) under the broker's data."""
    return sum(f.stat().st_size for f in data_dir.rglob(f"{topic}-*/*.log"))


def measure(args: argparse.Namespace) -> dict:
    state_dir = Path(tempfile.mkdtemp(prefix="measure-compression-"))
    broker = start_broker(state_dir=state_dir, libs_dir=args.libs_dir)
    try:
        create_topic(broker.bootstrap_servers, TOPIC, partitions=args.partitions, libs_dir=args.libs_dir)
        with tempfile.TemporaryDirectory() as scratch:
            report = Path(scratch) / "run.json"
            command = [
                sys.executable, "-m", "simulator", "run",
                "--bootstrap-servers", broker.bootstrap_servers, "--topic", TOPIC,
                "--rate", str(args.rate), "--duration", str(args.duration), "--share", args.share,
                "--message-bytes", str(args.message_bytes), "--compression", args.compression,
                "--no-consume", "--report", str(report),
            ]  # fmt: skip
            # Exit 1 is a missed latency SLO (simulator/flags.py EXIT_SLO_FAILED): on a shared
            # machine that says nothing about the bytes written. Anything else is a broken run.
            done = subprocess.run(command, cwd=REPO_ROOT, check=False, capture_output=True, text=True)
            if done.returncode not in (0, 1) or not report.exists():
                raise SystemExit(f"measure_compression: the simulator failed: {done.stderr.strip()[-300:]}")
            run = json.loads(report.read_text())
        acked = _count(run, "acked")
        on_disk = log_bytes(Path(broker.data_dir), TOPIC)
    finally:
        stop_broker(state_dir)
    payload = acked * args.message_bytes
    return {
        "codec": args.compression,
        "message_bytes": args.message_bytes,
        "rate": args.rate,
        "partitions": args.partitions,
        "share": args.share,
        "messages": acked,
        "payload_bytes": payload,
        "log_bytes": on_disk,
        "bytes_per_message_on_disk": on_disk / acked if acked else None,
        "compression_ratio": payload / on_disk if on_disk else None,
    }


def _count(run: dict, name: str) -> int:
    """A count of the simulator's report (top-level keys, simulator/report.py COUNTS)."""
    value = run.get(name)
    if not isinstance(value, int):
        raise SystemExit(f"measure_compression: the simulator's report has no '{name}' count")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=24_600)
    parser.add_argument("--partitions", type=int, default=48)
    parser.add_argument("--share", default="1/3")
    parser.add_argument("--duration", type=float, default=20)
    parser.add_argument("--message-bytes", type=int, default=512)
    parser.add_argument("--compression", default="lz4")
    parser.add_argument("--libs-dir", type=Path, default=LIBS_DIR)
    parser.add_argument("--report", type=Path, default=DEFAULT_REPORT)
    args = parser.parse_args(argv)
    figures = measure(args)
    print(
        f"{figures['messages']:,} messages of {figures['message_bytes']} bytes ({figures['codec']}, "
        f"{figures['rate']:,.0f} msg/s, share {figures['share']} of {figures['partitions']} partitions): "
        f"{figures['log_bytes']:,} bytes in the broker's log, {figures['bytes_per_message_on_disk']:.1f} "
        f"bytes a message, compression_ratio {figures['compression_ratio']:.2f}"
    )
    write_figures(figures, args.report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
