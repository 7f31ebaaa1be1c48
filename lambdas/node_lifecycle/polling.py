"""Looping a wait step until it is done: what the state machine does with a Wait state,
for callers that run the steps themselves (the operator script, tests)."""

from __future__ import annotations

import time
from collections.abc import Callable

from .errors import WaitTimedOut
from .results import WaitStatus


def wait_until_done(
    poll: Callable[[], WaitStatus],
    *,
    what: str,
    timeout_seconds: float,
    interval_seconds: float,
    on_poll: Callable[[WaitStatus, float], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> WaitStatus:
    """Call `poll` every `interval_seconds` until it reports done; return that result.

    `on_poll(result, elapsed_seconds)` sees every result (for progress output). Raises
    WaitTimedOut, naming `what` and the last status, once `timeout_seconds` have passed;
    exceptions from `poll` (a failed upgrade, a reactivated node) end the wait at once.
    """
    if interval_seconds <= 0:
        raise ValueError("interval_seconds must be positive")
    started = clock()
    while True:
        result = poll()
        elapsed = clock() - started
        if on_poll is not None:
            on_poll(result, elapsed)
        if result.done:
            return result
        if elapsed + interval_seconds > timeout_seconds:
            raise WaitTimedOut(
                f"timed out after {elapsed:.0f} s waiting for {what} "
                f"(last: {result.detail or result.status})",
                last=result,
            )
        sleep(interval_seconds)
