"""`python -m scripts.telemetry`: the same as `.venv/bin/telemetry`."""

import sys

from scripts.telemetry.cli import main

sys.exit(main())
