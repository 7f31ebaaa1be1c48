"""Why a lifecycle step stopped. The state machines catch these and alarm."""

from __future__ import annotations


class LifecycleError(Exception):
    """A scale-in or scale-out step cannot go on; the message says why and what to look at."""


class SeedNodeRefused(LifecycleError):
    """The node is a seed node: automation never deactivates or removes one."""


class NodeInWrongState(LifecycleError):
    """The node is not where this step needs it (e.g. RemoveNodeState on a live node)."""


class NodeReactivated(NodeInWrongState):
    """The node is Up again without a removal intent: someone activated it mid-drain."""


class AmbiguousNode(LifecycleError):
    """Several live nodes answer to the instance's IP address; we never guess which to remove."""


class FabricHostStopFailed(LifecycleError):
    """The Run Command that stops FabricHostSvc ended without success."""


class ConfigurationUpgradeFailed(LifecycleError):
    """The cluster configuration upgrade failed or is rolling back."""


class WaitTimedOut(LifecycleError):
    """A wait ran out of time (operator script); carries the last poll result."""

    def __init__(self, message: str, last: object = None) -> None:
        super().__init__(message)
        self.last = last


class InstanceNotJoinable(LifecycleError):
    """The launching instance cannot become a node (gone, stopped, or no seed to join through)."""


class NodeJoinFailed(LifecycleError):
    """AddNode.ps1 ended without success, or the node it added is not Up."""


class ActionNoLongerPending(LifecycleError):
    """A held instance's lifecycle action is gone: completed by someone, or timed out. Its
    instance terminates; the hold cannot go on."""


class ClusterNotHealthy(LifecycleError):
    """Cluster health is not Ok: no node is taken out of service (the Patch Orchestration
    Application's rule), or it did not come back to Ok after a node was patched."""


class ClusterUpgradeInProgress(LifecycleError):
    """A cluster code upgrade (telemetry cluster upgrade) is under way: it restarts nodes domain by
    domain itself, so patching takes none out of service beside it."""


class DeactivationRefused(LifecycleError):
    """The Failover Manager holds the deactivation in a safety check that says no (a seed whose
    restart would put seed quorum at risk)."""


class PatchInstallFailed(LifecycleError):
    """AWS-RunPatchBaseline ended Failed, Cancelled or TimedOut, or left patches failed."""


class NodeDidNotReturn(LifecycleError):
    """A node did not come back Up after its machine rebooted, within the node's time."""
