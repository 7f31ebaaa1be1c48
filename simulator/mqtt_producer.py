"""One producer process of an MQTT run: its share of the devices publish as AWS IoT things.

The contract the fleet's devices keep (stacks/constructs/device_policy.py): each device is an IoT
thing with its own certificate, connects with its thing name as client id and publishes only to
`telemetry/<environment>/<thing>/data`, at QoS 1. AWS IoT Core accepts at most 100 publishes/s and 512 KiB/s
per connection, so every device has a connection of its own (the CLI refuses a rate that would
need more per device). The message bytes are the simulator's JSON payload with device_id = thing.

The client is the AWS IoT Device SDK v2 for Python (`awsiotsdk`: mqtt_connection_builder over
awscrt's MQTT 3.1.1 client), the one real devices use. Its event-loop threads run in this
process; PUBACK callbacks arrive on them and only append to a deque (thread-safe), which the send
loop moves into the histogram, so the recorders stay single-threaded as in the Kafka path. Fast
enough: asked for more than it can do, one process published 14,000-17,500 msg/s to a local
mosquitto over TLS from 200 devices, 7,700-13,200 msg/s per core of its CPU (devtools/bench_mqtt.py,
three runs on 2 cores), above the 5,000 msg/s a host is asked for; paho-mqtt was not needed.

Same schedule, accounting and result as the Kafka producer (simulator/producer.py): the ack
latency is publish() to PUBACK, and a publish that was refused, lost with its connection, or not
acknowledged within --drain-timeout after the last send counts as a delivery error.
"""

from __future__ import annotations

import array
import collections
import concurrent.futures
import functools
import math
import os
import random
import time
from pathlib import Path

from awscrt import io as crt_io
from awscrt import mqtt as crt_mqtt
from awscrt.exceptions import AwsCrtError
from awsiot import mqtt_connection_builder

from simulator import histograms
from simulator.accounting import DeliveryOutcome, devices_of_process
from simulator.config import CRT_TLS_HANDSHAKE_S, MQTT_KEEP_ALIVE_S, RunConfig, mqtt_timeout_ms
from simulator.connecting import ConnectPacer, ConnectsExhausted, ConnectStats
from simulator.connecting import summary as connect_summary
from simulator.device_certificates import certificate_files, telemetry_topic
from simulator.errors import SimulatorError
from simulator.payload import READINGS_VARIANTS, TelemetryTemplate, process_producer_id
from simulator.sending import SEND_TICK_NS, ProducerResult, Progress
from simulator.schedule import NS_PER_S, SendSchedule

QOS = crt_mqtt.QoS.AT_LEAST_ONCE
DISCONNECT_TIMEOUT_S = 5.0
CONNECT_TICK_S = 0.002
RECONNECT_MAX_S = 60  # the CRT's default longest wait between reconnect attempts


