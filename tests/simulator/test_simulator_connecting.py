"""simulator/connecting.py: the pace, the backoff and the report's `connections`, on a clock the
test moves (no broker; the runs against mosquitto are in test_simulator_populations.py)."""

from __future__ import annotations

import random

import pytest

from simulator.connecting import (
    BACKOFF_CAP_S,
    ConnectPacer,
    ConnectsExhausted,
    ConnectStats,
    merge,
    summary,
)


def starts(pacer: ConnectPacer, until: float, since: float = 0.0, *, answered: bool = True) -> list[tuple[float, int]]:
    """(time, device) of every CONNECT the pacer starts while the clock moves from `since` to
    `until` in whole milliseconds; each answered with a CONNACK at once unless not `answered`."""
    started = []
    for ms in range(round(since * 1000), round(until * 1000) + 1):
        now = ms / 1000
        due = pacer.due(now)
        started += [(now, device) for device in due]
        for device in due if answered else ():
            pacer.connected(device)
    return started


def most_in_a_second(times: list[float]) -> int:
    return max(sum(1 for other in times if start <= other < start + 1.0) for start in times)


def test_connects_start_at_the_rate_never_in_a_burst():
    pacer = ConnectPacer(1000, rate=100, attempts=3, now=0.0)
    started = starts(pacer, 2.0)
    assert len(started) == 201  # t = 0, 0.01, ..., 2.0
    assert most_in_a_second([t for t, _ in started]) <= 101
    assert [d for _, d in started] == list(range(201))  # in device order


def test_an_idle_moment_buys_no_burst():
    pacer = ConnectPacer(10, rate=10, attempts=3, now=0.0)
    assert pacer.due(0.0) == [0]
    assert pacer.due(5.0) == [1, 2]  # one slot of credit, not fifty
    assert pacer.due(5.05) == []


def test_no_more_connects_wait_at_once_than_one_second_of_the_pace():
    pacer = ConnectPacer(1000, rate=50, attempts=3, now=0.0)
    waiting = starts(pacer, 3.0, answered=False)
    assert len(waiting) == 50 and pacer.in_flight == 50  # the broker answers none: the pace stops
    for _, device in waiting[:10]:
        pacer.connected(device)
    assert len(pacer.due(3.02)) == 2  # the pace goes on (one slot of credit), within the window
    assert len(starts(pacer, 5.0, since=3.03, answered=False)) == 8


def test_a_failed_connect_halves_the_window_once_for_those_waiting_with_it_and_connacks_widen_it():
    pacer = ConnectPacer(1000, rate=64, attempts=6, now=0.0, rng=random.Random(3))
    first = starts(pacer, 1.0, answered=False)
    assert pacer.window == 64 and len(first) == 64
    for _, device in first[:5]:  # five CONNACKs past the client's wait: a broker behind
        pacer.failed(device, 1.0, "AWS_ERROR_MQTT_TIMEOUT")
    assert pacer.window == 32 and pacer.in_flight == 59  # one cut for the CONNECTs that waited together
    assert starts(pacer, 2.0, since=1.001, answered=False) == []  # 59 still wait: nothing more starts
    for _, device in first[5:35]:
        pacer.connected(device)
    assert pacer.window == 62 and pacer.in_flight == 29  # one wider for each CONNACK
    later = starts(pacer, 2.5, since=2.001, answered=False)  # retries first, then new devices
    assert len(later) == 33 and pacer.in_flight == 62
    pacer.failed(later[0][1], 2.5, "AWS_ERROR_MQTT_TIMEOUT")  # one that started after the cut
    assert pacer.window == 31
    pacer.failed(first[35][1], 2.5, "AWS_ERROR_MQTT_TIMEOUT")  # waiting at that cut: no second one
    assert pacer.window == 31
    for _, device in first[36:] + later[1:]:
        pacer.connected(device)
    assert pacer.window == 64 and pacer.in_flight == 0  # never beyond one second of the pace
    assert most_in_a_second([t for t, _ in starts(pacer, 5.0, since=2.501)]) <= 65


def test_a_failed_device_waits_with_full_jitter_and_at_least_a_second():
    rng = random.Random(7)
    pacer = ConnectPacer(3, rate=1000, attempts=6, now=0.0, rng=rng)
    assert pacer.due(0.0) == [0]
    delays = []
    now = 0.0
    for attempt in range(1, 6):
        delay = pacer.failed(0, now, "AWS_IO_SOCKET_TIMEOUT")
        cap = min(BACKOFF_CAP_S, 2 ** (attempt - 1))
        assert 1.0 - 1e-9 <= delay <= max(1.0, cap) + 1e-9  # jittered under the cap, never under 1 s
        delays.append(delay)
        now += delay
        due = pacer.due(now)
        assert 0 in due  # retries go first
    with pytest.raises(ConnectsExhausted, match="gave up after 6 attempts: AWS_IO_SOCKET_TIMEOUT"):
        pacer.failed(0, now, "AWS_IO_SOCKET_TIMEOUT")
    assert len(set(delays)) > 1  # jitter: not one fixed schedule


def test_retries_share_the_pace_with_first_attempts():
    pacer = ConnectPacer(100, rate=10, attempts=5, now=0.0, rng=random.Random(1))
    started = starts(pacer, 0.35, answered=False)
    assert [d for _, d in started] == [0, 1, 2, 3]
    pacer.failed(0, 0.35, "refused")
    for device in (1, 2, 3):
        pacer.connected(device)
    later = starts(pacer, 10.0, since=0.351)
    assert most_in_a_second([t for t, _ in later]) <= 11  # still 10 a second with the retry
    assert 0 in [d for _, d in later]


def test_connections_merge_into_the_reports_object():
    one = ConnectStats(attempts=[100.1, 100.5, 100.9, 101.2], connacks=[100.2, 100.6, 101.0, 101.3], failures=1)
    two = ConnectStats(attempts=[100.3, 101.4], connacks=[100.4, 101.9], reconnects=2, interruptions=2)
    merged = merge([summary(one, 3, 3 * 70_000), summary(two, 2, 2 * 70_000), None])
    assert merged["devices"] == 5 and merged["connected"] == 6 - 0  # connacks counted per CONNACK
    assert merged["connect_s"] == pytest.approx(1.7)
    assert merged["connects_per_s_max"] == 4  # second 100 holds four starts over both processes
    assert merged["connect_failures"] == 1 and merged["reconnects"] == 2 and merged["interruptions"] == 2
    assert merged["rss_bytes_per_connection"] == 58_333
    assert merge([merged]) == merged  # a host's object merges into a fleet's unchanged
    assert merge([None]) is None
