import json
import random
import time

import pytest

from simulator.payload import (
    READINGS_VARIANTS,
    READINGS_WIDTH,
    MessageLayout,
    TelemetryTemplate,
    minimum_message_bytes,
    render_readings,
)

RUN_ID, PRODUCER_ID = "r0a1b2c3", "ip-10-0-1-23"


def template(message_bytes=512, process_index=1, devices=(1, 3, 5)):
    return TelemetryTemplate(
        run_id=RUN_ID,
        producer_id=PRODUCER_ID,
        process_index=process_index,
        devices=list(devices),
        message_bytes=message_bytes,
    )


@pytest.mark.parametrize("size", [minimum_message_bytes(RUN_ID, PRODUCER_ID), 300, 512, 4096])
def test_every_message_has_exactly_the_requested_size(size):
    telemetry = template(size)
    for local_device, seq, sent_ns in [
        (0, 0, 0),
        (2, 9_999_999_999, time.time_ns()),
        (1, 42, 10**18),
    ]:
        assert len(telemetry.render(local_device, seq, sent_ns, seq)) == size


def test_message_is_json_with_the_device_sequence_producer_and_readings():
    sent_ns = time.time_ns()
    message = json.loads(template().render(2, 17, sent_ns, 5))
    assert message["run_id"] == RUN_ID
    assert message["producer_id"] == "ip-10-0-1-23/p01"
    assert message["device_id"] == "ip-10-0-1-23-d000005"
    assert message["seq"] == 17
    assert message["sent_ns"] == sent_ns
    readings = message["readings"]
    assert set(readings) == {"temperature_c", "humidity_pct", "battery_pct", "location", "status"}
    assert -40 <= readings["temperature_c"] <= 85
    assert set(readings["location"]) == {"lat", "lon"}


def test_keys_are_the_device_ids_of_the_process():
    assert template().keys == [
        b"ip-10-0-1-23-d000001",
        b"ip-10-0-1-23-d000003",
        b"ip-10-0-1-23-d000005",
    ]


def test_readings_change_between_messages_of_a_device():
    telemetry = template()
    readings = {
        json.dumps(json.loads(telemetry.render(0, seq, 0, seq))["readings"]) for seq in range(50)
    }
    assert len(readings) > 10


def test_layout_reads_the_fixed_width_fields_back_by_slicing():
    layout = MessageLayout.for_host(RUN_ID, PRODUCER_ID)
    telemetry = template(process_index=3, devices=[3, 7, 11])
    sent_ns = time.time_ns()
    value = telemetry.render(2, 123_456, sent_ns, 0)
    assert value.startswith(layout.own_prefix)
    assert int(value[layout.device]) == 11
    assert int(value[layout.seq]) == 123_456
    assert int(value[layout.sent_ns]) == sent_ns


def test_another_hosts_messages_do_not_match_the_own_prefix():
    layout = MessageLayout.for_host(RUN_ID, "ip-10-0-1-2")  # a prefix of the other host's name
    other = template().render(0, 1, 0, 0)
    assert not other.startswith(layout.own_prefix)
    other_run = TelemetryTemplate(
        run_id="r9", producer_id="ip-10-0-1-2", process_index=0, devices=[0], message_bytes=512
    ).render(0, 1, 0, 0)
    assert not other_run.startswith(layout.own_prefix)


def test_a_size_below_the_minimum_is_refused_with_the_minimum():
    minimum = minimum_message_bytes(RUN_ID, PRODUCER_ID)
    with pytest.raises(ValueError, match=f"below the {minimum} bytes"):
        template(minimum - 1)


def test_all_readings_variants_are_valid_json_of_one_width():
    variants = render_readings(random.Random(7))
    assert len(variants) == READINGS_VARIANTS
    assert {len(v) for v in variants} == {READINGS_WIDTH}
    for variant in variants[:50]:
        json.loads(variant)


def test_thing_names_of_any_length_give_messages_of_exactly_message_bytes():
    names = ["a:meter_1", "plant-7_line-22_press-0003"]
    template = TelemetryTemplate(
        run_id=RUN_ID, producer_id=PRODUCER_ID, process_index=0, devices=[0, 1],
        message_bytes=512, device_names=names,
    )  # fmt: skip
    assert template.keys == [name.encode() for name in names]
    for local, name in enumerate(names):
        message = template.render(local, 3, 1763862000123456789, local)
        assert len(message) == 512
        assert json.loads(message)["device_id"] == name
    assert minimum_message_bytes(RUN_ID, PRODUCER_ID, names) > minimum_message_bytes(
        RUN_ID, PRODUCER_ID
    )


@pytest.mark.parametrize("names", [None, ["thing-a", "a-much-longer-thing-name"]])
def test_head_middle_readings_and_tail_join_to_the_same_message(names):
    """Flat out the producer joins parts instead of %-formatting the whole template."""
    rendered = TelemetryTemplate(run_id=RUN_ID, producer_id=PRODUCER_ID, process_index=0,
                                 devices=[0, 1], message_bytes=600, device_names=names)
    sent_ns = time.time_ns()
    for device in (0, 1):
        for seq, variant in ((0, 0), (7, 3), (123_456, READINGS_VARIANTS - 1)):
            joined = b"".join((rendered.heads[device], rendered.middle_format % (seq, sent_ns),
                               rendered.readings[variant], rendered.tails[device]))
            assert joined == rendered.render(device, seq, sent_ns, variant)
            assert len(joined) == 600
