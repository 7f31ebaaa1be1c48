"""`telemetry compression`: the compression ratio an environment's workload declares (cdk.json
`workload.compression_ratio`), measured on a sample of your own device payloads, compressed the way
the producers compress them.

  telemetry compression --env prod --sample readings.jsonl [--producers N] [--rate MSG_PER_S]

The sample is a file of JSON lines, one payload per line exactly as devices send it. The lines are
produced, cycling through the file, at the environment's average rate shared by --producers (each
producer batches only its own messages, so more producers means smaller batches and a lower ratio),
keyed by --key-field over the environment's topic partitions, with the simulator's producer
settings: its codec, linger for that rate, and batch size (simulator/kafka_config.py). They go to
librdkafka's own mock cluster (`test.mock.num.brokers`): the real client batches and compresses
them, and nothing leaves the machine. The ratio is the payload bytes over the bytes of the record
batches the producer built (librdkafka's statistics: the topic's `batchsize`, each batch as sent,
compressed, with its header), which is what a topic with compression.type=producer stores: Kafka
keeps the producer's batches as they are ("compression.type", Kafka topic configuration). A batch of
one small message costs more than its payload (the batch and record headers), so a ratio below 1 is
a real figure, not an error.

Prints the ratio with the sample's size and the settings, and the cdk.json line to set. Offline.
Exit codes: 0 measured; 2 bad input (one line).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from telemetry.shared.arguments import bounded_number
from telemetry.shared.errors import UsageError

MOCK_BROKERS = 3
TOPIC = "sample"
STATS_INTERVAL_MS = 100
PACE_STEP_SECONDS = 0.005  # the producer is fed what is due every this many seconds


@dataclass(frozen=True)
class Measurement:
    ratio: float
    payload_bytes: int
    batch_bytes_written: int
    batches: int
    messages: int
    sample_lines: int
    sample_bytes: int
    rate_per_producer: float
    producers: int
    partitions: int
    codec: str
    linger_ms: float
    batch_bytes: int
    seconds: float


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sample", required=True, type=Path, metavar="FILE",
                        help="JSON lines, one device payload per line as devices send it")
    parser.add_argument("--key-field", default="device_id", metavar="NAME",
                        help="the payload field producers key messages by (default device_id); lines without it go unkeyed")
    parser.add_argument("--rate", type=bounded_number(float, "a number of messages per second", 0), metavar="MSG_PER_S",
                        help="the topic-wide average rate (default: the environment's workload.messages_per_second)")
    parser.add_argument("--producers", type=bounded_number(int, "a whole number of producers", 1), default=1, metavar="N",
                        help="how many producers share the rate (default 1, the largest batches; a producer per "
                             "device batches least)")  # fmt: skip
    parser.add_argument("--seconds", type=bounded_number(float, "a number of seconds", 0.5), default=3.0, metavar="S",
                        help="how long to produce (default 3 s; the sample is cycled)")


def read_sample(path: Path, key_field: str) -> list[tuple[bytes, bytes | None]]:
    """(payload, key) per line; UsageError, naming the line, for what is not a sample."""
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"--sample: {path} does not exist") from None
    except (IsADirectoryError, PermissionError) as err:
        raise UsageError(f"--sample: {path} cannot be read ({type(err).__name__})") from None
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise UsageError(f"--sample: {path} holds no payloads; give one JSON payload per line")
    sample = []
    for number, line in enumerate(lines, start=1):
        try:
            payload = json.loads(line)
        except ValueError:
            raise UsageError(f"--sample: line {number} of {path} is not JSON; give one JSON payload per line") from None
        key = payload.get(key_field) if isinstance(payload, dict) else None
        sample.append((line, None if key is None else str(key).encode()))
    return sample


def producer_settings(rate_per_producer: float) -> dict[str, Any]:
    """The simulator's producer, as `telemetry simulate` runs it at this rate per producer."""
    from simulator.cli import default_linger_ms
    from simulator.flags import build_parser

    defaults = build_parser().parse_args(["run", "--bootstrap-servers", "mock", "--topic", "mock", "--rate", "1",
                                          "--duration", "1", "--report", "-"])
    return {
        "compression.type": defaults.compression,
        "batch.size": defaults.batch_bytes,
        "linger.ms": default_linger_ms(rate_per_producer, 1),
        "partitioner": "murmur2_random",
        "max.in.flight.requests.per.connection": 5,
    }


