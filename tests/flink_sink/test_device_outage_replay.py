"""A Kafka broker lost in the middle of a device run, then `telemetry devices replay`: every device
message ends in the lake exactly once, and every malformed one (not JSON, or JSON without the
fields of a reading) in the lake's dead letters once, whether the broker was up when it was sent or
it went through the failed-deliveries queue and the replay.

The parts, each the one that ships or a stand-in that cites its source:
- devices: the simulator over MQTT/TLS into mosquitto, which enforces the device policy
  (devtools/local_mosquitto.py);
- the IoT rule: the synthesized rule run by devtools/iot_rule_bridge.py, whose failed deliveries go
  to the error action as the "Error handling" page documents, here into the failed-deliveries
  queue in moto's SQS (the stack's queue: stacks/constructs/failed_deliveries.py);
- the broker: a Kafka broker of this test's own, killed (SIGKILL, as a lost machine) while devices
  publish, and started again on its data;
- the replay: telemetry/commands/devices/replay.py's Replay and Journal, publishing through the
  `replayer` identity of mosquitto where AWS IoT's data plane Publish stands (the rule then runs on
  the message as on any other, "Rules for AWS IoT");
- the lake: the sink job (SinkJobRun, the application's own KafkaSource properties from the
  synthesized template) writing Parquet, read back with DuckDB as Athena would.

What the test cannot show: a write the broker made but never acknowledged (the rule reports it
failed, and its replay is a duplicate). The broker is killed and restarted inside
IotRuleBridge.held(), when nothing is in flight; docs/devices-and-gateway.md, "Device messages that
failed", says what happens outside that moment.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from devtools import local_kafka
from devtools.iot_rule_bridge import IotRuleBridge, KafkaRule
from simulator.device_certificates import telemetry_topic
from telemetry.commands.devices import replay
from tests.conftest import REPO
from tests.mqtt_fixtures import THINGS

pytestmark = pytest.mark.integration
ENV = "dev"
DEVICES = 8
RATE = 100  # messages a second over all devices
DURATION = 9  # seconds; the broker is down from about the 2nd to the 6th
PARTITIONS = 3
# A device of its own (the run takes the first DEVICES names in sorted order) sends these once
# while the broker is up and once while it is down: bytes that are not UTF-8, and a JSON object
# without sent_ns and the readings.
MALFORMED_THING = THINGS[-1]
MALFORMED = (b"\xff\xfe a reading in a binary format", b'{"device_id":"dev-059","seq":1}')


class MqttPublish:
    """Where `telemetry devices replay` calls AWS IoT's Publish (QoS 1: it returns once the broker
    has the message), the replayer identity publishes to mosquitto and waits for the PUBACK."""

    def __init__(self, connection):
        self._connection = connection

    def publish(self, topic: str, payload: bytes) -> None:
        from awscrt import mqtt

        published, _ = self._connection.publish(topic, payload, mqtt.QoS.AT_LEAST_ONCE)
        published.result(10)


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def sink_properties(synthesized, bootstrap: str, lake: Path) -> list[dict]:
    """The application's KafkaSource group as the template gives it, pointed at this broker."""
    (application,) = [
        r for r in synthesized(ENV).stacks["telemetry_sink"]["Resources"].values()
        if r["Type"] == "AWS::KinesisAnalyticsV2::Application"
    ]  # fmt: skip
    groups = application["Properties"]["ApplicationConfiguration"]["EnvironmentProperties"]["PropertyGroups"]
    (source,) = [g["PropertyMap"] for g in groups if g["PropertyGroupId"] == "KafkaSource"]
    return [
        {"PropertyGroupId": "KafkaSource",
         "PropertyMap": {**source, "bootstrap.servers": bootstrap, "security.protocol": "PLAINTEXT"}},
        {"PropertyGroupId": "Sink",
         "PropertyMap": {"output.path": (lake / "telemetry").as_uri(), "dead.letter.path": (lake / "dead-letter").as_uri(),
                         "checkpoint.interval.ms": "500"}},
    ]  # fmt: skip


