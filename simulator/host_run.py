"""One host's run: check the broker, start the producer processes, consume, and collect.

The parent process is the host's consumer; the producers are child processes started with
"spawn" (librdkafka's threads do not survive a fork). They all share one start time, so the
schedule, the warmup and the measured period are the same for every process.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import sys
import time
from multiprocessing.connection import wait

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from simulator import kafka_config
from simulator.accounting import SequenceLedger
from simulator.authorization import missing_permission
from simulator.config import RunConfig
from simulator.consumer import HostConsumer
from simulator.errors import SimulatorError
from simulator.histograms import LatencyRecorder, summary_ms
from simulator.payload import MessageLayout
from simulator.producer_process import run_producer_process
from simulator.sending import ProducerResult
from simulator.schedule import NS_PER_S, SendSchedule

# A producer process that has neither said "ready" nor connected another device for this long
# has stalled. The connect phase itself has no fixed limit: at --connect-rate it takes as long
# as the devices need (15,000 devices at 100 connects/s: 150 s).
READY_TIMEOUT_S = 60.0
START_DELAY_NS = 300_000_000  # time for every process to receive the start time
TICK_S = 0.1


@dataclasses.dataclass
class HostRun:
    config: RunConfig
    start_ns: int
    results: list[ProducerResult]
    ledger: SequenceLedger
    e2e: LatencyRecorder
    consumer_errors: list[str]
    drained: bool | None  # None when the run did not consume
    consumer_partitions: list[int] | None = None  # what the consumer read; None: no consumer
    consumer_foreign: int = 0  # messages it read that another host or run sent


def _kafka_reason(error: KafkaException) -> str:
    first = error.args[0] if error.args else error
    return first.str() if hasattr(first, "str") else str(first)


def check_broker(config: RunConfig) -> int:
    """Fail fast with one line when the broker cannot be reached or the topic is missing;
    returns the topic's partition count."""
    admin = AdminClient(kafka_config.admin_settings(config))
    try:
        metadata = admin.list_topics(timeout=config.connect_timeout_s)
    except KafkaException as error:
        raise SimulatorError(
            f"cannot reach Kafka at {config.bootstrap_servers} within "
            f"{config.connect_timeout_s:g} s: {_kafka_reason(error)}"
        )
    topic = metadata.topics.get(config.topic)
    if topic is None:
        raise SimulatorError(
            f"topic {config.topic!r} does not exist on {config.bootstrap_servers}; create it first"
        )
    if topic.error is not None:
        raise SimulatorError(f"topic {config.topic!r}: {topic.error.str()}")
    return len(topic.partitions)


class _ProducerFleet:
    """The producer child processes and their pipes."""

    def __init__(self, config: RunConfig):
        context = multiprocessing.get_context("spawn")
        self.processes, self.pipes = [], []
        for index in range(config.processes):
            parent_end, child_end = context.Pipe()
            process = context.Process(
                target=run_producer_process,
                name=f"producer-{index}",
                args=(config, index, child_end),
                daemon=True,
            )
            process.start()
            child_end.close()
            self.processes.append(process)
            self.pipes.append(parent_end)
        self.progress = [(0, 0, 0, 0)] * config.processes
        self.connecting = [(0, 0)] * config.processes  # (connected, devices) per MQTT process
        self.results: dict[int, ProducerResult] = {}

    def receive(self, timeout: float) -> list[tuple[int, str, object]]:
        messages = []
        for pipe in wait([p for p in self.pipes if not p.closed], timeout):
            index = self.pipes.index(pipe)
            try:
                kind, payload = pipe.recv()
            except EOFError:
                pipe.close()
                if index not in self.results:
                    raise SimulatorError(
                        f"producer {index} exited unexpectedly "
                        f"(exit code {self.processes[index].exitcode})"
                    )
                continue
            if kind == "error":
                raise SimulatorError(str(payload))
            if kind == "progress":
                self.progress[index] = payload
            elif kind == "connecting":
                self.connecting[index] = payload
            elif kind == "done":
                self.results[index] = payload
                outcome = payload.outcome
                self.progress[index] = (outcome.sent, outcome.acked, len(outcome.failed_indices), 0)
            messages.append((index, kind, payload))
        return messages

    def wait_ready(self, progress_out=None, interval_s: float = 5.0) -> None:
        """Waits until every process is ready; fails when none made progress for READY_TIMEOUT_S.
        While MQTT devices connect, a line every interval_s says how many have."""
        ready, connected = set(), 0
        deadline = time.monotonic() + READY_TIMEOUT_S
        started, next_line = time.monotonic(), time.monotonic() + interval_s
        while len(ready) < len(self.pipes):
            now = time.monotonic()
            if now > deadline:
                raise SimulatorError(
                    f"producers not ready: no progress for {READY_TIMEOUT_S:g} s "
                    f"({len(ready)} of {len(self.pipes)} ready, {connected:,} devices connected)"
                )
            ready.update(index for index, kind, _ in self.receive(TICK_S) if kind == "ready")
            now_connected = sum(c for c, _ in self.connecting)
            if now_connected > connected or len(ready) == len(self.pipes):
                deadline = time.monotonic() + READY_TIMEOUT_S
            connected = now_connected
            if progress_out is not None and now >= next_line and any(d for _, d in self.connecting):
                devices = sum(d for _, d in self.connecting)
                print(f"[connecting {now - started:5.1f}s] {connected:,} of {devices:,} devices connected",
                      file=progress_out, flush=True)
                next_line = now + interval_s

    def start(self, start_ns: int | None) -> None:
        for pipe in self.pipes:
            if not pipe.closed:
                pipe.send(start_ns)

    def done(self) -> bool:
        return len(self.results) == len(self.processes)

    def stop(self) -> None:
        for process in self.processes:
            if process.is_alive():
                process.terminate()
        for process in self.processes:
            process.join(5)


