"""Open-loop send schedule: every message has an intended send time fixed before the run starts.

The host's messages are numbered j = 0, 1, 2, ... and message j is intended at
start + j / rate. Process k of n sends j = k, k + n, k + 2n, ...; its i-th message is j = i*n + k.
Latency is measured from the intended time, so a producer that falls behind cannot hide the
delay from the histograms (no coordinated omission).
"""

from __future__ import annotations

import dataclasses
import math

NS_PER_S = 1_000_000_000


@dataclasses.dataclass(frozen=True)
class SendSchedule:
    rate: float  # messages per second for the whole host
    processes: int
    process_index: int
    start_ns: int
    warmup_s: float
    duration_s: float

    @property
    def ns_per_message(self) -> float:
        return NS_PER_S / self.rate

    @property
    def host_messages(self) -> int:
        return round(self.rate * (self.warmup_s + self.duration_s))

    @property
    def host_warmup_messages(self) -> int:
        return round(self.rate * self.warmup_s)

    @property
    def messages(self) -> int:
        """How many messages this process sends."""
        return max(0, -(-(self.host_messages - self.process_index) // self.processes))

    @property
    def first_measured(self) -> int:
        """Index of this process's first message past the warmup."""
        return max(0, -(-(self.host_warmup_messages - self.process_index) // self.processes))

    @property
    def measure_start_ns(self) -> int:
        return self.start_ns + round(self.warmup_s * NS_PER_S)

    @property
    def measure_end_ns(self) -> int:
        return self.measure_start_ns + round(self.duration_s * NS_PER_S)

    def intended_ns(self, i: int) -> int:
        return self.start_ns + int((i * self.processes + self.process_index) * self.ns_per_message)

    def due(self, now_ns: int) -> int:
        """How many of this process's messages are due by now_ns (never more than it sends)."""
        if now_ns < self.start_ns:
            return 0
        host_due = math.floor((now_ns - self.start_ns) / self.ns_per_message) + 1
        process_due = -(-(host_due - self.process_index) // self.processes)
        return min(max(process_due, 0), self.messages)
