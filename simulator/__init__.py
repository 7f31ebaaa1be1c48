"""Telemetry simulator: open-loop Kafka load with honest end-to-end latency and loss accounting.

`python -m simulator run ...` drives one host; `python -m simulator merge ...` merges host reports.
"""

__version__ = "1.0.0"
