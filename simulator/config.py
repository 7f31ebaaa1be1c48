"""The settings of one host's run, validated once so every later step can trust them."""

from __future__ import annotations

import dataclasses

# The MQTT keep-alive each device asks for (AWS IoT accepts 30 to 1200 s). The CRT waits as long
# for a CONNACK as for a PINGRESP (aws-c-mqtt source/client.c: the CONNACK timeout task is
# scheduled ping_timeout_ns after the channel is up), and refuses a ping timeout not shorter than
# the keep-alive (awscrt.mqtt.Connection), so --connect-timeout must be under this.
MQTT_KEEP_ALIVE_S = 60
# The TLS handshake's own limit, which the CRT does not let a caller set (aws-c-io
# tls_channel_handler.c, AWS_DEFAULT_TLS_TIMEOUT_MS, applied by
# aws_tls_connection_options_init_from_ctx).
CRT_TLS_HANDSHAKE_S = 10


def mqtt_timeout_ms(seconds: float) -> int:
    """--connect-timeout as the CRT takes it: whole milliseconds, never 0 (which aws-c-mqtt reads
    as its own 3 s default and aws-c-io's TCP connect as no time at all)."""
    return max(1, round(seconds * 1000))


@dataclasses.dataclass(frozen=True)
class SloThresholds:
    """The service level a run is judged against (defaults: the platform's requirement)."""

    min_rate_msgs_per_s: float = 5000.0
    max_p99_ms: float = 10.0
    max_latency_ms: float = 100.0
    max_lost: int = 0
    max_delivery_errors: int = 0


@dataclasses.dataclass(frozen=True)
class MqttSettings:
    """How the devices of an MQTT run reach the broker (AWS IoT Core, or mosquitto in tests)."""

    host: str
    port: int
    certificates: str  # folder of <thing>.cert.pem / <thing>.key.pem
    things: tuple[str, ...]  # the run's thing names: device d is things[d]
    environment: str  # the platform environment the devices belong to: telemetry/<environment>/<thing>/data
    ca: str | None  # server CA bundle; None = the system trust store (Amazon Root CA 1)
    plaintext: bool = False  # local brokers only: no TLS, no client certificate
    connect_rate: float = 100.0  # CONNECTs per second this host starts (all its processes)
    connect_attempts: int = 6  # per device, before the run gives up on it

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"


@dataclasses.dataclass(frozen=True)
class RunConfig:
    bootstrap_servers: str | None  # None only for an MQTT run that does not read back
    topic: str | None
    rate: float  # messages per second for this host; 0 = as fast as possible
    duration_s: float  # measured period, after the warmup
    warmup_s: float
    processes: int
    devices: int
    message_bytes: int
    acks: str  # "all" or "1"
    idempotence: bool
    linger_ms: float
    batch_bytes: int
    compression: str
    security_protocol: str  # "PLAINTEXT", "SASL_SSL" (MSK IAM) or "SASL_PLAINTEXT" (local)
    region: str | None
    run_id: str
    producer_id: str
    consume: bool
    progress_interval_s: float
    drain_timeout_s: float
    connect_timeout_s: float = 10.0
    sasl_username: str | None = None  # SASL_PLAINTEXT only
    slo: SloThresholds = SloThresholds()
    transport: str = "kafka"  # "kafka": produce to the topic; "mqtt": publish as IoT devices
    mqtt: MqttSettings | None = None  # with transport "mqtt"
    # This host's share of a fleet: host share[0] of share[1] (1-based) writes to and reads back
    # only the topic's partitions p with p % share[1] == share[0] - 1.
    share: tuple[int, int] = (1, 1)
    partitions: tuple[int, ...] | None = None  # the partitions of that share, once known

    def to_report(self) -> dict:
        """The settings a report records (no paths, nothing secret)."""
        settings = dataclasses.asdict(self)
        settings.pop("slo")
        if self.mqtt is not None:
            settings["mqtt"] = {
                "endpoint": self.mqtt.endpoint,
                "plaintext": self.mqtt.plaintext,
                "first_thing": self.mqtt.things[0],
                "last_thing": self.mqtt.things[-1],
            }
        return settings
