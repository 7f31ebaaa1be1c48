"""Runtime packages for the tests of `telemetry cluster upgrade --package`: files that pass the
checks a real MicrosoftServiceFabric.<version>.cab passes ([MS-CAB] CFHEADER: "MSCF", reserved,
then the cabinet's size), filled with random bytes."""

from __future__ import annotations

import os
import struct
from pathlib import Path


def write_cab(path: Path, size: int = 300 * 1024) -> bytes:
    """A cabinet header naming `size` bytes, then random bytes up to that size; the content."""
    header = struct.pack("<4sII", b"MSCF", 0, size)
    content = header + os.urandom(size - len(header))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return content
