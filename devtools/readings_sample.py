#!/usr/bin/env python3
"""A sample of telemetry as sensors send it, without the simulator's padding: the sample the
shipped `workload.compression_ratio` of every environment was measured on, until its owner measures
their own payloads.

Each reading is one JSON object of about 200 bytes: a device id, its sequence number, a nanosecond
clock and five readings with the noise real sensors have (a temperature, a humidity, a pressure, a
battery voltage, a signal strength) and a status. It is deterministic (a fixed seed), so anyone
gets the same file and the same ratio:

  python devtools/readings_sample.py readings.jsonl [--count 3000]
  telemetry compression --env prod --sample readings.jsonl --producers 3
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

DEVICES = 500
SEED = 7


def readings(count: int, *, padding: int = 0, seed: int = SEED) -> list[str]:
    """`count` readings from DEVICES sensors, one JSON line each; with `padding`, the simulator's
    filler ("x" up to its message size) after them."""
    rng = random.Random(seed)
    lines = []
    for i in range(count):
        reading = {
            "device_id": f"sensor-{i % DEVICES:04d}",
            "seq": i // DEVICES,
            "sent_ns": 1_764_400_000_000_000_000 + i * 13_550_000 + rng.randint(0, 999_999),
            "temperature_c": round(21 + rng.gauss(0, 1.5), 3),
            "humidity_pct": round(48 + rng.gauss(0, 4), 2),
            "pressure_hpa": round(1013 + rng.gauss(0, 2), 1),
            "battery_v": round(3.7 - rng.random() * 0.3, 3),
            "rssi_dbm": rng.randint(-95, -40),
            "status": rng.choice(("ok", "ok", "ok", "warn")),
        }
        if padding:
            reading["pad"] = "x" * padding
        lines.append(json.dumps(reading))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--count", type=int, default=3_000)
    args = parser.parse_args()
    args.path.write_text("\n".join(readings(args.count)) + "\n")
    print(f"{args.count:,} readings: {args.path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
