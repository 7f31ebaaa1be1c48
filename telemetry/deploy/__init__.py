"""`telemetry deploy`: the first deployment, step by step and resumable. It stands above the
commands its steps run (command.py: the command; steps.py: the steps and how a rerun resumes)."""
