"""The operator command `telemetry` (cli.py): one command with groups for everything an operator
does to an environment after `make synth`."""
