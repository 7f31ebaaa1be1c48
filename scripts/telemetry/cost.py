"""`telemetry cost`: not built yet (issue #23 prices the synthesized templates)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from scripts.telemetry.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace, session_factory: Callable[[str], Any]) -> int:
    raise UsageError("telemetry cost is not built yet; until it is, the README's 'Device rates, quotas and cost' "
                     "section prices the device path")
