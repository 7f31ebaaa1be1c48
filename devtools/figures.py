"""What every bench does with its figures once printed: JSON for other tools, and where it went."""

from __future__ import annotations

import json
from pathlib import Path


def write_figures(results: object, report: Path) -> None:
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nfigures: {report}")
