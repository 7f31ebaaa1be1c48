"""When each device of an MQTT run may send CONNECT: at a pace, with backoff, a bounded number of
times. Pure bookkeeping on a clock the caller passes in, so it is tested without a broker.

What AWS IoT Core admits (AWS General Reference, "AWS IoT Core endpoints and quotas"): 500
CONNECT requests per second per account by default (adjustable), and 1 per second per client
id; a device over either is throttled. So:
- connects start at most `rate` per second (a token bucket that keeps no burst credit beyond one
  connect, so an idle moment does not turn into a burst);
- a refused, throttled or timed-out connect is retried after exponential backoff with full
  jitter (a uniform delay between 0 and min(cap, base * 2^(attempt-1)), as in the AWS
  Architecture Blog's "Exponential Backoff And Jitter"), never sooner than 1 s after the same
  client id's last CONNECT;
- retries share the same pace as first attempts, ahead of them;
- after `attempts` failures of one device the run gives up, naming the device and the last reason;
- at most `window` CONNECTs wait for their answer at once. The window starts at one second of the
  pace and grows by one with every CONNACK, back to that; a failed CONNECT halves it, once for all
  the CONNECTs that were waiting then (as TCP's congestion window is cut once per window of data
  lost, not once per lost segment). A broker or a host that falls behind gets fewer CONNECTs, not
  a queue of them: at a fixed pace, CONNECTs kept starting while earlier ones waited, their
  CONNACKs came after the client stopped waiting, and each retry found the broker still busy with
  the last ("already connected, closing old connection") until it answered none in time.
"""

from __future__ import annotations

import collections
import heapq
import math
import random
from dataclasses import dataclass, field

PER_CLIENT_ID_INTERVAL_S = 1.0  # AWS IoT Core: 1 CONNECT per second per client id
BACKOFF_BASE_S = 1.0
BACKOFF_CAP_S = 30.0


class ConnectsExhausted(Exception):
    def __init__(self, device: int, attempts: int, reason: str):
        super().__init__(f"gave up after {attempts} attempts: {reason}")
        self.device, self.attempts, self.reason = device, attempts, reason


@dataclass
class ConnectStats:
    """What the report's `connections` object is made of, for one process."""

    attempts: list[float] = field(default_factory=list)  # when each CONNECT started (monotonic s)
    connacks: list[float] = field(default_factory=list)  # when each device first connected
    failures: int = 0  # CONNECTs refused, throttled or timed out (and retried)
    reconnects: int = 0  # connections reopened after being lost mid-run
    interruptions: int = 0  # connections lost mid-run


class ConnectPacer:
    def __init__(self, devices: int, *, rate: float, attempts: int, now: float, rng: random.Random | None = None):
        if rate <= 0:
            raise ValueError("the connect rate must be positive")
        self.rate, self.max_attempts = rate, attempts
        self.interval = 1.0 / rate
        self.first = collections.deque(range(devices))
        self.retries: list[tuple[float, int]] = []  # heap of (not before, device)
        self.attempts = [0] * devices
        self.last_attempt = [float("-inf")] * devices
        self._origin, self._slots = now, 0  # slot k starts at origin + k / rate (no float drift)
        self.rng = rng or random.Random()
        self.window_max = max(1, math.ceil(rate))  # one second of the pace
        self.window = float(self.window_max)
        self.in_flight = 0  # CONNECTs started and not yet answered (connected or failed)
        self._started = 0  # CONNECTs started so far: each one's number
        self._number = [0] * devices  # the number of each device's latest CONNECT
        self._waiting_at_cut = 0  # CONNECTs up to this number were waiting when the window last halved

    @property
    def next_slot(self) -> float:
        return self._origin + self._slots * self.interval

    def due(self, now: float) -> list[int]:
        """Devices whose CONNECT starts now, within the pace and the window; retries first."""
        if self.next_slot < now - self.interval:
            self._origin, self._slots = now - self.interval, 0  # no credit for idle time beyond one connect
        starting = []
        while self.next_slot <= now and self.in_flight < int(self.window):
            if self.retries and self.retries[0][0] <= now:
                device = heapq.heappop(self.retries)[1]
            elif self.first:
                device = self.first.popleft()
            else:
                break
            self.attempts[device] += 1
            self.last_attempt[device] = now
            self._slots += 1
            self.in_flight += 1
            self._started += 1
            self._number[device] = self._started
            starting.append(device)
        return starting

    def connected(self, device: int) -> None:
        """The device's CONNECT was answered with a CONNACK: one more may wait at once."""
        self.in_flight -= 1
        self.window = min(self.window_max, self.window + 1)

    def failed(self, device: int, now: float, reason: str) -> float:
        """Schedules the device's next CONNECT; returns the delay. Raises ConnectsExhausted when
        it has had all its attempts. Half as many CONNECTs may wait at once, unless the window
        already halved while this one waited."""
        self.in_flight -= 1
        if self._number[device] > self._waiting_at_cut:
            self.window = max(1.0, self.window / 2)
            self._waiting_at_cut = self._started
        tried = self.attempts[device]
        if tried >= self.max_attempts:
            raise ConnectsExhausted(device, tried, reason)
        delay = self.rng.uniform(0, min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (tried - 1)))
        not_before = max(now + delay, self.last_attempt[device] + PER_CLIENT_ID_INTERVAL_S)
        heapq.heappush(self.retries, (not_before, device))
        return not_before - now


