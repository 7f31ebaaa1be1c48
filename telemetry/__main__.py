"""`python -m telemetry`: the same as `.venv/bin/telemetry`."""

import sys

from telemetry.cli import main

sys.exit(main())
