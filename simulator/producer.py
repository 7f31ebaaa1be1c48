"""One producer process: sends its share of the host's messages and reports what was acked.

Runs in a child process (multiprocessing "spawn"): it builds its own confluent-kafka producer,
says "ready", waits for the common start time, sends on schedule (or flat out with --rate 0),
and sends back a ProducerResult. Talks to the parent over a Pipe: ("ready"), ("progress", ...),
("done", result) or ("error", one line).
"""

from __future__ import annotations

import array
import dataclasses
import signal
import time

import numpy as np
from confluent_kafka import KafkaError, KafkaException, Producer

from simulator import histograms, kafka_config
from simulator.authorization import missing_permission
from simulator.accounting import DeliveryOutcome, devices_of_process
from simulator.config import RunConfig
from simulator.errors import SimulatorError
from simulator.payload import (
    READINGS_VARIANTS,
    SENT_NS_CODEC,
    SENT_NS_HEADER,
    MessageLayout,
    TelemetryTemplate,
    process_producer_id,
)
from simulator.schedule import NS_PER_S, SendSchedule

PROGRESS_EVERY_NS = NS_PER_S
FLUSH_EVERY_NS = NS_PER_S // 10
# A wake-up costs 15-25 us of CPU on a virtual machine: above 1,000 msg/s a process sends what is
# due once a millisecond. The added delay is measured (latency counts from the intended time).
SEND_TICK_NS = 1_000_000
FLAT_OUT_BURST = 32  # messages between clock reads with --rate 0; all stamped before the burst
# produce(topic, value, key, partition, callback, on_delivery, timestamp, headers): positional
# arguments parse faster than keywords (about 0.5 us a message). -1 = the key picks the
# partition, None = the producer's on_delivery, 0 = now.
DEFAULTS = (-1, None, None, 0)


@dataclasses.dataclass(frozen=True)
class ProducerResult:
    process_index: int
    producer_id: str
    outcome: DeliveryOutcome
    measured_acked: int  # acked messages of the measured period
    period_end_ns: int  # when this process finished its measured sends
    ack_histogram: str  # encoded, microseconds
    lag_histogram: str  # encoded, microseconds, weighted by messages
    ack_clamped: int
    cpu_s: float  # CPU time of the process (Python and librdkafka threads)


class Progress:
    """Records pending ack latencies every FLUSH_EVERY_NS (small batches: no long stall) and
    sends a progress tuple to the parent every PROGRESS_EVERY_NS."""

    def __init__(self, conn, acks: histograms.LatencyRecorder, failures: list):
        self.conn, self.acks, self.failures = conn, acks, failures
        self.next_flush_ns = self.next_progress_ns = 0
        self.lag_max_ns = 0

    def maybe_send(self, now_ns: int, sent: int, lag_ns: int) -> None:
        self.lag_max_ns = max(self.lag_max_ns, lag_ns)
        if now_ns < self.next_flush_ns:
            return
        self.acks.flush()
        self.next_flush_ns = now_ns + FLUSH_EVERY_NS
        if now_ns >= self.next_progress_ns:
            self.conn.send(
                ("progress", (sent, self.acks.observed, len(self.failures), self.lag_max_ns))
            )
            self.lag_max_ns = 0
            self.next_progress_ns = now_ns + PROGRESS_EVERY_NS


def _produce_when_room(
    producer: Producer, topic: str, value: bytes, key: bytes, headers: list
) -> None:
    """The local queue is full: serve delivery reports until the message fits."""
    while True:
        producer.poll(0.001)
        try:
            producer.produce(topic, value, key, *DEFAULTS, headers)
            return
        except BufferError:
            continue


def _wait_until(producer: Producer, target_ns: int) -> None:
    """Serve delivery reports while waiting; sleep precisely for the last millisecond."""
    remaining = target_ns - time.time_ns()
    if remaining > 2_000_000:
        producer.poll(min(remaining - 1_000_000, 100_000_000) / NS_PER_S)
        remaining = target_ns - time.time_ns()
    if remaining > 0:
        time.sleep(remaining / NS_PER_S)