def lake_rows(root: Path) -> list[tuple[str, int]]:
    """(device_id, seq) of every committed row: the visible Parquet files (FileSink keeps parts in
    progress as hidden files), queried with DuckDB over the Hive-style partitions."""
    import duckdb

    files = sorted(str(f) for f in root.rglob("*.parquet") if not f.name.startswith("."))
    assert files, f"the sink committed no Parquet under {root}"
    query = "SELECT device_id, seq FROM read_parquet($files, hive_partitioning = true)"
    return [(device, seq) for device, seq in duckdb.connect().execute(query, {"files": files}).fetchall()]


def dead_letters(root: Path) -> list[tuple[bytes, str]]:
    """(value, reason) of every committed dead letter (flink/, DeadLetter.toJsonLine: the value as
    UTF-8 text, or base64 when it is not UTF-8)."""
    letters = []
    for file in sorted(root.rglob("*")):
        if file.is_file() and not file.name.startswith("."):
            for line in file.read_text().splitlines():
                letter = json.loads(line)
                value = letter["value"]
                raw = base64.b64decode(value) if letter["value_encoding"] == "base64" else value.encode()
                letters.append((raw, letter["reason"]))
    return letters


class OneCallAtATime:
    """A boto3 client whose calls are made one at a time. moto's SQS backend is not thread-safe:
    receive_message deep-copies queue.pending_message_groups, built from a set another receiver
    adds to (moto/sqs/models.py, receive_message), which raised "Set changed size during
    iteration" under the replay's two workers. SQS itself serves concurrent receivers; this
    serializes the calls into moto, not the replay's workers."""

    def __init__(self, client: object) -> None:
        self._client, self._lock = client, threading.Lock()

    def __getattr__(self, name: str) -> object:
        found = getattr(self._client, name)
        if not callable(found):
            return found

        def call(*args: object, **kwargs: object) -> object:
            with self._lock:
                return found(*args, **kwargs)

        return call


