"""The host's consumer: reads every partition from where it ended at start-up, keeps only this
host's own messages (its clock stamped them, so no cross-host clock skew), and records their
end-to-end latency and sequence numbers.

Messages the simulator produced itself are read by slicing their fixed-width fields. Messages of
an MQTT run reach Kafka through the AWS IoT rule (stacks/constructs/kafka_topic_rule.py): key =
thing name (also in the header `iot_thing_name`), value = the rule's `SELECT *`, JSON that IoT
may have serialized again (key order and spacing are its own), so
those are parsed as JSON and the device is found by its thing name.
"""

from __future__ import annotations

import json
import time

from confluent_kafka import Consumer, KafkaException, TopicPartition

from simulator import kafka_config
from simulator.accounting import SequenceLedger
from simulator.authorization import is_authorization_error, missing_permission
from simulator.config import RunConfig
from simulator.errors import SimulatorError
from simulator.histograms import LatencyRecorder
from simulator.payload import MessageLayout

BATCH = 10_000
MAX_WAIT_S = 0.1


class HostConsumer:
    def __init__(
        self, config: RunConfig, layout: MessageLayout, ledger: SequenceLedger, e2e: LatencyRecorder
    ):
        self.config, self.layout, self.ledger, self.e2e = config, layout, ledger, e2e
        self.consumer = Consumer(
            kafka_config.consumer_settings(config, f"simulator-{config.producer_id}-consumer")
        )
        self.start_offsets: dict[int, int] = {}
        self.measure_start_ns = 0
        self.errors: list[str] = []
        self.foreign = 0  # messages of other hosts or runs, skipped
        # MQTT runs: thing name (the rule's Kafka key) -> device number.
        self.things = (
            {thing.encode(): device for device, thing in enumerate(config.mqtt.things)}
            if config.mqtt
            else None
        )

    def assign_from_end(self) -> None:
        """Start this host's partitions (all of them, unless it is one share of a fleet) at their
        current end, before any producer sends."""
        topic, partitions = self.config.topic, self.config.partitions
        if partitions is None:
            metadata = self.consumer.list_topics(topic, timeout=self.config.connect_timeout_s)
            partitions = sorted(metadata.topics[topic].partitions)
        self.start_offsets = self.end_offsets(partitions)
        self.consumer.assign(
            [
                TopicPartition(topic, partition, offset)
                for partition, offset in self.start_offsets.items()
            ]
        )

    def end_offsets(self, partitions=None) -> dict[int, int]:
        partitions = partitions if partitions is not None else self.start_offsets
        return {partition: self._end_offset(partition) for partition in partitions}

    def _end_offset(self, partition: int) -> int:
        """The partition's high watermark, retried while the broker is still electing leaders
        (a topic created a moment ago)."""
        deadline = time.monotonic() + self.config.connect_timeout_s
        while True:
            try:
                return self.consumer.get_watermark_offsets(
                    TopicPartition(self.config.topic, partition),
                    timeout=self.config.connect_timeout_s,
                    cached=False,
                )[1]
            except KafkaException as error:
                if not error.args[0].retriable() or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def caught_up(self, targets: dict[int, int]) -> bool:
        positions = self.consumer.position(
            [TopicPartition(self.config.topic, partition) for partition in targets]
        )
        for position in positions:
            offset = (
                position.offset if position.offset >= 0 else self.start_offsets[position.partition]
            )
            if offset < targets[position.partition]:
                return False
        return True

    def consume_for(self, seconds: float) -> None:
        """Consume and record own messages for about `seconds`."""
        deadline = time.monotonic() + seconds
        consume = self.consumer.consume
        prefix, device, seq, sent = (
            self.layout.own_prefix,
            self.layout.device,
            self.layout.seq,
            self.layout.sent_ns,
        )
        prefix_end = len(prefix)
        record, latency = self.ledger.record, self.e2e.pending.append
        measure_start = self.measure_start_ns
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            # consume(n, t) waits until n messages or t: wait for one, then take what is queued.
            batch = consume(1, min(remaining, MAX_WAIT_S))
            if not batch:
                continue
            batch += consume(BATCH, 0)
            now = time.time_ns()
            if self.things is not None:
                self._record_rule_output(batch, now)
                continue
            for message in batch:
                value = message.value()
                if value is None or value[:prefix_end] != prefix:
                    self._not_own(message)
                    continue
                sent_ns = int(value[sent])
                if record(int(value[device]), int(value[seq])) and sent_ns >= measure_start:
                    latency(now - sent_ns)

    def _record_rule_output(self, batch: list, now: int) -> None:
        """Messages of an MQTT run as the IoT rule wrote them: own ones by thing name (key),
        run id and producer id; the send time from the JSON, which the rule passes unchanged."""
        things, record, latency = self.things, self.ledger.record, self.e2e.pending.append
        run_id, own = self.config.run_id, f"{self.config.producer_id}/p"  # HOST/pNN
        for message in batch:
            key = message.key() if message.error() is None else None
            device = things.get(key) if key is not None else None
            if device is None:
                self._not_own(message)
                continue
            try:
                value = json.loads(message.value())
                if value["run_id"] != run_id or not value["producer_id"].startswith(own):
                    raise ValueError("another run or host")
                seq = int(value["seq"])
                sent_ns = int(value["sent_ns"])
            except (ValueError, TypeError, KeyError):
                self.foreign += 1
                continue
            if record(device, seq) and sent_ns >= self.measure_start_ns:
                latency(now - sent_ns)

    def _not_own(self, message) -> None:
        error = message.error()
        if error is None:
            self.foreign += 1
        elif is_authorization_error(error):  # retrying cannot help: stop with the reason
            raise SimulatorError(
                "consumer: " + missing_permission(error, "consume", topic=self.config.topic)
            )
        elif error.fatal() or len(self.errors) < 20:
            self.errors.append(str(error))
            if error.fatal():
                raise KafkaException(error)

    def close(self) -> None:
        self.consumer.close()
