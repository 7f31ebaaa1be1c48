"""Node lifecycle logic: idempotent scale-in steps, the membership lock, the zombie reaper.

Scale-in, one state machine state (one thin Lambda) per step, in the order Microsoft
documents for standalone clusters:

    resolve_node -> refuse_seed_node -> deactivate_node -> poll_deactivation*
    -> start_configuration_removal (the machine still runs) -> poll_configuration_upgrade*
    -> check_node_removed -> complete_lifecycle_action
    clean-up, only for a node the upgrade left listed:
    -> stop_fabric_host -> poll_node_down* -> remove_node_state

(* wait steps: one poll per call, `done` says when to move on.) The AWS adapters live
in their own modules and need botocore: lifecycle_hooks.AutoScalingLifecycleHooks,
instances.Ec2InstanceDirectory, fabric_host.SsmFabricHost,
membership_lock.DynamoDbMembershipLock.
"""

from .membership_config import (
    check_node_removed,
    poll_configuration_upgrade,
    poll_running_upgrade,
    start_configuration_registration,
    start_configuration_removal,
)
from .errors import (
    AmbiguousNode,
    ConfigurationUpgradeFailed,
    FabricHostStopFailed,
    NodeInWrongState,
    NodeReactivated,
    LifecycleError,
    SeedNodeRefused,
    WaitTimedOut,
)
from .interfaces import (
    NODE_NAME_TAG,
    AutoScalingLifecycle,
    CommandStatus,
    FabricHost,
    InstanceDirectory,
    InstanceInfo,
    LifecycleHook,
    LockGrant,
    LockRelease,
    MembershipLock,
)
from .lifecycle import ABANDON, CONTINUE, complete_lifecycle_action, record_heartbeat
from .node_stage import NodeStage, node_stage
from .polling import wait_until_done
from .reaper import ReaperDecision, decide_reaping, instance_states_by_node
from .results import (
    ConfigurationChange,
    NodeRemovalCheck,
    Deactivation,
    HostStop,
    LifecycleCompletion,
    NodeResolution,
    NodeStateRemoval,
    Outcome,
    SeedCheck,
    WaitStatus,
)
from .scale_in import (
    deactivate_node,
    poll_deactivation,
    poll_node_down,
    refuse_seed_node,
    remove_node_state,
    resolve_node,
    stop_fabric_host,
)

__all__ = [
    "ABANDON",
    "CONTINUE",
    "NODE_NAME_TAG",
    "AmbiguousNode",
    "AutoScalingLifecycle",
    "CommandStatus",
    "ConfigurationChange",
    "ConfigurationUpgradeFailed",
    "Deactivation",
    "FabricHost",
    "FabricHostStopFailed",
    "HostStop",
    "InstanceDirectory",
    "InstanceInfo",
    "LifecycleCompletion",
    "LifecycleHook",
    "LockGrant",
    "LockRelease",
    "MembershipLock",
    "NodeInWrongState",
    "NodeReactivated",
    "NodeRemovalCheck",
    "NodeResolution",
    "NodeStage",
    "NodeStateRemoval",
    "Outcome",
    "ReaperDecision",
    "LifecycleError",
    "SeedCheck",
    "SeedNodeRefused",
    "WaitStatus",
    "WaitTimedOut",
    "check_node_removed",
    "complete_lifecycle_action",
    "deactivate_node",
    "decide_reaping",
    "instance_states_by_node",
    "node_stage",
    "poll_configuration_upgrade",
    "poll_running_upgrade",
    "poll_deactivation",
    "poll_node_down",
    "record_heartbeat",
    "refuse_seed_node",
    "remove_node_state",
    "resolve_node",
    "start_configuration_registration",
    "start_configuration_removal",
    "stop_fabric_host",
    "wait_until_done",
]
