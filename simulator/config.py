"""The settings of one host's run, validated once so every later step can trust them."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class SloThresholds:
    """The service level a run is judged against (defaults: the platform's requirement)."""

    min_rate_msgs_per_s: float = 5000.0
    max_p99_ms: float = 10.0
    max_latency_ms: float = 100.0
    max_lost: int = 0
    max_delivery_errors: int = 0


@dataclasses.dataclass(frozen=True)
class RunConfig:
    bootstrap_servers: str
    topic: str
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

    def to_report(self) -> dict:
        """The settings a report records (no paths, nothing secret)."""
        settings = dataclasses.asdict(self)
        settings.pop("slo")
        return settings
