"""Telemetry messages as a device fleet sends them, rendered without per-message json.dumps.

Every message of a run has the same size. The variable fields are fixed width (numbers padded
with spaces, which JSON allows between tokens), so a message is one bytes %-format of a
pre-rendered per-device template, and a consumer reads the fields back by slicing:

  {"run_id":"R","producer_id":"HOST/p01","device_id":"HOST-d000042","seq":        17,
   "sent_ns":1763862000123456789,"readings":{...},"pad":"xxxx"}

The send time travels in the value only: the producer hands messages to librdkafka with
produce_batch, which takes no headers (confluent-kafka's Producer.produce_batch).
"""

from __future__ import annotations

import dataclasses
import random
import re

# The header the AWS IoT rule's Kafka action puts the thing name in (the topic's third level;
# stacks/constructs/kafka_topic_rule.py takes the name from here), which the sink takes as the
# device id (flink/, KafkaMessage.THING_NAME_HEADER).
RULE_THING_NAME_HEADER = "iot_thing_name"
SEQ_WIDTH = 10
SENT_NS_WIDTH = 19
DEVICE_DIGITS = 6
PROCESS_DIGITS = 2
MAX_DEVICES = 10**DEVICE_DIGITS
MAX_PROCESSES = 10**PROCESS_DIGITS - 1
READINGS_VARIANTS = (
    1024  # a power of two: the producer picks one with `i & (READINGS_VARIANTS - 1)`
)
NAME_PATTERN = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
STATUSES = ("ok", "ok", "ok", "ok", "ok", "ok", "degraded", "low_battery")


def process_producer_id(producer_id: str, process_index: int) -> str:
    return f"{producer_id}/p{process_index:0{PROCESS_DIGITS}d}"


def device_id(producer_id: str, device: int) -> str:
    return f"{producer_id}-d{device:0{DEVICE_DIGITS}d}"


def _head(run_id: str, producer_id: str, process_index: int, device_name: str) -> bytes:
    return (
        f'{{"run_id":"{run_id}","producer_id":"{process_producer_id(producer_id, process_index)}",'
        f'"device_id":"{device_name}","seq":'
    ).encode()


@dataclasses.dataclass(frozen=True)
class MessageLayout:
    """Where the fixed-width fields sit in the messages of one host's run."""

    own_prefix: bytes
    device: slice
    seq: slice
    sent_ns: slice

    @classmethod
    def for_host(cls, run_id: str, producer_id: str) -> MessageLayout:
        head = _head(run_id, producer_id, 0, device_id(producer_id, 0))
        own_prefix = head[: head.index(b"/p") + 2]
        device_end = len(head) - len(b'","seq":')
        seq_start = len(head)
        sent_start = seq_start + SEQ_WIDTH + len(b',"sent_ns":')
        return cls(
            own_prefix=own_prefix,
            device=slice(device_end - DEVICE_DIGITS, device_end),
            seq=slice(seq_start, seq_start + SEQ_WIDTH),
            sent_ns=slice(sent_start, sent_start + SENT_NS_WIDTH),
        )


def _readings_json(
    temperature: float,
    humidity: float,
    battery: float,
    latitude: float,
    longitude: float,
    status: str,
) -> bytes:
    return (
        f'{{"temperature_c":{temperature:.2f},"humidity_pct":{humidity:.1f},'
        f'"battery_pct":{battery:.0f},"location":{{"lat":{latitude:.5f},'
        f'"lon":{longitude:.5f}}},"status":"{status}"}}'
    ).encode()


# The widest readings any device can send; narrower ones get trailing spaces.
READINGS_WIDTH = len(_readings_json(-40.0, 100.0, 100.0, -90.0, -180.0, "low_battery"))


def render_readings(rng: random.Random, variants: int = READINGS_VARIANTS) -> list[bytes]:
    """Plausible readings of one device drifting over time, each READINGS_WIDTH bytes."""
    rendered = []
    temperature, humidity, battery = 21.0, 45.0, 100.0
    latitude, longitude = 47.6 + rng.uniform(-0.5, 0.5), -122.3 + rng.uniform(-0.5, 0.5)
    for _ in range(variants):
        temperature = min(max(temperature + rng.gauss(0, 0.2), -40.0), 85.0)
        humidity = min(max(humidity + rng.gauss(0, 0.5), 0.0), 100.0)
        battery = max(battery - rng.random() * 0.05, 0.0)
        latitude = min(max(latitude + rng.gauss(0, 0.0001), -90.0), 90.0)
        longitude = min(max(longitude + rng.gauss(0, 0.0001), -180.0), 180.0)
        readings = _readings_json(
            temperature, humidity, battery, latitude, longitude, rng.choice(STATUSES)
        )
        rendered.append(readings.ljust(READINGS_WIDTH))
    return rendered


def minimum_message_bytes(
    run_id: str, producer_id: str, device_names: list[str] | None = None
) -> int:
    """The smallest --message-bytes a run with these names accepts (device_names: the thing
    names of an MQTT run; by default the simulator's own fixed-width device ids)."""
    longest = max(device_names or [device_id(producer_id, 0)], key=len)
    return (
        len(_head(run_id, producer_id, 0, longest))
        + SEQ_WIDTH
        + len(b',"sent_ns":')
        + SENT_NS_WIDTH
        + len(b',"readings":')
        + READINGS_WIDTH
        + len(b',"pad":""}')
    )


class TelemetryTemplate:
    """Renders the messages of one producer process; its devices are given by global number.

    device_names (MQTT runs: the thing names of these devices, in the same order) replace the
    generated device ids; each device's padding then makes up for its name's length, so every
    message still has exactly message_bytes.
    """

    def __init__(
        self,
        *,
        run_id: str,
        producer_id: str,
        process_index: int,
        devices: list[int],
        message_bytes: int,
        seed: int = 0,
        device_names: list[str] | None = None,
    ):
        self.readings = render_readings(random.Random(seed * 1_000_003 + process_index))
        names = device_names or [device_id(producer_id, device) for device in devices]
        self.keys = [name.encode() for name in names]
        fixed = minimum_message_bytes(run_id, producer_id, names)
        if message_bytes < fixed:
            raise ValueError(
                f"--message-bytes {message_bytes} is below the {fixed} bytes a "
                f"message of this run needs"
            )
        # One %-format per message: (seq, sent_ns, readings) into the device's own template.
        # Or, where many messages share seq and sent_ns (flat out), the device's head, one
        # middle for all of them, the readings and the device's tail joined: half the cost,
        # since a %-format scans the whole template, padding included.
        self.middle_format = (
            b"%" + str(SEQ_WIDTH).encode() + b'd,"sent_ns":%' + str(SENT_NS_WIDTH).encode()
            + b'd,"readings":'
        )  # fmt: skip
        longest = max(len(name) for name in names)
        self.heads, self.tails, self.templates = [], [], []
        for name in names:
            pad = message_bytes - fixed + longest - len(name)  # a shorter name, more padding
            self.heads.append(_head(run_id, producer_id, process_index, name))
            self.tails.append(b',"pad":"' + b"x" * pad + b'"}')
            self.templates.append(self.heads[-1] + self.middle_format + b"%s" + self.tails[-1])

    def render(self, local_device: int, seq: int, sent_ns: int, variant: int) -> bytes:
        return self.templates[local_device] % (
            seq,
            sent_ns,
            self.readings[variant & (READINGS_VARIANTS - 1)],
        )
