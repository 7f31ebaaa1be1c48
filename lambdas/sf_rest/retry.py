"""When and how long to wait before resending a Service Fabric REST request.

A small explicit loop rather than urllib3's Retry, because the decision needs what
urllib3 cannot see: the Fabric error code in the response body (a 500 carrying
FABRIC_E_NODE_IS_UP is final, a 503 carrying FABRIC_E_NOT_READY is not), whether the
request is safe to repeat, and a bound on total elapsed time, not only on attempts.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .errors import (
    CONNECT_FAILED,
    OUTCOME_UNKNOWN,
    REJECTED_BEFORE_ACTING,
    FabricError,
    TlsError,
)


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter, bounded by attempts and by total seconds.

    `sleep`, `clock` and `random` are injectable so tests run without real waiting.
    """

    max_attempts: int = 6
    max_elapsed_seconds: float = 60.0
    base_delay_seconds: float = 0.5
    max_delay_seconds: float = 10.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)
    random: Callable[[], float] = field(default=random.random, compare=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.max_elapsed_seconds < 0 or self.base_delay_seconds < 0:
            raise ValueError("delays must not be negative")

    def backoff(self, attempt: int) -> float:
        """Delay after the given (1-based) failed attempt: uniform in [0, cap]."""
        cap = min(self.max_delay_seconds, self.base_delay_seconds * (2 ** (attempt - 1)))
        return cap * self.random()


NO_RETRY = RetryPolicy(max_attempts=1)


def should_retry(error: FabricError, *, idempotent: bool) -> bool:
    """Resend after this error?

    Idempotent requests (reads; Deactivate/Activate/RemoveNodeState, which Service
    Fabric treats as repeatable) are resent on any transient failure. A request whose
    repetition is not harmless (StartClusterConfigurationUpgrade) is resent only when
    the gateway certainly did not act on it; after an unknown outcome the caller must
    look at the upgrade status instead of starting a second upgrade.
    """
    if isinstance(error, TlsError):
        return False  # a certificate problem does not heal by waiting
    if error.code == CONNECT_FAILED or error.code in REJECTED_BEFORE_ACTING:
        return True
    if not idempotent:
        return False
    if error.code in OUTCOME_UNKNOWN:
        return True
    if error.code.startswith("FABRIC_E_") or error.code.startswith("E_"):
        return False  # a definite answer from Fabric, whatever the HTTP status
    if error.status is None:
        return True  # connection lost or read timeout
    return error.status >= 500 and error.status != 501
