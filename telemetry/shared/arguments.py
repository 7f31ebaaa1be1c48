"""argparse types the commands share."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def _plain(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,}"


def bounded_number(kind: Callable[[str], float], what: str, low: float, high: float | None = None):
    """An argparse type: `kind` of the text, from `low` (to `high`); anything else is refused naming
    what was wanted (`'x' is not a number of seconds`) or the bounds (`must be 1 or more, got 0`)."""

    def parse(value: str) -> float:
        try:
            number = kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not {what}") from None
        if number < low or (high is not None and number > high):
            bound = f"from {_plain(low)} to {_plain(high)}" if high is not None else f"{_plain(low)} or more"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return number

    return parse
