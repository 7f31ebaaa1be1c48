"""A test-only stand-in for the AWS IoT rule that copies device messages into Kafka
(stacks/constructs/kafka_topic_rule.py), between the tests' mosquitto and Kafka broker.

What it does, and where each step comes from:
- Reads `telemetry/+/data` (the rule's topic filter) as the broker's `reader` identity, QoS 1.
- Value: the rule's SQL `SELECT *, topic(2) AS device_id`: every field of the JSON payload plus
  device_id = the topic's second level, the thing name (AWS IoT Developer Guide, "SQL functions",
  topic(Decimal): the topic level counted from 1; "SELECT clause": `*` is the whole payload).
- Key: `${topic(2)}`, header `device_sent_ns`: `${sent_ns}` (the "Apache Kafka" rule action's
  `key` and `headers` take substitution templates; "Substitution templates": `${expression}` is
  replaced by the expression's value, rendered as a string). sent_ns is a 19-digit integer, within
  the rules engine's Int of at most 34 digits ("Data types"), so it survives as written.
- acks=1 (the "Apache Kafka" rule action accepts acks "0" or "1"; the construct uses "1").

What no source says, and so is chosen here to keep the simulator honest:
- How IoT serializes the selected JSON again (key order, spacing, number format). The bridge
  writes sorted keys with ", " and ": " separators, so a consumer that sliced fixed-width fields
  of the device's bytes would fail here.
- Which of two `device_id` keys wins when `*` already holds one; both are the thing name here.
- Whether the rules engine ever writes a message twice (its retries); the bridge writes once.
"""

from __future__ import annotations

import json
import threading
import time

from confluent_kafka import Producer

from devtools import local_mosquitto
from stacks.naming import device_topic_filter
from simulator.payload import RULE_SENT_NS_HEADER


class IotRuleBridge:
    def __init__(self, broker: local_mosquitto.Mosquitto, bootstrap_servers: str, kafka_topic: str):
        from awscrt import mqtt

        self.kafka_topic = kafka_topic
        self.producer = Producer(
            {"bootstrap.servers": bootstrap_servers, "acks": "1", "linger.ms": 1, "log_level": 3}
        )
        self.forwarded = 0
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self.connection = broker.reader_connection(f"iot-rule-bridge-{time.monotonic_ns()}")
        subscribed, _ = self.connection.subscribe(
            device_topic_filter(), mqtt.QoS.AT_LEAST_ONCE, callback=self._on_message
        )
        subscribed.result(10)

    def _on_message(self, topic, payload, **_):
        """On an awscrt thread; confluent-kafka's produce() is thread-safe."""
        try:
            thing = topic.split("/")[1]  # topic(2)
            selected = {**json.loads(payload), "device_id": thing}  # SELECT *, topic(2) AS device_id
            value = json.dumps(selected, sort_keys=True).encode()
            headers = [(RULE_SENT_NS_HEADER, str(selected["sent_ns"]).encode())]
            with self._lock:
                self.producer.produce(self.kafka_topic, value, thing.encode(), headers=headers)
                self.producer.poll(0)
                self.forwarded += 1
        except Exception as error:  # noqa: BLE001 - the test reads these
            self.errors.append(f"{type(error).__name__}: {error}")

    def close(self) -> None:
        self.connection.disconnect().result(5)
        with self._lock:
            self.producer.flush(10)
            self.producer = None  # gone now, not retrying a broker the session stops later
