"""What each environment of cdk.json gives an operator of the node lifecycle, as the timing model
computes it (stacks/lifecycle_timing.py): heartbeats, the hook's global timeout, the drain's
deadline and latest end, and the history a drain writes. Prints a Markdown table, one column
per environment; the manual's table is written by this (make docs).

  python -m devtools.lifecycle_figures
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __name__ == "__main__":  # run as `python devtools/lifecycle_figures.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stacks.config import load_environment, read_environments  # noqa: E402
from stacks.lifecycle_timing import (  # noqa: E402
    HEARTBEAT_LANDING_SECONDS,
    HISTORY_EVENT_LIMIT,
    INVOKE_RETRY,
    LAMBDA_TASK_TIMEOUT_SECONDS,
    SAFETY_MARGIN_SECONDS,
    LifecycleTiming,
)

ORDER = ("dev", "staging", "prod")  # the shipped environments first, any other after them


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h".replace(".0 h", " h")


def attempts_lost_in_a_row(timing: LifecycleTiming) -> int:
    """How many heartbeat attempts in a row may fail while the next one still lands inside the
    heartbeat timeout (with the landing time and the margin the model keeps)."""
    room = timing.heartbeat_timeout_seconds - HEARTBEAT_LANDING_SECONDS - SAFETY_MARGIN_SECONDS
    return int(room // timing.attempt_seconds) - 1


def rows(timings: dict[str, LifecycleTiming]) -> list[tuple[str, list[str]]]:
    def each(figure) -> list[str]:
        return [figure(timing) for timing in timings.values()]

    return [
        ("heartbeat timeout, and the hook's global timeout",
         each(lambda t: f"{t.heartbeat_timeout_seconds:,} s, {_hours(t.global_timeout_seconds)}")),
        ("one heartbeat attempt at most: Lambda's invoke retries, the run with its Init, the longest wait after it",
         each(lambda t: f"{INVOKE_RETRY.span_seconds:.0f} + {LAMBDA_TASK_TIMEOUT_SECONDS} + {t.longest_wait[1]:.0f} "
                        f"= {t.attempt_seconds:.0f} s")),
        ("the longest the hook must go without a heartbeat: two failed attempts, a third that lands "
         f"({HEARTBEAT_LANDING_SECONDS} s), a margin ({SAFETY_MARGIN_SECONDS} s)",
         each(lambda t: f"{t.heartbeat_gap_seconds:,.0f} s")),
        ("heartbeat attempts a drain or join can lose in a row and keep the instance",
         each(lambda t: str(attempts_lost_in_a_row(t)))),
        ("how long EventBridge retries starting an execution before it queues the event",
         each(lambda t: f"{t.event_age_seconds:,} s")),
        ("drain deadline", each(lambda t: f"{t.drain_timeout_seconds // 60} min")),
        ("latest a failed drain ABANDONs (the instance retained), after the action began",
         each(lambda t: _hours(t.drain_span_seconds))),
        (f"history events of the longest drain (of {HISTORY_EVENT_LIMIT:,})",
         each(lambda t: f"about {round(t.drain_history_events, -2):,}")),
    ]  # fmt: skip


def table(timings: dict[str, LifecycleTiming]) -> str:
    lines = ["| | " + " | ".join(timings) + " |", "| --- |" + " --- |" * len(timings)]
    lines += [f"| {label} | " + " | ".join(values) + " |" for label, values in rows(timings)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.lifecycle_figures", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="examples:\n  python -m devtools.lifecycle_figures")
    parser.parse_args(argv)
    environments = read_environments()
    names = sorted(environments, key=lambda name: (ORDER.index(name) if name in ORDER else len(ORDER), name))
    print(table({name: load_environment(environments, name).lifecycle_timing for name in names}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
