"""One Kafka producer process: sends its share of the host's messages and reports what was acked.

Runs in a child process (multiprocessing "spawn", entered at simulator/producer_process.py): it
builds its own confluent-kafka producer, sends on schedule (or flat out with --rate 0) from the
common start time, and returns a ProducerResult.
"""

from __future__ import annotations

import itertools
import time

from confluent_kafka import KafkaError, KafkaException, Producer

from simulator import histograms, kafka_config
from simulator.authorization import missing_permission
from simulator.accounting import DeliveryOutcome, devices_of_process
from simulator.config import RunConfig
from simulator.payload import (
    READINGS_VARIANTS,
    MessageLayout,
    TelemetryTemplate,
    process_producer_id,
)
from simulator.schedule import NS_PER_S, SendSchedule
from simulator.sending import SEND_TICK_NS, ProducerResult, Progress

# Waits of at least this long poll librdkafka for delivery reports (its timeout has whole
# milliseconds); the last stretch is one precise sleep. See _wait_until.
POLL_WAIT_MIN_NS = 1_500_000
FLAT_OUT_BURST = 256  # messages per burst with --rate 0; all stamped before the burst


def _produce_all(producer: Producer, topic: str, messages: list[dict], partition: int) -> None:
    """produce_batch until every message is queued. A full local queue marks the messages it
    refused with "_error" (confluent-kafka src/confluent_kafka/src/Producer.c,
    Producer_execute_and_handle_errors); serve delivery reports and offer those again, in order.
    Any other refusal is the run's error."""
    while producer.produce_batch(topic, messages, partition) < len(messages):
        messages = [message for message in messages if "_error" in message]
        error = messages[0].pop("_error")
        if error.code() != KafkaError._QUEUE_FULL:
            raise KafkaException(error)
        for message in messages[1:]:
            message.pop("_error")
        producer.poll(0.001)


