"""Failures the operator can act on. The CLI prints each as one line and exits 2."""


class SimulatorError(Exception):
    """Bad input, an unreachable broker, a missing topic: nothing was measured."""
