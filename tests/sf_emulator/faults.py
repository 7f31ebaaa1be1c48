"""Faults the emulator injects into the next matching requests."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Literal

FaultKind = Literal["error", "hang", "drop", "lost_answer"]


@dataclass
class Fault:
    """`times` requests matching `method`/`path` (a regex searched in the path), after the first
    `skip` matching ones have passed untouched, get:

    - "error": HTTP `status` with a FabricError body for `code` (plain text if code is None);
    - "hang": no answer for `seconds`, then the connection is closed;
    - "drop": the connection is closed without an answer;
    - "lost_answer": the cluster carries the request out, then the connection is closed without
      its answer (the outcome the client cannot know).
    """

    kind: FaultKind
    times: int = 1
    status: int = 503
    code: str | None = None
    message: str = ""
    seconds: float = 0.0
    method: str | None = None
    path: str | None = None
    skip: int = 0

    def matches(self, method: str, path: str) -> bool:
        if self.method and self.method.upper() != method.upper():
            return False
        return not self.path or re.search(self.path, path) is not None


class FaultPlan:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []

    def add(self, fault: Fault) -> None:
        if fault.times < 1:
            raise ValueError("a fault must apply to at least one request")
        with self._lock:
            self._faults.append(fault)

    def take(self, method: str, path: str) -> Fault | None:
        """The first fault matching this request, used up by one."""
        with self._lock:
            for fault in self._faults:
                if fault.matches(method, path):
                    if fault.skip:
                        fault.skip -= 1
                        return None
                    fault.times -= 1
                    if fault.times == 0:
                        self._faults.remove(fault)
                    return fault
            return None

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    @property
    def pending(self) -> int:
        with self._lock:
            return sum(f.times for f in self._faults)