def _wait_until(producer: Producer, target_ns: int) -> None:
    """Serve delivery reports as they arrive while waiting, then sleep precisely to target_ns.

    A message's ack latency is taken when its delivery report is served: librdkafka's
    rd_kafka_message_latency() is rd_clock() minus the enqueue time at the moment of the call
    (librdkafka src/rdkafka_msg.c). poll(timeout) returns as soon as a report is queued, so
    reports that arrive while the loop waits are timed to within its wake-up; its timeout is in
    whole milliseconds (confluent-kafka's cfl_timeout_ms truncates), hence the precise sleep for
    the last stretch."""
    while True:
        remaining = target_ns - time.time_ns()
        if remaining <= 0:
            return
        if remaining < POLL_WAIT_MIN_NS:
            time.sleep(remaining / NS_PER_S)
            return
        producer.poll(((remaining - 500_000) // 1_000_000) / 1000)


def partitions_of_devices(
    devices: list[int], host_devices: int, partitions: tuple[int, ...] | None
) -> list[int]:
    """The partition each of these (global) device numbers writes to: device d of the host's
    host_devices to partitions[d * len(partitions) // host_devices], one block of consecutive
    devices per partition. A device's messages stay in order on one partition, as with a key;
    a host writes only to its own share; every partition gets devices (there are at least as
    many as partitions); and a process's devices, taken in order, step through the partitions
    only forward, so a burst of consecutive messages is a few runs of one partition each.
    Without partitions, -1 lets the partitioner pick by key."""
    if not partitions:
        return [-1] * len(devices)
    return [partitions[device * len(partitions) // host_devices] for device in devices]


def partition_runs(partitions: list[int]) -> list[int]:
    """For each position j, where the run of partitions[j]'s value that holds j ends."""
    ends, end = [0] * len(partitions), len(partitions)
    for j in range(len(partitions) - 1, -1, -1):
        if j + 1 < len(partitions) and partitions[j + 1] != partitions[j]:
            end = j + 1
        ends[j] = end
    return ends


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
        self.partitions = partitions_of_devices(self.devices, config.devices, config.partitions)
        self.run_ends = partition_runs(self.partitions)
        self.acks = histograms.LatencyRecorder("d", scale_to_us=1e6)
        self.publish_delays: histograms.PublishDelays | None = None
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
        self.flat_out = config.rate == 0
        self.progress = Progress(conn, self.acks, self.failures, self.acked)
        self.sent = 0

    def acked(self) -> int:
        """Messages whose delivery report was served without an error.

        On a schedule every report reaches on_delivery. Flat out only failures do
        (delivery.report.only.error, see kafka_config.producer_settings), so the acks are what
        was handed over minus what librdkafka still holds minus the failures: len(producer) is
        rd_kafka_outq_len(), the messages not yet destroyed (a message lives until its report
        is served) plus the reply queue's ops (librdkafka src/rdkafka.c); poll(0) first serves
        the queued reports, so the ops are none or few."""
        if not self.flat_out:
            return self.acks.observed
        self.producer.poll(0)
        return self.sent - len(self.producer) - len(self.failures)

    def connect(self) -> None:
        self.producer.list_topics(self.config.topic, timeout=self.config.connect_timeout_s)

    def run(self, start_ns: int) -> ProducerResult:
        self.schedule = schedule = SendSchedule(
            rate=self.config.rate or 1.0,
            processes=self.config.processes,
            process_index=self.process_index,
            start_ns=start_ns,
            warmup_s=self.config.warmup_s,
            duration_s=self.config.duration_s,
        )
        if self.config.rate > 0:
            self.publish_delays = histograms.PublishDelays(schedule)
            first_measured, period_end_ns, window_acked = self._send_on_schedule(schedule)
        else:
            first_measured, period_end_ns, window_acked = self._send_flat_out(schedule)
        remaining = self.producer.flush(self.config.drain_timeout_s)
        if remaining:
            self.producer.purge()  # what is left is reported as failed, never as acked
            self.producer.flush(5.0)
        self.acks.flush()
        acked = self.acked()
        failed = self._failed_indices()
        if window_acked is None:  # on schedule: every measured message that was acked
            window_acked = (
                self.sent - first_measured - sum(1 for index in failed if index >= first_measured)
            )
        delays = self.publish_delays
        if delays is not None:
            delays.flush()
        return ProducerResult(
            process_index=self.process_index,
            producer_id=self.producer_id,
            outcome=DeliveryOutcome(
                sent=self.sent, acked=acked, failed_indices=tuple(failed)
            ),
            measured_acked=window_acked,
            period_end_ns=period_end_ns,
            ack_histogram=None if self.flat_out else histograms.encode(self.acks.histogram),
            publish_delay_histogram=None if delays is None else histograms.encode(delays.histogram),
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

    def _send(self, first: int, end: int, sent_ns) -> None:
        """Hand messages first..end-1 to librdkafka, one produce_batch per run of messages to
        one partition.

        sent_ns: None stamps each message with its intended send time (on schedule), an int
        stamps them all with it (flat out). The message value is the only place the send time
        travels: produce_batch takes no headers (confluent-kafka's Producer.produce_batch docs)."""
        template, schedule = self.template, self.schedule
        heads, tails, keys = template.heads, template.tails, template.keys
        readings, middle, join = template.readings, template.middle_format, b"".join
        per_seq, mask = len(keys), READINGS_VARIANTS - 1
        start, step = schedule.start_ns, schedule.ns_per_message
        processes, k = schedule.processes, schedule.process_index
        # A message is its device's head, the middle (seq, send time), its readings and its
        # device's tail, joined (payload.TelemetryTemplate); seq is the round of devices.
        messages, i = [], first
        while i < end:
            seq = i // per_seq
            stop, base = min(end, (seq + 1) * per_seq), seq * per_seq
            middles = (
                (
                    middle % (seq, start + int((index * processes + k) * step))
                    for index in range(i, stop)
                )
                if sent_ns is None  # on schedule: each message's intended send time
                else itertools.repeat(middle % (seq, sent_ns))  # flat out: one for the round
            )
            messages += [
                {"value": join((heads[j], part, readings[index & mask], tails[j])), "key": keys[j]}
                for index, j, part in zip(range(i, stop), range(i - base, stop - base), middles)
            ]
            i = stop
        # The process's i-th message goes to its local device i % per_seq; consecutive devices
        # share a partition (partitions_of_devices), so one produce_batch per run of them.
        topic, producer, partitions, run_ends = (
            self.config.topic, self.producer, self.partitions, self.run_ends
        )
        i = first
        while i < end:
            j = i % per_seq
            stop = min(end, i - j + run_ends[j])
            _produce_all(
                producer,
                topic,
                messages if stop - i == len(messages) else messages[i - first : stop - first],
                partitions[j],
            )
            i = stop

    def _send_on_schedule(self, schedule: SendSchedule) -> tuple[int, int, None]:
        poll, send, clock = self.producer.poll, self._send, time.time_ns
        total, first_measured = schedule.messages, schedule.first_measured
        delays = self.publish_delays
        measuring = first_measured == 0
        if measuring:
            self._start_measuring()
        i = 0
        while i < total:
            now = clock()
            due = schedule.due(now)
            if not measuring:
                if i == first_measured:
                    self._start_measuring()
                    measuring = True
                else:
                    due = min(due, first_measured)
            if due > i:
                send(i, due, None)
                if measuring:
                    delays.burst(clock(), i, due - i)
                delay = now - schedule.intended_ns(i)
                i = self.sent = due
                poll(0)
                if self.progress.maybe_send(now, i, delay):
                    delays.flush()
            if i < total:  # wake for the next message, but at most once per SEND_TICK_NS
                _wait_until(self.producer, max(schedule.intended_ns(i), now + SEND_TICK_NS))
        # Open loop: the measured period is the scheduled window. Falling behind still shows in
        # the publish delay and in end-to-end latency (taken from the intended send time), so the
        # last send's microseconds of delay must not read as a throughput shortfall.
        return first_measured, schedule.measure_end_ns, None

    def _send_flat_out(self, schedule: SendSchedule) -> tuple[int, int, int]:
        poll, send = self.producer.poll, self._send
        measure_start, measure_end = schedule.measure_start_ns, schedule.measure_end_ns
        _wait_until(self.producer, schedule.start_ns)
        first_measured, acked_at_start, i = None, 0, 0
        while True:
            now = time.time_ns()
            if now >= measure_end:
                break
            if first_measured is None and now >= measure_start:
                self._start_measuring()
                first_measured, acked_at_start = i, self.acked()
            send(i, i + FLAT_OUT_BURST, now)
            i = self.sent = i + FLAT_OUT_BURST
            poll(0)
            self.progress.maybe_send(now, i, 0)
        window_acked = self.acked() - acked_at_start
        return (i if first_measured is None else first_measured), measure_end, window_acked


def explain_failure(error: BaseException, process: ProducerProcess | None, config: RunConfig) -> str | None:
    """One line for a Kafka failure of a producer process, or None when it is not Kafka's."""
    if not isinstance(error, KafkaException):
        return None
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
    return missing_permission(cause, "produce", topic=config.topic)