def _rss_bytes() -> int:
    """This process's resident memory (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


# Failures no retry can mend: a name that does not resolve, a handshake whose certificates do not
# verify. Everything else (refused, reset, timed out, closed without CONNACK, as AWS IoT does to a
# throttled CONNECT) is retried with backoff.
PERMANENT_CONNECT_ERRORS = ("AWS_IO_DNS_", "AWS_IO_TLS_ERROR_NEGOTIATION_FAILURE")


def _permanent(error: BaseException) -> bool:
    return isinstance(error, AwsCrtError) and error.name.startswith(PERMANENT_CONNECT_ERRORS)


def _reason(error: BaseException) -> str:
    if isinstance(error, AwsCrtError):
        return f"{error.name}: {error.message}"
    return f"{type(error).__name__}: {error}"


class MqttProducerProcess:
    def __init__(self, config: RunConfig, process_index: int, conn):
        self.config, self.process_index, self.conn = config, process_index, conn
        self.mqtt = config.mqtt
        self.producer_id = process_producer_id(config.producer_id, process_index)
        self.devices = devices_of_process(config.devices, config.processes, process_index)
        self.things = [self.mqtt.things[device] for device in self.devices]
        self.template = TelemetryTemplate(
            run_id=config.run_id,
            producer_id=config.producer_id,
            process_index=process_index,
            devices=self.devices,
            message_bytes=config.message_bytes,
            device_names=self.things,
        )
        self.topics = [telemetry_topic(self.mqtt.environment, thing) for thing in self.things]
        self.acks = histograms.LatencyRecorder("q", scale_to_us=1e-3)  # nanoseconds
        self.publish_delays: histograms.PublishDelays | None = None
        self.failures: list[int] = []  # message indices never acknowledged
        # (message index, perf_counter_ns at completion, exception or None), from CRT threads.
        self.completions: collections.deque = collections.deque()
        self.progress = Progress(conn, self.acks, self.failures)
        self.connections: list[crt_mqtt.Connection | None] = [None] * len(self.things)
        self.connect_stats = ConnectStats()
        self.rss_before = self.rss_growth = 0
        self.connect_cpu_s = 0.0
        self.rng = random.Random()
        per_process_rate = config.mqtt.connect_rate / config.processes
        self.reconnect_spread_s = max(1, math.ceil(len(self.things) / per_process_rate))
        self.lifecycle: collections.deque = collections.deque()  # "interrupted" / "resumed", from CRT threads
        self.sent = 0
        self.published_at = array.array("q")
        self.settled = bytearray()

    def _connection(self, device: int) -> crt_mqtt.Connection:
        """A device's connection. A connection lost mid-run is reopened by the CRT, which waits
        reconnect_min_timeout_secs and doubles the wait after each failed attempt up to the max
        (awscrt.mqtt.Connection's documentation). Each device draws its first wait at random over
        as many seconds as this process's devices take at its share of --connect-rate, so a
        broker's restart is followed by reconnects spread at about that pace, not a storm.
        --connect-timeout bounds both the TCP connect and the wait for the CONNACK (the CRT's
        defaults: 5 s and 3 s, which a busy broker's first answer can outlast)."""
        mqtt, thing = self.mqtt, self.things[device]
        timeout_ms = mqtt_timeout_ms(self.config.connect_timeout_s)
        first_wait = self.rng.randint(1, self.reconnect_spread_s)
        reconnect = {
            "reconnect_min_timeout_secs": first_wait,
            "reconnect_max_timeout_secs": max(RECONNECT_MAX_S, 2 * self.reconnect_spread_s),
            "on_connection_interrupted": self._on_interrupted,
            "on_connection_resumed": self._on_resumed,
            "ping_timeout_ms": timeout_ms,  # also the CONNACK wait (simulator/config.py, MQTT_KEEP_ALIVE_S)
        }
        if mqtt.plaintext:
            client = crt_mqtt.Client(crt_io.ClientBootstrap.get_or_create_static_default(), None)
            socket_options = crt_io.SocketOptions()
            socket_options.connect_timeout_ms = timeout_ms
            return crt_mqtt.Connection(
                client, mqtt.host, mqtt.port, thing, clean_session=True,
                keep_alive_secs=MQTT_KEEP_ALIVE_S, socket_options=socket_options, **reconnect,
            )  # fmt: skip
        cert, key = certificate_files(Path(mqtt.certificates), thing)
        return mqtt_connection_builder.mtls_from_path(
            endpoint=mqtt.host,
            port=mqtt.port,
            cert_filepath=str(cert),
            pri_key_filepath=str(key),
            ca_filepath=mqtt.ca,  # None: the system trust store
            client_id=thing,
            clean_session=True,
            keep_alive_secs=MQTT_KEEP_ALIVE_S,
            tcp_connect_timeout_ms=timeout_ms,
            **reconnect,
        )

    def _on_interrupted(self, connection, error, **_kwargs) -> None:
        """On a CRT thread: a connection was lost; the CRT reopens it."""
        self.lifecycle.append("interrupted")

    def _on_resumed(self, connection, return_code, session_present, **_kwargs) -> None:
        self.lifecycle.append("resumed")

    def connect(self) -> None:
        """Every device's connection, opened at this process's share of --connect-rate with
        backoff (simulator/connecting.py); a device out of attempts is one line. Each
        connection is built just before its first CONNECT, so building them (TLS contexts,
        about 6 ms of CPU each) is spread over the connect phase instead of preceding it."""
        mqtt, stats = self.mqtt, self.connect_stats
        rate = mqtt.connect_rate / self.config.processes
        pacer = ConnectPacer(len(self.things), rate=rate, attempts=mqtt.connect_attempts, now=time.monotonic())
        # After the CRT's own limits: the TCP connect, the TLS handshake, then the CONNACK wait.
        watchdog = 2 * self.config.connect_timeout_s + CRT_TLS_HANDSHAKE_S + 5
        in_flight: dict[int, tuple[concurrent.futures.Future, float]] = {}
        connected, self.rss_before = 0, _rss_bytes()
        next_report = 0.0
        while connected < len(self.things):
            now = time.monotonic()
            for device in pacer.due(now):
                if self.connections[device] is None:
                    self.connections[device] = self._connection(device)
                in_flight[device] = (self.connections[device].connect(), now)
                stats.attempts.append(time.time())
            for device, (future, started) in list(in_flight.items()):
                if future.done():
                    del in_flight[device]
                    error = future.exception()
                    if error is None:
                        connected += 1
                        stats.connacks.append(time.time())
                        pacer.connected(device)
                        continue
                    reason = _reason(error)
                    if _permanent(error):
                        raise SimulatorError(
                            f"device {self.things[device]} cannot connect to MQTT {mqtt.endpoint}: {reason}"
                        ) from None
                elif now - started > watchdog:
                    del in_flight[device]
                    reason = f"no CONNACK within {watchdog:g} s"
                else:
                    continue
                stats.failures += 1
                self._abandon(device)
                try:
                    pacer.failed(device, now, reason)
                except ConnectsExhausted as exhausted:
                    raise SimulatorError(
                        f"device {self.things[device]} cannot connect to MQTT {mqtt.endpoint}: {exhausted}"
                    ) from None
            if now >= next_report:
                self.conn.send(("connecting", (connected, len(self.things))))
                next_report = now + 1.0
            time.sleep(CONNECT_TICK_S)
        self.conn.send(("connecting", (connected, len(self.things))))
        self.rss_growth = max(0, _rss_bytes() - self.rss_before)
        self.connect_cpu_s = time.process_time()

    def _abandon(self, device: int) -> None:
        """Drops a connection whose CONNECT failed; the next attempt builds a fresh one."""
        connection, self.connections[device] = self.connections[device], None
        try:
            connection.disconnect()
        except Exception:  # noqa: BLE001 - it never opened
            pass

    def _on_done(self, index: int, future) -> None:
        """On a CRT event-loop thread: hand the outcome to the send loop."""
        self.completions.append((index, time.perf_counter_ns(), future.exception()))

    def _collect(self) -> None:
        """Move PUBACKs and failures that arrived into the recorders."""
        completions, settled, published_at = self.completions, self.settled, self.published_at
        ack_latency, failed = self.acks.pending.append, self.failures.append
        while completions:
            index, done_ns, error = completions.popleft()
            if settled[index]:
                continue
            settled[index] = 1
            if error is None:
                ack_latency(done_ns - published_at[index])
            else:
                failed(index)

    def _start_measuring(self) -> None:
        self._collect()
        self.acks.start_over()

    def run(self, start_ns: int) -> ProducerResult:
        schedule = SendSchedule(
            rate=self.config.rate,
            processes=self.config.processes,
            process_index=self.process_index,
            start_ns=start_ns,
            warmup_s=self.config.warmup_s,
            duration_s=self.config.duration_s,
        )
        self.publish_delays = histograms.PublishDelays(schedule)
        self.published_at = array.array("q", bytes(8 * schedule.messages))
        self.settled = bytearray(schedule.messages)
        try:
            self._send_on_schedule(schedule)
            self._drain()
        finally:
            self._disconnect()
        first_measured = schedule.first_measured
        self.publish_delays.flush()
        self.connect_stats.interruptions = self.lifecycle.count("interrupted")
        self.connect_stats.reconnects = self.lifecycle.count("resumed")
        return ProducerResult(
            process_index=self.process_index,
            producer_id=self.producer_id,
            outcome=DeliveryOutcome(
                sent=self.sent, acked=self.acks.observed, failed_indices=tuple(self.failures)
            ),
            measured_acked=self.sent
            - first_measured
            - sum(1 for index in self.failures if index >= first_measured),
            period_end_ns=schedule.measure_end_ns,
            ack_histogram=histograms.encode(self.acks.histogram),
            publish_delay_histogram=histograms.encode(self.publish_delays.histogram),
            ack_clamped=self.acks.clamped,
            cpu_s=round(time.process_time(), 3),
            connections=connect_summary(self.connect_stats, len(self.things), self.rss_growth, self.connect_cpu_s),
        )

    def _send_on_schedule(self, schedule: SendSchedule) -> None:
        publishers = [connection.publish for connection in self.connections]
        templates, readings, topics = self.template.templates, self.template.readings, self.topics
        published_at, on_done = self.published_at, self._on_done
        mask, per_seq = READINGS_VARIANTS - 1, len(topics)
        total, first_measured = schedule.messages, schedule.first_measured
        start, step = schedule.start_ns, schedule.ns_per_message
        processes, k = schedule.processes, schedule.process_index
        delays = self.publish_delays
        clock, partial = time.perf_counter_ns, functools.partial
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
                for index in range(i, due):
                    device, seq = index % per_seq, index // per_seq
                    sent_ns = start + int((index * processes + k) * step)
                    value = templates[device] % (seq, sent_ns, readings[index & mask])
                    published_at[index] = clock()
                    future, _packet_id = publishers[device](topics[device], value, QOS)
                    future.add_done_callback(partial(on_done, index))
                if measuring:
                    delays.burst(time.time_ns(), i, due - i)
                i = self.sent = due
                self._collect()
                if self.progress.maybe_send(now, i, lag):
                    delays.flush()
            if i < total:  # PUBACKs arrive on CRT threads: nothing to serve while waiting
                target = max(schedule.intended_ns(i), now + SEND_TICK_NS)
                time.sleep(max(0, target - time.time_ns()) / NS_PER_S)

    def _drain(self) -> None:
        """Wait up to --drain-timeout for the last PUBACKs; what is still open then failed."""
        deadline = time.monotonic() + self.config.drain_timeout_s
        while True:
            self._collect()
            if self.settled.count(0, 0, self.sent) == 0 or time.monotonic() > deadline:
                break
            self.progress.maybe_send(time.time_ns(), self.sent, 0)
            time.sleep(0.01)
        self.failures.extend(index for index in range(self.sent) if not self.settled[index])
        self.settled[: self.sent] = b"\x01" * self.sent  # late completions change nothing now
        self.acks.flush()

    def _disconnect(self) -> None:
        futures = []
        for connection in self.connections:
            if connection is None:
                continue
            try:
                futures.append(connection.disconnect())
            except Exception:  # noqa: BLE001 - a connection that never opened
                continue
        concurrent.futures.wait(futures, timeout=DISCONNECT_TIMEOUT_S)
