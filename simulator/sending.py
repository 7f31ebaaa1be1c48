"""What both transports' producer processes share: the send loop's tick, the progress they report
to the host run, and the result each sends back. Kept apart from either transport so that
neither imports the other (simulator/producer.py is Kafka, simulator/mqtt_producer.py MQTT).
"""

from __future__ import annotations

import dataclasses

from simulator import histograms
from simulator.accounting import DeliveryOutcome
from simulator.schedule import NS_PER_S

PROGRESS_EVERY_NS = NS_PER_S
FLUSH_EVERY_NS = NS_PER_S // 10
# The loop wakes when the next message is due, but at most once per SEND_TICK_NS: a wake-up costs
# 15-25 us of CPU on a virtual machine, so at 5,000 msg/s and above it sends what is due every
# 200 us. What that adds is measured: the publish delay runs from each message's intended time.
SEND_TICK_NS = 200_000
@dataclasses.dataclass(frozen=True)
class ProducerResult:
    process_index: int
    producer_id: str
    outcome: DeliveryOutcome
    measured_acked: int  # acked messages of the measured period
    period_end_ns: int  # when this process finished its measured sends
    ack_histogram: str | None  # encoded, microseconds: produce call to delivery report; None
    # with --rate 0, where only failures are reported (see ProducerProcess.acked)
    publish_delay_histogram: str | None  # encoded, microseconds; None with --rate 0
    ack_clamped: int
    cpu_s: float  # CPU time of the process (Python and librdkafka threads)
    connections: dict | None = None  # MQTT: simulator/connecting.py summary(); None over Kafka


class Progress:
    """Records pending ack latencies every FLUSH_EVERY_NS (small batches: no long stall) and
    sends a progress tuple to the parent every PROGRESS_EVERY_NS. acked() counts the acks so
    far (by default those the recorder observed)."""

    def __init__(self, conn, acks: histograms.LatencyRecorder, failures: list, acked=None):
        self.conn, self.acks, self.failures = conn, acks, failures
        self.acked = acked or (lambda: acks.observed)
        self.next_flush_ns = self.next_progress_ns = 0
        self.lag_max_ns = 0

    def maybe_send(self, now_ns: int, sent: int, lag_ns: int) -> bool:
        """True when it flushed the recorders (the caller flushes its own alongside)."""
        self.lag_max_ns = max(self.lag_max_ns, lag_ns)
        if now_ns < self.next_flush_ns:
            return False
        self.acks.flush()
        self.next_flush_ns = now_ns + FLUSH_EVERY_NS
        if now_ns >= self.next_progress_ns:
            self.conn.send(
                ("progress", (sent, self.acked(), len(self.failures), self.lag_max_ns))
            )
            self.lag_max_ns = 0
            self.next_progress_ns = now_ns + PROGRESS_EVERY_NS
        return True
