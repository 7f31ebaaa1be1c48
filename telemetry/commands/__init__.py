"""The commands, one module each (a group's in its folder: `telemetry cluster drain` is
commands/cluster/drain.py). Each has add_arguments(parser) and run(args, session_factory)."""