def _progress_line(
    elapsed_s: float,
    fleet: _ProducerFleet,
    previous_acked: int,
    config: RunConfig,
    e2e: LatencyRecorder,
    measuring: bool,
) -> str:
    sent = sum(p[0] for p in fleet.progress)
    acked = sum(p[1] for p in fleet.progress)
    errors = sum(p[2] for p in fleet.progress)
    lag_ms = max(p[3] for p in fleet.progress) / 1e6
    rate = (acked - previous_acked) / config.progress_interval_s
    if not config.consume:
        latency = "e2e not measured"
    elif measuring:
        e2e.flush()
        p99 = summary_ms(e2e.histogram)["p99"]
        latency = f"e2e p99 {p99:.2f} ms" if p99 is not None else "e2e p99 -"
    else:
        latency = "warming up"
    lag = f"publish delay up to {lag_ms:.2f} ms" if config.rate > 0 else "no schedule"
    return (
        f"[{elapsed_s:6.1f}s] sent {sent:,} acked {acked:,} ({rate:,.0f} msg/s) "
        f"errors {errors:,} | {latency} | {lag}"
    )


def run_host(config: RunConfig, progress_out=sys.stderr) -> HostRun:
    """Runs this host's share of the load; every Kafka failure becomes one SimulatorError."""
    try:
        return _run_host(config, progress_out)
    except KafkaException as error:
        first = error.args[0] if error.args else None
        reason = (
            missing_permission(first, "describe", topic=config.topic)
            if isinstance(first, KafkaError)
            else _kafka_reason(error)
        )
        raise SimulatorError(f"Kafka at {config.bootstrap_servers}: {reason}") from None


def own_partitions(config: RunConfig, partition_count: int) -> tuple[int, ...]:
    """The topic's partitions this host writes to and reads back: those p with
    p % hosts == host - 1, so the hosts of a fleet never share one."""
    host, hosts = config.share
    if partition_count < hosts:
        raise SimulatorError(
            f"topic {config.topic!r} has {partition_count} partitions, fewer than the fleet's "
            f"{hosts} hosts: every host needs a partition of its own (add partitions or use "
            "fewer hosts)"
        )
    partitions = tuple(range(host - 1, partition_count, hosts))
    if config.devices < len(partitions):
        raise SimulatorError(
            f"--devices {config.devices} leaves partitions without messages: this host writes "
            f"to {len(partitions)} partitions and each device to one; use at least "
            f"{len(partitions)} devices"
        )
    return partitions


# Descriptors a host needs besides one per device connection: the processes' pipes, librdkafka
# and the consumer's sockets, log and certificate files.
DESCRIPTOR_MARGIN = 256