class ProducerProcess:
    def __init__(self, config: RunConfig, process_index: int, conn):
        self.config, self.process_index, self.conn = config, process_index, conn
        self.producer_id = process_producer_id(config.producer_id, process_index)
        self.devices = devices_of_process(config.devices, config.processes, process_index)
        self.template = TelemetryTemplate(
            run_id=config.run_id,
            producer_id=config.producer_id,
            process_index=process_index,
            devices=self.devices,
            message_bytes=config.message_bytes,
        )
        self.acks = histograms.LatencyRecorder("d", scale_to_us=1e6)
        self.lag_values, self.lag_weights = array.array("q"), array.array("q")
        self.failures: list[bytes] = []
        ack_latency, failed = self.acks.pending.append, self.failures.append

        def on_delivery(err, msg):
            if err is None:
                ack_latency(msg.latency())
            else:
                failed(msg.value())

        self.fatal_error = None  # librdkafka's reason, when it stops the producer

        def on_error(error):
            if error.fatal():
                self.fatal_error = error

        settings = kafka_config.producer_settings(config, f"simulator-{self.producer_id}", on_delivery)
        self.producer = Producer({**settings, "error_cb": on_error})
        self.progress = Progress(conn, self.acks, self.failures)
        self.sent = 0

    def connect(self) -> None:
        self.producer.list_topics(self.config.topic, timeout=self.config.connect_timeout_s)

    def run(self, start_ns: int) -> ProducerResult:
        schedule = SendSchedule(
            rate=self.config.rate or 1.0,
            processes=self.config.processes,
            process_index=self.process_index,
            start_ns=start_ns,
            warmup_s=self.config.warmup_s,
            duration_s=self.config.duration_s,
        )
        if self.config.rate > 0:
            first_measured, period_end_ns, window_acked = self._send_on_schedule(schedule)
        else:
            first_measured, period_end_ns, window_acked = self._send_flat_out(schedule)
        remaining = self.producer.flush(self.config.drain_timeout_s)
        if remaining:
            self.producer.purge()  # what is left is reported as failed, never as acked
            self.producer.flush(5.0)
        self.acks.flush()
        failed = self._failed_indices()
        if window_acked is None:  # on schedule: every measured message that was acked
            window_acked = (
                self.sent - first_measured - sum(1 for index in failed if index >= first_measured)
            )
        lag = histograms.new_histogram()
        if self.lag_values:
            histograms.record_microseconds(
                lag,
                np.frombuffer(self.lag_values.tobytes(), dtype=np.int64) // 1000,
                np.frombuffer(self.lag_weights.tobytes(), dtype=np.int64),
            )
        return ProducerResult(
            process_index=self.process_index,
            producer_id=self.producer_id,
            outcome=DeliveryOutcome(
                sent=self.sent, acked=self.acks.observed, failed_indices=tuple(failed)
            ),
            measured_acked=window_acked,
            period_end_ns=period_end_ns,
            ack_histogram=histograms.encode(self.acks.histogram),
            lag_histogram=histograms.encode(lag),
            ack_clamped=self.acks.clamped,
            cpu_s=round(time.process_time(), 3),
        )

    def _failed_indices(self) -> list[int]:
        layout = MessageLayout.for_host(self.config.run_id, self.config.producer_id)
        per_seq = len(self.devices)
        return [
            int(value[layout.seq]) * per_seq + int(value[layout.device]) // self.config.processes
            for value in self.failures
        ]

    def _start_measuring(self) -> None:
        """Acks that arrive from now on count; warmup acks served so far are dropped."""
        self.producer.poll(0)
        self.acks.start_over()

    def _send_on_schedule(self, schedule: SendSchedule) -> tuple[int, int, None]:
        produce, poll, topic = self.producer.produce, self.producer.poll, self.config.topic
        templates, keys, readings = (
            self.template.templates,
            self.template.keys,
            self.template.readings,
        )
        pack, header, mask = SENT_NS_CODEC.pack, SENT_NS_HEADER, READINGS_VARIANTS - 1
        per_seq, total, first_measured = len(keys), schedule.messages, schedule.first_measured
        start, step = schedule.start_ns, schedule.ns_per_message
        processes, k = schedule.processes, schedule.process_index
        lag_value, lag_weight = self.lag_values.append, self.lag_weights.append
        measuring = first_measured == 0
        if measuring:
            self._start_measuring()
        i = 0
        while i < total:
            now = time.time_ns()
            due = schedule.due(now)
            if not measuring:
                if i == first_measured:
                    self._start_measuring()
                    measuring = True
                else:
                    due = min(due, first_measured)
            if due > i:
                lag = now - (start + int((i * processes + k) * step))
                lag_value(lag)
                lag_weight(due - i)
                for index in range(i, due):
                    device, seq = index % per_seq, index // per_seq
                    sent_ns = start + int((index * processes + k) * step)
                    value = templates[device] % (seq, sent_ns, readings[index & mask])
                    headers = [(header, pack(sent_ns))]
                    try:
                        produce(topic, value, keys[device], *DEFAULTS, headers)
                    except BufferError:
                        _produce_when_room(self.producer, topic, value, keys[device], headers)
                i = self.sent = due
                poll(0)
                self.progress.maybe_send(now, i, lag)
            if i < total:  # wake for the next message, but at most once per SEND_TICK_NS
                _wait_until(self.producer, max(schedule.intended_ns(i), now + SEND_TICK_NS))
        # Open loop: the measured period is the scheduled window. Falling behind still shows in
        # "behind schedule" and in end-to-end latency (taken from the intended send time), so the
        # last send's microseconds of lag must not read as a throughput shortfall.
        return first_measured, schedule.measure_end_ns, None

    def _send_flat_out(self, schedule: SendSchedule) -> tuple[int, int, int]:
        produce, poll, topic = self.producer.produce, self.producer.poll, self.config.topic
        templates, keys, readings = (
            self.template.templates,
            self.template.keys,
            self.template.readings,
        )
        pack, header, mask = SENT_NS_CODEC.pack, SENT_NS_HEADER, READINGS_VARIANTS - 1
        per_seq = len(keys)
        measure_start, measure_end = schedule.measure_start_ns, schedule.measure_end_ns
        _wait_until(self.producer, schedule.start_ns)
        first_measured, acked_at_start, i = None, 0, 0
        while True:
            now = time.time_ns()
            if now >= measure_end:
                break
            if first_measured is None and now >= measure_start:
                self._start_measuring()
                first_measured, acked_at_start = i, self.acks.observed
            header_value = [(header, pack(now))]
            for index in range(i, i + FLAT_OUT_BURST):
                device, seq = index % per_seq, index // per_seq
                value = templates[device] % (seq, now, readings[index & mask])
                try:
                    produce(topic, value, keys[device], *DEFAULTS, header_value)
                except BufferError:
                    _produce_when_room(self.producer, topic, value, keys[device], header_value)
            i = self.sent = i + FLAT_OUT_BURST
            poll(0)
            self.progress.maybe_send(now, i, 0)
        poll(0)
        window_acked = self.acks.observed - acked_at_start
        return (i if first_measured is None else first_measured), measure_end, window_acked


