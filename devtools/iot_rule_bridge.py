"""A local stand-in for the AWS IoT rule that copies device messages into Kafka, between a local
mosquitto and Kafka broker (the tests' and `make demo`'s). It runs the rule as synthesized (the
TopicRule resource of the device gateway template: its SQL, the Kafka action's key, headers and
acks), and evaluates only what AWS documents; anything else stops it with
UndocumentedRuleBehaviour, so a test fails instead of passing on behaviour we imagined.

What it does, and where each step comes from (AWS IoT Developer Guide):
- Reads the rule's topic filter as the broker's `reader` identity, QoS 1.
- A payload that is not JSON: `SELECT *` alone passes it as raw binary data ("Working with binary
  payloads": "To handle your message payload as raw binary data (rather than a JSON object), you
  can use the * operator"; `SELECT * FROM 'topic/subtopic'` is its first example), so the bridge
  writes the bytes as sent. Any other SELECT item, or a `${field}` template, over such a payload is
  refused: the page does not say what they give. A payload that is JSON but not an object (an
  array, a number) is refused too: no page says whether IoT treats it as JSON or as binary.
  A risk: that the Kafka action writes a binary payload is assumed, not stated; the page names
  only the Lambda action among those that take no binary payload ("such as a Lambda action").
- Value: the SELECT clause over the JSON payload. `*` is the whole payload; `topic(n) AS alias`
  adds alias = the topic's n-th level, counted from 1 ("SELECT clause": "SELECT *, 15 as speed"
  gives the payload plus `speed`; "SQL functions", topic(Decimal)). An alias that is already a key
  of the payload is refused: no page says which of the two the output keeps.
- Key and headers: substitution templates ("Apache Kafka" rule action: `key` and the headers take
  them). "Because an expression in a substitution template is evaluated separately from the
  SELECT ... statement, you can't reference an alias created using the AS clause. You can only
  reference information present in the original payload, functions, and operators"
  ("Substitution templates"): so `${name}` reads the original payload and `${topic(n)}` the
  topic. Values are rendered as text: strings as they are, integers in decimal.
- acks from the action's client properties (the action accepts "0" or "1").
- A message the Kafka action cannot deliver goes to the error action as the message "Error
  handling (error action)" documents: ruleName, topic, cloudwatchTraceId, clientId,
  base64OriginalPayload and failures[] (failedAction, failedResource, errorMessage); the bridge
  hands it to `on_error_action` when given, and keeps it in `error_actions` otherwise.

What no source says, and so is chosen here to keep consumers honest:
- How IoT serializes the selected JSON again (key order, spacing, number format). The bridge
  writes sorted keys with ", " and ": " separators, so a consumer that sliced fixed-width fields
  of the device's bytes would fail here.
- Whether the rules engine ever writes a message twice (its retries), its batching and its
  timeout: no page says. The bridge's producer keeps librdkafka's defaults (retries within
  message.timeout.ms, no idempotence, linger 1 ms), so a retried request could write a message
  twice, which `make demo` would report as a duplicate.
- The client id of the publisher (the error message's clientId): the bridge cannot see it and
  writes the thing name, which the device policy makes the client id.
- The error message's failedAction for the Kafka action: the page's example shows only "S3Action",
  so "KafkaAction" follows that pattern; failedResource is the Kafka topic, and errorMessage is the
  Kafka client's error text, where IoT writes its own wording.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import KafkaError, Producer

from devtools import local_mosquitto


class UndocumentedRuleBehaviour(Exception):
    """The rule asks for something whose result AWS does not document."""


_SQL = re.compile(r"^SELECT (?P<items>.+) FROM '(?P<filter>[^']+)'$")
_TOPIC_FUNCTION = re.compile(r"^topic\((?P<level>\d+)\)$")
_ALIASED = re.compile(r"^(?P<expression>.+?) AS (?P<alias>[A-Za-z_][A-Za-z0-9_]*)$")
_TEMPLATE = re.compile(r"\$\{(?P<expression>[^}]*)\}")
_PAYLOAD_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def _topic_level(topic: str, expression: str) -> str | None:
    match = _TOPIC_FUNCTION.match(expression.strip())
    if not match:
        return None
    levels = topic.split("/")
    level = int(match["level"])
    if not 1 <= level <= len(levels):
        raise UndocumentedRuleBehaviour(f"topic({level}) of a topic with {len(levels)} levels")
    return levels[level - 1]


@dataclass(frozen=True)
class KafkaRule:
    """The rule as the template declares it."""

    name: str
    topic_filter: str
    select_items: tuple[str, ...]  # the SELECT clause, item by item
    kafka_topic: str
    key: str
    headers: tuple[tuple[str, str], ...]
    acks: str

    @classmethod
    def from_template(cls, template: dict) -> KafkaRule:
        (rule,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::IoT::TopicRule"]
        payload = rule["Properties"]["TopicRulePayload"]
        (action,) = payload["Actions"]
        kafka = action["Kafka"]
        sql = payload["Sql"]
        # The bridge writes the key as UTF-8 text and the value as bytes: the page's one valid value
        # for each serializer ("Apache Kafka" rule action, clientProperties).
        for name, value in (("key.serializer", "StringSerializer"), ("value.serializer", "ByteBufferSerializer")):
            if kafka["ClientProperties"].get(name, value) != value:
                raise UndocumentedRuleBehaviour(f"{name} {kafka['ClientProperties'][name]!r}: the page gives only {value}")
        match = _SQL.match(sql)
        if not match:
            raise UndocumentedRuleBehaviour(f"the bridge evaluates SELECT ... FROM '<filter>' only, not {sql!r}")
        return cls(
            name=rule["Properties"]["RuleName"],
            topic_filter=match["filter"],
            select_items=tuple(part.strip() for part in match["items"].split(",")),
            kafka_topic=kafka["Topic"],
            key=kafka["Key"],
            headers=tuple((h["Key"], h["Value"]) for h in kafka.get("Headers", [])),
            acks=kafka["ClientProperties"]["acks"],
        )

    @property
    def thing_level(self) -> int:
        """The level of the topic filter that holds the thing name (its one `+`)."""
        return self.topic_filter.split("/").index("+") + 1

    @staticmethod
    def message(payload: bytes) -> dict | None:
        """The JSON object a message carries, as the SELECT clause and the templates read it;
        None for a payload that is not JSON (binary, to the rules engine)."""
        try:
            document = json.loads(payload)
        except ValueError:  # not UTF-8, or not JSON
            return None
        if not isinstance(document, dict):
            raise UndocumentedRuleBehaviour("a JSON payload that is not an object: no page says how the rule reads it")
        return document

    def value(self, topic: str, payload: bytes, document: dict | None) -> bytes:
        """What the Kafka action writes: the SELECT output as JSON, or a binary payload as sent."""
        if document is not None:
            return json.dumps(self.select(topic, document), sort_keys=True).encode()
        if self.select_items != ("*",):
            raise UndocumentedRuleBehaviour(f"SELECT {', '.join(self.select_items)} over a payload that is not JSON")
        return bytes(payload)

    def select(self, topic: str, document: dict) -> dict:
        """The SELECT clause's output for one message (its JSON object, from message())."""
        output: dict = {}
        for item in self.select_items:
            if item == "*":
                output.update(document)
                continue
            aliased = _ALIASED.match(item)
            value = _topic_level(topic, aliased["expression"]) if aliased else None
            if value is None:
                raise UndocumentedRuleBehaviour(f"the bridge evaluates * and topic(n) AS name only, not {item!r}")
            alias = aliased["alias"]
            if alias in output or alias in document:
                raise UndocumentedRuleBehaviour(
                    f"'{item}' names a key the payload already has: the AWS IoT SQL reference does not say "
                    "which of the two the output keeps"
                )
            output[alias] = value
        return output

    def substitute(self, template: str, topic: str, document: dict | None) -> str:
        """A substitution template, evaluated against the original message (its JSON object, or
        None for a payload that is not JSON)."""

        def value(match: re.Match) -> str:
            expression = match["expression"].strip()
            level = _topic_level(topic, expression)
            if level is not None:
                return level
            if not _PAYLOAD_PATH.match(expression):
                raise UndocumentedRuleBehaviour(f"the bridge evaluates ${{topic(n)}} and ${{field}} only, not {expression!r}")
            if document is None:
                raise UndocumentedRuleBehaviour(f"${{{expression}}} over a payload that is not JSON")
            found = document
            for part in expression.split("."):
                if not isinstance(found, dict) or part not in found:
                    raise UndocumentedRuleBehaviour(f"${{{expression}}} is not in the payload")
                found = found[part]
            if isinstance(found, bool) or not isinstance(found, (str, int)):
                raise UndocumentedRuleBehaviour(f"${{{expression}}} is a {type(found).__name__}: its text is not documented")
            return str(found)

        return _TEMPLATE.sub(value, template)

    def error_message(self, topic: str, payload: bytes, error: str) -> dict:
        """The error action's message for a failed Kafka action ("Error handling (error action)")."""
        return {
            "ruleName": self.name,
            "topic": topic,
            "cloudwatchTraceId": str(uuid.uuid4()),
            "clientId": topic.split("/")[self.thing_level - 1],
            "base64OriginalPayload": base64.b64encode(payload).decode(),
            "failures": [{"failedAction": "KafkaAction", "failedResource": self.kafka_topic, "errorMessage": error}],
        }