def raise_descriptor_limit(config: RunConfig) -> None:
    """Every device connection is a socket: raise this process's soft open-file limit to the hard
    one (the producer processes inherit it), and say in one line when even that is too few."""
    import resource

    if config.mqtt is None:
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    largest = -(-config.devices // config.processes) + DESCRIPTOR_MARGIN
    if hard != resource.RLIM_INFINITY and largest > hard:
        raise SimulatorError(
            f"--devices {config.devices} over {config.processes} process(es) needs {largest:,} open files in one "
            f"process; this host allows {hard:,} (ulimit -Hn): raise the hard limit, add --processes, or "
            "spread the devices over more hosts"
        )


def _run_host(config: RunConfig, progress_out) -> HostRun:
    raise_descriptor_limit(config)
    if config.transport == "kafka":
        partitions = own_partitions(config, check_broker(config))
        config = dataclasses.replace(config, partitions=partitions)
    elif config.consume:  # the IoT rule picks partitions by thing name: read them all
        check_broker(config)
    ledger = SequenceLedger(config.devices, config.processes, _planned_messages(config))
    e2e = LatencyRecorder("q", scale_to_us=1e-3)
    consumer = None
    if config.consume:
        consumer = HostConsumer(
            config, MessageLayout.for_host(config.run_id, config.producer_id), ledger, e2e
        )
        consumer.assign_from_end()
    fleet = _ProducerFleet(config)
    try:
        fleet.wait_ready(progress_out, config.progress_interval_s)
        start_ns = time.time_ns() + START_DELAY_NS
        measure_start_ns = start_ns + round(config.warmup_s * NS_PER_S)
        if consumer:
            consumer.measure_start_ns = measure_start_ns
        fleet.start(start_ns)
        next_progress = start_ns + round(config.progress_interval_s * NS_PER_S)
        previous_acked, measuring = 0, config.warmup_s == 0
        while not fleet.done():
            if consumer:
                consumer.consume_for(TICK_S)
                fleet.receive(0)
            else:
                fleet.receive(TICK_S)
            e2e.flush()  # every tick: small batches, so recording never stalls the consumer
            now = time.time_ns()
            measuring = measuring or now >= measure_start_ns
            if now >= next_progress:
                print(
                    _progress_line(
                        (now - start_ns) / NS_PER_S, fleet, previous_acked, config, e2e, measuring
                    ),
                    file=progress_out,
                    flush=True,
                )
                previous_acked = sum(p[1] for p in fleet.progress)
                next_progress += round(config.progress_interval_s * NS_PER_S)
        if consumer and config.mqtt:
            drained = _drain_rule_output(consumer, config, fleet)
        elif consumer:
            drained = _drain(consumer, config)
        else:
            drained = None
    except KeyboardInterrupt:
        fleet.start(None)
        raise SimulatorError("interrupted; no report written") from None
    finally:
        fleet.stop()
        if consumer:
            consumer.close()
    e2e.flush()
    results = [fleet.results[index] for index in range(config.processes)]
    return HostRun(
        config=config,
        start_ns=start_ns,
        results=results,
        ledger=ledger,
        e2e=e2e,
        consumer_errors=consumer.errors if consumer else [],
        consumer_partitions=sorted(consumer.start_offsets) if consumer else None,
        consumer_foreign=consumer.foreign if consumer else 0,
        drained=drained,
    )


def _drain(consumer: HostConsumer, config: RunConfig) -> bool:
    """Read up to the end offsets the producers left behind; False if that took too long."""
    targets = consumer.end_offsets()
    deadline = time.monotonic() + config.drain_timeout_s
    while not consumer.caught_up(targets):
        if time.monotonic() > deadline:
            return False
        consumer.consume_for(TICK_S)
    return True


def _drain_rule_output(consumer: HostConsumer, config: RunConfig, fleet: _ProducerFleet) -> bool:
    """An MQTT run's messages reach Kafka after their PUBACK, whenever the IoT rule writes them:
    the topic's end offsets when the producers finish say nothing. Read until every
    acknowledged message arrived; False if that took longer than --drain-timeout."""
    acked = sum(result.outcome.acked for result in fleet.results.values())
    deadline = time.monotonic() + config.drain_timeout_s
    while consumer.ledger.received < acked:
        if time.monotonic() > deadline:
            return False
        consumer.consume_for(TICK_S)
    return True


def _planned_messages(config: RunConfig) -> list[int] | None:
    if config.rate <= 0:
        return None
    return [
        SendSchedule(
            rate=config.rate,
            processes=config.processes,
            process_index=index,
            start_ns=0,
            warmup_s=config.warmup_s,
            duration_s=config.duration_s,
        ).messages
        for index in range(config.processes)
    ]
