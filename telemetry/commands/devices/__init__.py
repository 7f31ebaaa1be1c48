"""`telemetry devices ...`: the AWS IoT devices' commands (provision.py serves provision, delete and
export)."""
