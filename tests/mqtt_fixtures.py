"""A real mosquitto for the simulator's MQTT tests, enforcing what the devices' IoT policy does.

One broker serves the session (devtools/local_mosquitto.py: a throwaway CA, a server certificate,
one client certificate per thing, TLS client certificates required, the CN as username, each
device allowed to write only `telemetry/dev/<thing>/data`). Nothing is skipped: without mosquitto the
fixture fails and says how to install it.
"""

from __future__ import annotations

import threading
import time

import pytest

from devtools import local_mosquitto
from simulator.device_certificates import telemetry_topic

# The environment whose synthesized rule the tests run (devtools/iot_rule_bridge.py): its devices
# publish to telemetry/dev/<thing>/data.
ENVIRONMENT = "dev"

# Names of different lengths (each message is padded to the same size) and with ':' (allowed in
# AWS IoT thing names); sorted, the two "a:" names come first.
THINGS = ("a:meter_1", "a:meter_22", *(f"dev-{index:03d}" for index in range(60)))


@pytest.fixture(scope="session")
def mqtt_pki(tmp_path_factory) -> local_mosquitto.Pki:
    return local_mosquitto.make_pki(tmp_path_factory.mktemp("mqtt-pki"), list(THINGS))


@pytest.fixture(scope="session")
def mosquitto_broker(mqtt_pki, tmp_path_factory):
    try:
        broker = local_mosquitto.start_mosquitto(tmp_path_factory.mktemp("mosquitto"), mqtt_pki, environment=ENVIRONMENT)
    except local_mosquitto.LocalMosquittoError as error:
        pytest.fail(str(error))
    yield broker
    broker.stop()


class TopicReader:
    """The `reader` identity subscribed to every device's topic at QoS 1; collects
    (topic, payload) in arrival order."""

    def __init__(self, broker: local_mosquitto.Mosquitto, topic_filter: str = telemetry_topic(ENVIRONMENT, "+")):
        from awscrt import mqtt

        self.messages: list[tuple[str, bytes]] = []
        self._lock = threading.Lock()
        self.connection = broker.reader_connection(f"{local_mosquitto.READER}-{time.monotonic_ns()}")
        subscribed, _ = self.connection.subscribe(
            topic_filter, mqtt.QoS.AT_LEAST_ONCE, callback=self._on_message
        )
        granted = subscribed.result(10)["qos"]
        assert granted == mqtt.QoS.AT_LEAST_ONCE, f"subscription granted {granted}"

    def _on_message(self, topic, payload, **_):
        with self._lock:
            self.messages.append((topic, bytes(payload)))

    def wait_for(self, count: int, timeout: float = 10.0) -> list[tuple[str, bytes]]:
        """Until `count` messages arrived (or timeout), then a moment more for any extra copy."""
        deadline = time.monotonic() + timeout
        while len(self.messages) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        with self._lock:
            return list(self.messages)

    def close(self) -> None:
        self.connection.disconnect().result(5)


@pytest.fixture
def topic_reader(mosquitto_broker):
    reader = TopicReader(mosquitto_broker)
    yield reader
    reader.close()