def measure(sample: list[tuple[bytes, bytes | None]], *, rate: float, producers: int, partitions: int,
            seconds: float) -> Measurement:  # fmt: skip
    from confluent_kafka import Producer

    rate_per_producer = rate / producers
    settings = producer_settings(rate_per_producer)
    stats: list[dict[str, Any]] = []
    producer = Producer({"test.mock.num.brokers": MOCK_BROKERS, "log_level": 3, **settings,
                         "statistics.interval.ms": STATS_INTERVAL_MS,
                         "stats_cb": lambda document: stats.append(json.loads(document))})  # fmt: skip
    # The mock cluster creates a topic on first use with partitions of its own choosing (it takes
    # no CreateTopics). Batching depends on the rate each partition receives, so the producer is
    # paced to give each of those partitions what one of the environment's would get.
    producer.produce(TOPIC, value=b"")
    producer.flush(10)
    mock_partitions = len(producer.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions)
    pace = rate_per_producer * mock_partitions / partitions
    _next_statistics(producer, stats)  # the priming message's batch falls before the sample's
    first = len(stats)
    payload_bytes = messages = 0
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < seconds:
        while messages < math.floor(pace * elapsed):  # on schedule, however long a step took
            payload, key = sample[messages % len(sample)]
            try:
                producer.produce(TOPIC, value=payload, key=key)
            except BufferError:
                producer.poll(0.01)
                continue
            payload_bytes += len(payload)
            messages += 1
        producer.poll(0)
        time.sleep(PACE_STEP_SECONDS)
    if producer.flush(30) > 0:
        raise UsageError("the mock cluster did not take every message within 30 s; lower --rate or --seconds")
    _next_statistics(producer, stats)
    # Each statistics document covers the batches since the last one (a window that rolls over at
    # each emit), so their sums over the run add up to every batch once.
    windows = [document["topics"].get(TOPIC, {}) for document in stats[first:]]
    written = sum(window.get("batchsize", {}).get("sum", 0) for window in windows)
    batches = sum(window.get("batchsize", {}).get("cnt", 0) for window in windows)
    return Measurement(
        ratio=payload_bytes / written if written else math.inf, payload_bytes=payload_bytes,
        batch_bytes_written=written, batches=batches,
        messages=messages, sample_lines=len(sample), sample_bytes=sum(len(p) for p, _ in sample),
        rate_per_producer=rate_per_producer, producers=producers, partitions=partitions,
        codec=settings["compression.type"], linger_ms=settings["linger.ms"], batch_bytes=settings["batch.size"],
        seconds=seconds,
    )  # fmt: skip


def _next_statistics(producer: Any, stats: list[dict[str, Any]]) -> None:
    """Wait for a statistics document emitted after this call began."""
    seen = len(stats)
    deadline = time.monotonic() + 5
    while len(stats) <= seen:
        if time.monotonic() > deadline:
            raise UsageError("librdkafka reported no statistics within 5 s; nothing was measured")
        producer.poll(0.05)


def _text(found: Measurement, environment: str) -> str:
    return "\n".join([
        f"sample: {found.sample_lines:,} payloads, {found.sample_bytes:,} bytes ({found.sample_bytes / found.sample_lines:,.0f} "
        "bytes on average)",
        f"produced: {found.messages:,} messages in {found.seconds:g} s, {found.rate_per_producer:,.0f} msg/s from each of "
        f"{found.producers:,} producer(s) over {found.partitions} partitions; {found.codec}, linger {found.linger_ms:g} ms, "
        f"batches up to {found.batch_bytes:,} bytes",
        f"compression ratio: {found.ratio:.2f}x ({found.payload_bytes:,} payload bytes in {found.batches:,} record batches "
        f"of {found.batch_bytes_written:,} bytes, as the brokers store them)",
        f"in cdk.json, environments.{environment}.workload: \"compression_ratio\": {math.floor(found.ratio * 100) / 100:g}, "
        f"\"compression_ratio_source\": \"telemetry compression on <your sample>, {found.producers} producer(s)\"",
    ])  # fmt: skip


def run(args: argparse.Namespace, session_factory: Callable[[str], Any]) -> int:
    from stacks import sizing
    from stacks.config import load_environment, read_environments

    config = load_environment(read_environments(), args.env)
    sample = read_sample(args.sample, args.key_field)
    rate = args.rate if args.rate is not None else config.workload.messages_per_second
    found = measure(sample, rate=rate, producers=args.producers, partitions=sizing.sink_topic(config).partitions,
                    seconds=args.seconds)  # fmt: skip
    if args.format == "json":
        from telemetry.shared.output import document

        document({"environment": config.name, **asdict(found)})
    else:
        print(_text(found, config.name))
    return 0