def test_a_broker_lost_mid_run_and_a_replay_put_every_device_message_in_the_lake_once(
    mosquitto_broker, moto_session, synthesized, java_classpath, tmp_path
):
    from confluent_kafka.admin import AdminClient, NewTopic

    state = tmp_path / "kafka"
    broker = local_kafka.start_broker(state_dir=state)
    bridge = None
    try:
        rule = KafkaRule.from_template(synthesized(ENV).stacks["device_gateway"])
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic(rule.kafka_topic, PARTITIONS, 1)])[rule.kafka_topic].result(30)
        sqs = moto_session.client("sqs")
        queue_url = sqs.create_queue(QueueName="telemetry-dev-device-failed-deliveries")["QueueUrl"]
        failed = []
        lock = threading.Lock()

        def error_action(message: dict) -> None:
            """The rule's SQS error action: the error action message as the body (useBase64 false)."""
            sqs.send_message(QueueUrl=queue_url, MessageBody=json.dumps(message))
            with lock:
                failed.append(message)

        # The action gives up on a message after 2 s without the broker, as the rules engine's
        # Kafka action fails a message it cannot deliver (its own timeout is not documented).
        bridge = IotRuleBridge(mosquitto_broker, broker.bootstrap_servers, rule,
                               producer_settings={"message.timeout.ms": 2000}, on_error_action=error_action)
        started = datetime.now(timezone.utc)
        report_path = tmp_path / "report.json"
        run = subprocess.Popen(
            [sys.executable, "-m", "simulator", "run", "--transport", "mqtt",
             "--mqtt-endpoint", mosquitto_broker.endpoint, "--device-certificates", str(mosquitto_broker.pki.devices),
             "--environment", mosquitto_broker.environment,
             "--mqtt-ca", str(mosquitto_broker.pki.ca), "--devices", str(DEVICES), "--rate", str(RATE),
             "--duration", str(DURATION), "--warmup", "0", "--processes", "1", "--drain-timeout", "10",
             "--connect-timeout", "5", "--slo-min-rate", "0", "--no-consume", "--report", str(report_path)],
            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        device = mosquitto_broker.device_connection(MALFORMED_THING)

        def send_malformed() -> None:
            from awscrt import mqtt

            for payload in MALFORMED:
                device.publish(telemetry_topic(ENV, MALFORMED_THING), payload, mqtt.QoS.AT_LEAST_ONCE)[0].result(10)

        def failed_malformed() -> int:
            with lock:
                return sum(base64.b64decode(m["base64OriginalPayload"]) in MALFORMED for m in failed)

        try:
            wait_until(lambda: bridge.delivered >= RATE, 30, "the first second of messages in Kafka")
            send_malformed()
            with bridge.held():
                local_kafka.kill_broker(state)
            send_malformed()
            wait_until(lambda: failed_malformed() == len(MALFORMED), 30, "the malformed messages failing over to the queue")
            wait_until(lambda: len(failed) >= RATE, 30, "a second of messages failing over to the queue")
            time.sleep(1)
            with bridge.held():  # every message handed over while it was down has failed by now
                local_kafka.restart_broker(state)
            stdout, stderr = run.communicate(timeout=120)
        finally:
            device.disconnect().result(5)
            if run.poll() is None:
                run.kill()
        report = json.loads(report_path.read_text())
        assert report["acked"] == report["sent"] > 0, stderr
        sent = report["sent"] + 2 * len(MALFORMED)
        wait_until(lambda: bridge.forwarded == sent, 30, "the bridge to read every device message")
        with bridge.held():
            pass
        outage = len(failed)
        assert bridge.delivered > RATE and outage >= RATE
        assert bridge.delivered + outage == bridge.forwarded == sent
        assert not bridge.errors  # the rule took every payload, malformed or not

        # The replay, as `telemetry devices replay --since <start of the run>` does it.
        connection = mosquitto_broker.replayer_connection(f"replay-{time.monotonic_ns()}")
        journal = replay.Journal(tmp_path / "journal")
        try:
            tally = replay.Replay(
                OneCallAtATime(sqs), queue_url, MqttPublish(connection), journal, rule_name=rule.name, topic_filter=rule.topic_filter,
                since=started - timedelta(seconds=1), rate=1000, workers=2, wait_seconds=0,
            ).run()  # fmt: skip
        finally:
            journal.close()
            connection.disconnect().result(5)
        assert (tally.replayed, tally.stopped, tally.left_failed_again, tally.unreadable) == (outage, "", 0, 0)
        wait_until(lambda: bridge.forwarded == sent + outage, 30, "the replayed messages at the rule")
        with bridge.held():
            pass
        assert bridge.delivered == sent and len(failed) == outage  # none failed again, malformed or not
        assert int(sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessages"])
                   ["Attributes"]["ApproximateNumberOfMessages"]) == 0

        # The lake.
        properties = tmp_path / "properties.json"
        properties.write_text(json.dumps(sink_properties(synthesized, broker.bootstrap_servers, tmp_path / "lake")))
        sink = subprocess.run(
            ["java", "-Xmx1g", "--add-opens=java.base/java.util=ALL-UNNAMED", "--add-opens=java.base/java.lang=ALL-UNNAMED",
             f"-Dlog4j2.configurationFile={REPO / 'flink/src/test/resources/log4j2-test.properties'}",
             "-cp", java_classpath, "telemetry.sink.testing.SinkJobRun",
             "--properties", str(properties), "--rows", str(report["sent"]),
             "--dead-letters", str(2 * len(MALFORMED)), "--timeout-s", "120"],
            capture_output=True, text=True, timeout=240, check=False,
        )  # fmt: skip
        assert sink.returncode == 0, sink.stderr[-3000:]
        rows = lake_rows(tmp_path / "lake" / "telemetry")
        letters = dead_letters(tmp_path / "lake" / "dead-letter")
    finally:
        if bridge is not None:
            bridge.close()
        local_kafka.stop_broker(state)

    seqs: dict[str, list[int]] = defaultdict(list)
    for device, seq in rows:
        seqs[device].append(seq)
    # Filed under the thing name the rule put in the iot_thing_name header (the topic's second level).
    assert len(seqs) == DEVICES and set(seqs) <= set(THINGS)
    for device, found in seqs.items():
        # Each device's sequence numbers, without a gap or a repeat: nothing skipped, nothing twice.
        assert sorted(found) == list(range(min(found), min(found) + len(found))), device
    assert len(rows) == report["sent"]
    # Each malformed message once for each time it was sent, with the sink's reason: none lost, none
    # looping between the queue and the replay.
    def as_sent(payload: bytes) -> str:  # JSON compared as values: the rule may serialize it again
        try:
            return json.dumps(json.loads(payload), sort_keys=True)
        except ValueError:
            return repr(payload)

    assert sorted(as_sent(payload) for payload, _ in letters) == sorted(as_sent(p) for p in MALFORMED * 2)
    assert all(reason for _, reason in letters), letters