class IotRuleBridge:
    def __init__(
        self,
        broker: local_mosquitto.Mosquitto,
        bootstrap_servers: str,
        rule: KafkaRule,
        *,
        kafka_topic: str | None = None,
        producer_settings: dict | None = None,
        on_error_action: Callable[[dict], None] | None = None,
    ):
        from awscrt import mqtt

        self.rule = rule
        self.kafka_topic = kafka_topic or rule.kafka_topic
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap_servers,
                "acks": rule.acks,
                "linger.ms": 1,
                "log_level": 3,
                **(producer_settings or {}),
            }
        )
        self.forwarded = 0
        self.delivered = 0
        self.errors: list[str] = []
        self.error_actions: list[dict] = []
        self._on_error_action = on_error_action or self.error_actions.append
        self._lock = threading.Lock()
        self.connection = broker.reader_connection(f"iot-rule-bridge-{time.monotonic_ns()}")
        subscribed, _ = self.connection.subscribe(rule.topic_filter, mqtt.QoS.AT_LEAST_ONCE, callback=self._on_message)
        subscribed.result(10)

    def _on_message(self, topic, payload, **_):
        """On an awscrt thread; confluent-kafka's produce() is thread-safe."""
        try:
            document = self.rule.message(payload)
            value = self.rule.value(topic, payload, document)
            key = self.rule.substitute(self.rule.key, topic, document).encode()
            headers = [(k, self.rule.substitute(v, topic, document).encode()) for k, v in self.rule.headers]
        except Exception as error:  # noqa: BLE001 - the test reads these
            self.errors.append(f"{type(error).__name__}: {error}")
            return

        def delivered(err: KafkaError | None, _message) -> None:
            if err is None:
                self.delivered += 1
            else:
                self._on_error_action(self.rule.error_message(topic, bytes(payload), err.str()))

        with self._lock:
            self.producer.produce(self.kafka_topic, value, key, headers=headers, on_delivery=delivered)
            self.producer.poll(0)
            self.forwarded += 1

    @contextlib.contextmanager
    def held(self, timeout: float = 30.0):
        """While held, no message goes to Kafka (each waits on the bridge's thread), and when it
        starts, every message handed to Kafka so far has its answer: delivered, or failed and
        given to the error action. A test changes the broker inside it, so no write is in flight
        at that moment. A real outage promises no such moment: a write the broker made and never
        acknowledged goes to the error action too, and its replay is a duplicate
        (docs/devices-and-gateway.md, "Device messages that failed")."""
        with self._lock:
            if self.producer.flush(timeout) != 0:
                raise TimeoutError(f"messages still in flight after {timeout} s")
            yield

    def close(self) -> None:
        self.connection.disconnect().result(5)
        with self._lock:
            self.producer.flush(30)
            self.producer = None  # gone now, not retrying a broker the session stops later