def run_producer_process(config: RunConfig, process_index: int, conn) -> None:
    """Entry point of a producer child process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    process = None
    try:
        if config.transport == "mqtt":
            from simulator.mqtt_producer import MqttProducerProcess  # Kafka runs never load awscrt

            process = MqttProducerProcess(config, process_index, conn)
        else:
            process = ProducerProcess(config, process_index, conn)
        process.connect()
        conn.send(("ready", None))
        start_ns = conn.recv()
        if start_ns is None:
            return
        conn.send(("done", process.run(start_ns)))
    except KafkaException as error:
        cause = error.args[0]
        if cause.code() == KafkaError._FATAL and process is not None:
            # "Local: Fatal error" says nothing; the error librdkafka stopped on says why. poll()
            # serves error_cb with it, or raises it, once its event is queued, which can be a
            # moment after produce() failed (seen in CI): poll for up to a second.
            deadline = time.monotonic() + 1.0
            while process.fatal_error is None and time.monotonic() < deadline:
                try:
                    process.producer.poll(0.05)
                except KafkaException as fatal:
                    process.fatal_error = fatal.args[0]
            cause = process.fatal_error or cause
        reason = missing_permission(cause, "produce", topic=config.topic)
        conn.send(("error", f"producer {process_index}: {reason}"))
    except SimulatorError as error:
        conn.send(("error", f"producer {process_index}: {error}"))
    except Exception as error:  # noqa: BLE001 - anything else still reaches the operator as one line
        conn.send(("error", f"producer {process_index}: {type(error).__name__}: {error}"))
    finally:
        conn.close()
