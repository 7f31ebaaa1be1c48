"""Why a scale-in step stopped. The state machine catches these by class name and alarms."""

from __future__ import annotations


class ScaleInError(Exception):
    """A scale-in step cannot go on; the message says why and what to look at."""


class SeedNodeRefused(ScaleInError):
    """The node is a seed node: automation never deactivates or removes one."""


class NodeInWrongState(ScaleInError):
    """The node is not where this step needs it (e.g. RemoveNodeState on a live node)."""


class NodeReactivated(NodeInWrongState):
    """The node is Up again without a removal intent: someone activated it mid-drain."""


class AmbiguousNode(ScaleInError):
    """Several live nodes answer to the instance's IP address; we never guess which to remove."""


class FabricHostStopFailed(ScaleInError):
    """The Run Command that stops FabricHostSvc ended without success."""


class ConfigurationUpgradeFailed(ScaleInError):
    """The cluster configuration upgrade failed or is rolling back."""


class WaitTimedOut(ScaleInError):
    """A wait ran out of time (operator script); carries the last poll result."""

    def __init__(self, message: str, last: object = None) -> None:
        super().__init__(message)
        self.last = last