def summary(stats: ConnectStats, devices: int, rss_growth_bytes: float, connect_cpu_s: float = 0.0) -> dict:
    """One process's connections as the host run merges them (wall-clock seconds, so processes
    and hosts merge: every clock of a fleet runs on NTP)."""
    per_second: dict[str, int] = {}
    for started in stats.attempts:
        key = str(int(started))
        per_second[key] = per_second.get(key, 0) + 1
    return {
        "devices": devices,
        "connected": len(stats.connacks),
        "first_connack": min(stats.connacks, default=None),
        "last_connack": max(stats.connacks, default=None),
        "connects_per_second": per_second,
        "connect_failures": stats.failures,
        "reconnects": stats.reconnects,
        "interruptions": stats.interruptions,
        "rss_growth_bytes": rss_growth_bytes,
        "connect_cpu_s": round(connect_cpu_s, 3),
    }


def merge(parts: list[dict]) -> dict | None:
    """The report's `connections` object from process or host summaries (None for Kafka runs).

    connect_s runs from the first CONNACK to the last; connects_per_s_max is the most CONNECTs
    started within one wall-clock second, over every part together; rss_bytes_per_connection is
    how much the processes' resident memory grew while connecting, per connection made."""
    parts = [part for part in parts if part]
    if not parts:
        return None
    per_second: dict[str, int] = {}
    for part in parts:
        for second, count in part["connects_per_second"].items():
            per_second[second] = per_second.get(second, 0) + count
    firsts = [p["first_connack"] for p in parts if p["first_connack"] is not None]
    lasts = [p["last_connack"] for p in parts if p["last_connack"] is not None]
    connected = sum(p["connected"] for p in parts)
    growth = sum(p["rss_growth_bytes"] for p in parts)
    return {
        "devices": sum(p["devices"] for p in parts),
        "connected": connected,
        "connect_s": round(max(lasts) - min(firsts), 3) if firsts else None,
        "connects_per_s_max": max(per_second.values(), default=0),
        "reconnects": sum(p["reconnects"] for p in parts),
        "interruptions": sum(p["interruptions"] for p in parts),
        "connect_failures": sum(p["connect_failures"] for p in parts),
        "rss_bytes_per_connection": round(growth / connected) if connected else None,
        # Kept so that host reports merge into a fleet's: the busiest second is the fleet's.
        "connects_per_second": dict(sorted(per_second.items())),
        "first_connack": min(firsts) if firsts else None,
        "last_connack": max(lasts) if lasts else None,
        "rss_growth_bytes": growth,
        "connect_cpu_s": round(sum(p.get("connect_cpu_s", 0.0) for p in parts), 3),  # CPU the connect phase took
    }
