"""The simulator's MQTT transport against a real mosquitto that enforces the devices' IoT policy
(tests/mqtt_fixtures.py): TLS with client certificates, and a device may publish only to
`telemetry/dev/<its thing name>/data`.

What mosquitto does with a refused publish is asserted below, with its source. What AWS IoT Core
does with a publish its policy denies (over MQTT 3.1.1) is not: no source at hand says, so these
tests claim nothing about it. The simulator only ever publishes on a device's own topic.
"""

from __future__ import annotations

import json
import os
import re
import socket
import ssl
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from devtools import local_mosquitto
from simulator.accounting import devices_of_process
from simulator.payload import READINGS_VARIANTS, TelemetryTemplate
from devtools.iot_rule_bridge import IotRuleBridge, KafkaRule
from tests.mqtt_fixtures import ENVIRONMENT, THINGS
from tests.tcp_relay import relay

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def simulate(*args, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "simulator", "run", *map(str, args)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def mqtt_flags(
    broker, certificates=None, *, devices=10, rate=200, duration=1, consume=False, **more
):
    flags = {
        "--transport": "mqtt",
        "--mqtt-endpoint": broker.endpoint,
        "--device-certificates": certificates or broker.pki.devices,
        "--environment": broker.environment,
        "--mqtt-ca": broker.pki.ca,
        "--devices": devices,
        "--rate": rate,
        "--duration": duration,
        "--warmup": 0,
        "--processes": 1,
        "--drain-timeout": 5,
        "--connect-timeout": 5,
        "--slo-min-rate": 0,
        **more,
    }
    switch = "--consume" if consume else "--no-consume"
    return [str(item) for pair in flags.items() for item in pair] + [switch]


def assert_one_line_error(result, fragment):
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr
    assert lines[-1].startswith("simulator: ") and fragment in lines[-1], result.stderr
    assert len(lines) <= 2, result.stderr  # at most the start line, then the error
    assert result.stdout == ""


def test_every_message_arrives_once_with_its_exact_bytes_on_its_devices_topic(
    mosquitto_broker, topic_reader, tmp_path
):
    devices, processes, message_bytes = 12, 2, 400
    result = simulate(
        *mqtt_flags(mosquitto_broker, devices=devices, rate=600, duration=1),
        "--processes", processes, "--message-bytes", message_bytes,
        "--run-id", "mqtt1", "--producer-id", "host-a", "--report", tmp_path / "r.json",
    )  # fmt: skip
    assert result.returncode in (0, 1), result.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["sent"] == report["acked"] == 600 and report["delivery_errors"] == 0
    assert report["ack_latency_ms"]["count"] == 600  # a PUBACK latency for every message
    assert report["config"]["transport"] == "mqtt"

    received = topic_reader.wait_for(600)
    assert len(received) == 600
    things = sorted(THINGS)[:devices]  # --devices N: the first N thing names, sorted
    expected = {}
    for process in range(processes):
        process_devices = devices_of_process(devices, processes, process)
        names = [things[d] for d in process_devices]
        template = TelemetryTemplate(
            run_id="mqtt1", producer_id="host-a", process_index=process,
            devices=process_devices, message_bytes=message_bytes, device_names=names,
        )  # fmt: skip
        for index in range(report["sent"] // processes):
            local, seq = index % len(names), index // len(names)
            expected[(names[local], seq)] = (template, local, index)
    seen = set()
    for topic, payload in received:
        message = json.loads(payload)
        thing, seq = message["device_id"], message["seq"]
        assert topic == f"telemetry/{ENVIRONMENT}/{thing}/data"
        assert (thing, seq) not in seen, f"{thing} seq {seq} arrived twice"
        seen.add((thing, seq))
        template, local, index = expected[(thing, seq)]
        assert len(payload) == message_bytes
        assert payload == template.render(local, seq, message["sent_ns"], index % READINGS_VARIANTS)
    assert seen == set(expected)


def _mqtt_packet(kind: int, body: bytes) -> bytes:
    length, encoded = len(body), b""
    while True:
        length, digit = divmod(length, 128)
        encoded += bytes([digit | (0x80 if length else 0)])
        if not length:
            return bytes([kind]) + encoded + body


def _utf8(text: str) -> bytes:
    return struct.pack(">H", len(text)) + text.encode()


class RawMqtt:
    """MQTT 3.1.1 packets by hand over TLS, to see exactly what the broker answers."""

    def __init__(self, broker, cert=None, key=None, ca=None):
        context = ssl.create_default_context(cafile=str(ca or broker.pki.ca))
        if cert:
            context.load_cert_chain(str(cert), str(key))
        raw = socket.create_connection(("127.0.0.1", broker.tls_port), timeout=5)
        self.sock = context.wrap_socket(raw, server_hostname="localhost")

    def connect(self, client_id: str) -> bytes:
        # CONNECT: protocol name "MQTT", level 4 (3.1.1), clean session, keep alive 30 s.
        self.sock.sendall(
            _mqtt_packet(0x10, _utf8("MQTT") + bytes([4, 0x02]) + struct.pack(">H", 30)
                         + _utf8(client_id))
        )  # fmt: skip
        return self.sock.recv(4)

    def publish_qos1(self, topic: str, packet_id: int, payload: bytes) -> bytes:
        self.sock.sendall(_mqtt_packet(0x32, _utf8(topic) + struct.pack(">H", packet_id) + payload))
        return self.sock.recv(16)

    def close(self):
        self.sock.close()


def test_a_device_publishing_on_another_devices_topic_is_acknowledged_and_dropped(
    mosquitto_broker, topic_reader
):
    """mosquitto 2.0 under MQTT 3.1.1 answers a publish its ACL refuses with an ordinary PUBACK
    (a 3.1.1 PUBACK has no reason code) and discards the message; the connection stays open.
    Source: src/handle_publish.c (v2.0.11), handle__publish: mosquitto_acl_check() returns
    MOSQ_ERR_ACL_DENIED, the broker logs "Denied PUBLISH" at debug level and jumps to
    process_bad_message, which for QoS 1 calls send__puback(..., MQTT_RC_NOT_AUTHORIZED); and
    lib/send_mosq.c, send__command_with_mid, adds the reason code byte only for MQTT 5 clients.
    The device cannot tell: it takes no error, only the message never reaches a subscriber.
    (AWS IoT Core may answer differently; see the module docstring.)"""
    device, other = sorted(THINGS)[2], sorted(THINGS)[3]
    pki = mosquitto_broker.pki
    client = RawMqtt(
        mosquitto_broker, pki.devices / f"{device}.cert.pem", pki.devices / f"{device}.key.pem"
    )
    try:
        assert client.connect(device) == b"\x20\x02\x00\x00"  # CONNACK, accepted
        assert client.publish_qos1(f"telemetry/{ENVIRONMENT}/{other}/data", 7, b"not mine") == b"\x40\x02\x00\x07"
        # Still connected: its own topic is accepted and delivered.
        assert client.publish_qos1(f"telemetry/{ENVIRONMENT}/{device}/data", 8, b"mine") == b"\x40\x02\x00\x08"
    finally:
        client.close()
    assert topic_reader.wait_for(1) == [(f"telemetry/{ENVIRONMENT}/{device}/data", b"mine")]
    assert f"Denied PUBLISH from {device} (d0, q1, r0, m7, 'telemetry/{ENVIRONMENT}/{other}/data'" in (
        mosquitto_broker.log_text()
    )


def test_a_connection_without_a_client_certificate_is_refused(mosquitto_broker):
    # require_certificate true: the TLS handshake fails (TLS 1.3 reports it on the first read).
    with pytest.raises((ssl.SSLError, ConnectionError)):
        client = RawMqtt(mosquitto_broker)
        try:
            answer = client.connect("dev-000")
            if answer == b"":
                raise ConnectionError("closed without CONNACK")
        finally:
            client.close()


def test_a_device_certificate_from_another_ca_cannot_connect(mosquitto_broker, tmp_path):
    pki = mosquitto_broker.pki  # pki.foreign holds the first thing's look-alike certificate
    result = simulate(
        *mqtt_flags(mosquitto_broker, pki.foreign_cert.parent, devices=1, rate=10),
        "--connect-attempts", 1, "--report", tmp_path / "r.json",
    )  # fmt: skip
    assert_one_line_error(result, f"device {sorted(THINGS)[0]} cannot connect to MQTT")
    assert "AWS_IO_TLS" in result.stderr
    assert not (tmp_path / "r.json").exists()


def test_plaintext_to_the_tls_listener_cannot_connect(mosquitto_broker, tmp_path):
    result = simulate(
        *mqtt_flags(mosquitto_broker, devices=1, rate=10), "--mqtt-plaintext",
        "--connect-attempts", 1, "--report", tmp_path / "r.json",
    )  # fmt: skip
    assert_one_line_error(result, "cannot connect to MQTT")


def test_a_name_that_does_not_resolve_is_one_line(mosquitto_broker, tmp_path):
    result = simulate(
        *mqtt_flags(mosquitto_broker, devices=1, rate=10, **{"--mqtt-endpoint": "no-such-host.invalid"}),
        "--report", tmp_path / "r.json",
    )  # fmt: skip
    assert_one_line_error(result, "cannot connect to MQTT no-such-host.invalid:8883")


def test_a_closed_port_is_one_line(mosquitto_broker, tmp_path):
    port = local_mosquitto.free_port()
    result = simulate(
        *mqtt_flags(mosquitto_broker, devices=1, rate=10, **{"--mqtt-endpoint": f"127.0.0.1:{port}"}),
        "--connect-attempts", 2, "--report", tmp_path / "r.json",
    )  # fmt: skip
    # Refused is retried (the broker may be starting), then given up with the last reason.
    assert_one_line_error(result, f"cannot connect to MQTT 127.0.0.1:{port}: gave up after 2 attempts")
    assert "CONNECTION_REFUSED" in result.stderr


def test_a_broker_lost_mid_run_keeps_what_was_acknowledged(mqtt_pki, tmp_path):
    """A broker of its own, stopped once PUBACKs flowed: the run still ends with a report; what
    was acknowledged stays acknowledged (with its latencies), everything after is a delivery
    error, and the SLO fails (exit 1), as a Kafka run with failed deliveries does."""
    broker = local_mosquitto.start_mosquitto(tmp_path / "broker", mqtt_pki, environment=ENVIRONMENT, debug=False)
    command = [
        sys.executable, "-m", "simulator", "run",
        *mqtt_flags(broker, devices=4, rate=200, duration=2, **{"--drain-timeout": 1}),
        "--progress-interval", "0.5", "--report", str(tmp_path / "r.json"),
    ]  # fmt: skip
    run = subprocess.Popen(
        command, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        for line in run.stderr:  # progress lines: "[   0.5s] sent 100 acked 100 ..."
            acked = re.search(r"acked ([\d,]+)", line)
            if acked and int(acked.group(1).replace(",", "")) > 0:
                break
        broker.stop()
        stdout, stderr = run.communicate(timeout=60)
    finally:
        broker.stop()
        if run.poll() is None:
            run.kill()
    assert run.returncode == 1, stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["sent"] == 400
    assert 0 < report["acked"] < report["sent"]
    assert report["acked"] + report["delivery_errors"] == report["sent"]
    assert report["ack_latency_ms"]["count"] == report["acked"]
    assert "SLO FAIL" in stdout and "delivery_errors" in stdout


def test_through_the_iot_rule_into_kafka_every_message_is_counted_once(
    mosquitto_broker, kafka_broker, new_topic, tmp_path, synthesized
):
    """The whole path of an MQTT run: devices -> mosquitto -> the synthesized IoT rule run by its
    stand-in -> Kafka -> the simulator's own consumer, which finds its messages in the rule's
    re-serialized JSON."""
    topic = new_topic()
    rule = KafkaRule.from_template(synthesized("dev").stacks["device_gateway"])
    bridge = IotRuleBridge(mosquitto_broker, kafka_broker.bootstrap_servers, rule, kafka_topic=topic)
    try:
        result = simulate(
            *mqtt_flags(mosquitto_broker, devices=10, rate=500, duration=2, consume=True,
                        **{"--warmup": 1, "--processes": 2}),
            "--bootstrap-servers", kafka_broker.bootstrap_servers, "--topic", topic,
            "--report", tmp_path / "r.json",
        )  # fmt: skip
    finally:
        bridge.close()
    assert result.returncode in (0, 1), result.stderr
    assert bridge.errors == [] and bridge.error_actions == []
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["sent"] == report["acked"] == report["received"] == bridge.forwarded == bridge.delivered == 1500
    assert report["lost"] == 0 and report["duplicates"] == 0 and report["delivery_errors"] == 0
    assert report["e2e_latency_ms"]["count"] == 1000  # the warmup's 500 are not measured
    assert report["consumer"]["drained"] is True


class SlowFirstAnswer:
    """A relay in front of a broker that holds back each connection's first bytes from the broker
    (a plaintext listener's CONNACK: MQTT 3.1.1, 3.2, the server's first packet) for `delay`
    seconds, as a busy broker answers late; everything else passes at once."""

    def __init__(self, upstream_port: int, delay: float) -> None:
        self.upstream_port, self.delay = upstream_port, delay
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:  # closed
                return
            relay(client, socket.create_connection(("127.0.0.1", self.upstream_port)), first_reply_delay=self.delay)

    def close(self) -> None:
        self.server.close()


def test_a_connack_later_than_the_crts_default_wait_is_awaited_for_connect_timeout(mqtt_pki, tmp_path):
    """The CRT waits for a CONNACK as long as its ping timeout (aws-c-mqtt source/client.c: the
    CONNACK timeout task runs ping_timeout_ns after the channel is up), 3 s unless told. The
    devices wait --connect-timeout (5 s here) instead: a CONNACK 3.5 s late connects at the
    first attempt."""
    broker = local_mosquitto.start_mosquitto(tmp_path / "broker", mqtt_pki, environment=ENVIRONMENT, plaintext=True,
                                             debug=False)  # fmt: skip
    relay = SlowFirstAnswer(broker.plaintext_port, delay=3.5)
    try:
        result = simulate(
            *mqtt_flags(broker, devices=1, rate=10, **{"--mqtt-endpoint": f"127.0.0.1:{relay.port}"}),
            "--mqtt-plaintext", "--connect-attempts", 1, "--report", tmp_path / "r.json",
        )  # fmt: skip
    finally:
        relay.close()
        broker.stop()
    assert result.returncode in (0, 1), result.stderr  # 1: the SLO's end-to-end figures (--no-consume)
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["acked"] == report["sent"] == 10
    assert report["connections"]["connect_failures"] == 0


@pytest.mark.parametrize("plaintext", [False, True])
def test_connect_timeout_reaches_the_crts_tcp_connect_and_connack_waits(plaintext, mqtt_pki):
    """The keywords the CRT reads (awsiot.mqtt_connection_builder._builder falls back to its
    defaults, 5 s and 3 s, for a name it does not know): what each device's connection holds."""
    from simulator.config import MqttSettings
    from simulator.mqtt_producer import MqttProducerProcess
    from tests.simulator.test_simulator_report import config as run_config

    things = tuple(sorted(THINGS))[:2]
    mqtt = MqttSettings(host="127.0.0.1", port=1, certificates=str(mqtt_pki.devices), things=things,
                        environment=ENVIRONMENT, ca=str(mqtt_pki.ca), plaintext=plaintext)  # fmt: skip
    config = run_config(devices=2, connect_timeout_s=7.25, transport="mqtt", mqtt=mqtt)
    connection = MqttProducerProcess(config, 0, None)._connection(0)
    assert connection.ping_timeout_ms == 7250  # also the CONNACK wait
    assert connection.socket_options.connect_timeout_ms == 7250
