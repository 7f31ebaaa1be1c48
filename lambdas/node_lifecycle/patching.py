"""The states of the patch state machine: Windows updates on every node in place, seeds included,
one node at a time, as the Patch Orchestration Application (microsoft/Service-Fabric-POA) does:

    begin -> next_node -> poll_idle* -> scan* -> (nothing to install: node_done) -> acquire_lock
    -> check_health -> deactivate (intent Restart) -> poll_disabled* -> install (reboots if needed)
    -> poll_install* -> poll_back_up* -> activate -> poll_health* -> node_done -> next_node ...
    -> finish; any failure -> stop (the node left in its safest state, the alarm worded)

Patching only ends a deactivation it made itself (the progress record says so: patch_progress.py).
A node another operation deactivated (a failed scale-in drain held for the operator with intent
RemoveNode, `telemetry cluster drain`, an operator's Pause) is passed over with the reason, by
next_node or, when it happened after the node was picked, by deactivate -> skip_node; finish lists
the skipped nodes and NodesSkipped counts them.

(* wait steps: one look per call, `done` says when to move on; the state machine waits.)

Seeds go first and every node strictly alone: the loop is sequential, a node is only taken out
of service while cluster health is Ok, and a seed only while every other seed is Up and active
(`_check_seed_quorum`). The Failover Manager's own seed check (EnsureSeedNodeQuorum) holds a
seed's deactivation until every other seed has been up for its seed wait, 180 s by default, and
then lets it through by itself: the run waits for that, up to SEED_QUORUM_WAIT_SECONDS, and only
a seed held longer stops it. The membership lock is held from the deactivation until the node is active and health is
Ok again, so no join, drain or other upgrade overlaps a node's restart; between nodes it is free,
so scaling is never held up for a whole run. Progress lives in patch_progress.py: a rerun skips
the nodes its round finished and starts again at the one that stopped it.

No second Windows Update session ever starts beside one still running: before the scan a node
waits (poll_idle) until no AWS-RunPatchBaseline command is Pending, InProgress, Delayed or
Cancelling on its instance (an earlier, stopped run's Install goes on, and may reboot the machine,
until it ends), and no node is activated while one is.

Each step is idempotent: scanning again, a deactivation already in force, an install with nothing
missing and an activation of an active node change nothing.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from sf_rest import DeactivationIntent, NodeInfo, NodeStatus

from .errors import (
    ClusterNotHealthy,
    ClusterUpgradeInProgress,
    DeactivationRefused,
    LifecycleError,
    NodeDidNotReturn,
    PatchInstallFailed,
    WaitTimedOut,
)
from .interfaces import NODE_NAME_TAG
from .patch_baseline import INSTALL, SCAN, PatchState
from .runtime import Runtime
from .workflow import SUBJECT_LIMIT, State, Step, count_undelivered_alarm

PATCH = "patch"
CLUSTER_TAG = "sf:cluster"  # stacks/naming.py, as the seeds and the scaling group are tagged
SEED_QUORUM_CHECK = "EnsureSeedNodeQuorum"  # SafetyCheckKind (REST reference, sfclient-model-safetycheck)
# The FM holds a seed's deactivation in EnsureSeedNodeQuorum until every other seed has been up for
# seedNodeWaitInterval = (LeaseDuration + ArbitrationTimeout) x SeedNodeWaitSafetyFactor
# = (30 s + 30 s) x 3 = 180 s with the defaults (microsoft/service-fabric:
# Reliability/Failover/fm/DeactivateNodesContext.cpp CheckSeedNodes; Federation/FederationConfig.h;
# Reliability/Failover/common/FailoverConfig.h), then lets it through. Held twice that long, it refuses.
SEED_QUORUM_WAIT_SECONDS = 2 * (30 + 30) * 3
# GetUpgradeProgress UpgradeState values with no code upgrade under way (REST reference,
# sfclient-model-upgradestate); any other (in progress, pending, Failed) keeps nodes in service.
UPGRADE_AT_REST = ("RollingForwardCompleted", "RollingBackCompleted", "Invalid")
# A scan's patch state older than its command by more than this is an earlier operation's.
STATE_CLOCK_SKEW_SECONDS = 300
# NodeInfo fields that change when the node's host restarts (REST reference, sfclient-model-nodeinfo;
# InstanceId is new each time the host starts: microsoft/service-fabric Federation/SiteNode.cpp
# RetrieveInstanceID; NodeUpAt is set by the FM's NodeCache::NodeUp).
INSTANCE_FIELDS = {"instance_id": "InstanceId", "node_up_at": "NodeUpAt"}
# Progress stages (patch_progress.py) from which the node is deactivated by patching: recorded
# before the Deactivate call, so a stopped run's record may name a node it never deactivated; the
# intent tells (a deactivation intent can be raised, never lowered: Deactivate Node, REST
# reference; Reliability/Failover/fm/NodeDeactivationInfo.cpp).
DEACTIVATED_STAGES = ("deactivate", "install", "activate")


# -- the run -------------------------------------------------------------------------------


def begin(runtime: Runtime, state: State) -> dict[str, Any]:
    """Claim the progress lease and plan the run: every node the cluster lists, seeds first,
    each group by name; the ones this round already finished are left out. `node` in the
    execution's input patches that one node alone."""
    event, execution = state.get("event") or {}, str(state.get("execution") or "")
    only = str(event.get("node") or "") if isinstance(event, Mapping) else ""
    owner = f"{PATCH}:{execution}"
    progress = _progress(runtime).claim(owner, lease_seconds=_lease_seconds(runtime))
    try:
        nodes = runtime.client.get_node_info_list()
        listed = [n for n in nodes if n.status not in (NodeStatus.REMOVED, NodeStatus.UNKNOWN, NodeStatus.INVALID)]
        order = [n.name for n in sorted(listed, key=lambda n: (not n.is_seed_node, n.name))]
        if only and only not in order:
            raise LifecycleError(f"node {only} is not in the cluster (nodes: {', '.join(order)})")
    except Exception:
        # Nothing started: the lease goes (a retry of this step claims it again), with the
        # last run's word on where the round stopped kept for the next.
        _progress(runtime).release(owner, stopped=progress.stopped)
        raise
    remaining = [only] if only else [name for name in order if name not in progress.done]
    runtime.record_metric("PatchRunsStarted", 1, "Count")
    # A stopped run of this round may have left its node deactivated for the restart: this run
    # owns that deactivation (up_to_date or activate ends it). Read now, before next_node moves
    # the record on.
    left_deactivated = progress.current if progress.stage in DEACTIVATED_STAGES and progress.current not in progress.done else ""
    return {
        "owner": owner,
        # One patch baseline snapshot for every Scan and Install of the run (patch_baseline.py).
        "snapshot_id": str(uuid.uuid4()),
        "left_deactivated": left_deactivated,
        "started_at": runtime.clock(),
        "only": only,
        "order": order,
        "remaining": remaining,
        "resumed_after": list(progress.done) if not only else [],
        "stopped_before": progress.stopped,
    }


def next_node(runtime: Runtime, state: State) -> dict[str, Any]:
    """The next node to patch ('' when none is left), its instance, and the clock it runs on."""
    run, current = state["run"], state.get("current") or {}
    remaining = list(current.get("remaining", run["remaining"]))
    skipped = list(current.get("skipped") or [])
    while remaining:
        name, remaining = remaining[0], remaining[1:]
        node = runtime.client.get_node_info(name)
        if node is None or node.status == NodeStatus.REMOVED:
            # Drained by a scale-in since the run began: nothing to patch.
            _progress(runtime).record(run["owner"], current=name, stage="gone", lease_seconds=_lease_seconds(runtime), done=name)
            continue
        other = _deactivated_by_other(runtime, run, node)
        if other:
            skipped.append(_skip(runtime, run, name, other))
            continue
        instance_id = _instance_of(runtime, name)
        _progress(runtime).record(run["owner"], current=name, stage="scan", lease_seconds=_lease_seconds(runtime))
        return {"node_name": name, "is_seed": node.is_seed_node, "instance_id": instance_id,
                "remaining": remaining, "skipped": skipped, "node_started_at": runtime.clock()}  # fmt: skip
    return {"node_name": "", "remaining": [], "skipped": skipped}


def _ours(runtime: Runtime, run: Mapping[str, Any], node: NodeInfo) -> bool:
    """Patching deactivated the node: its intent is the Restart patching sets, and either the
    progress record names it, this run's, at or after its deactivation, or the run of this round
    that stopped before left it so. Any other deactivation is another operation's (a drain's
    RemoveNode, an operator's), which patching never ends."""
    if node.deactivation_intent != DeactivationIntent.RESTART:
        return False
    if node.name == run.get("left_deactivated"):
        return True
    progress = _progress(runtime).read()
    return progress.owner == run["owner"] and progress.current == node.name and progress.stage in DEACTIVATED_STAGES


def _deactivated_by_other(runtime: Runtime, run: Mapping[str, Any], node: NodeInfo) -> str:
    """Why the node is left alone ('' when it is not): deactivated by another operation."""
    if node.deactivation_intent in ("", "Invalid") or _ours(runtime, run, node):
        return ""
    return f"deactivated by another operation: intent {node.deactivation_intent}"


def _skip(runtime: Runtime, run: Mapping[str, Any], name: str, reason: str) -> dict[str, str]:
    """The node is passed over, not done: the next round tries it again."""
    _progress(runtime).record(run["owner"], current=name, stage="skipped", lease_seconds=_lease_seconds(runtime))
    runtime.record_metric("NodesSkipped", 1, "Count")
    return {"node_name": name, "reason": reason}


def _instance_of(runtime: Runtime, name: str) -> str:
    """The running instance tagged with the node's name in this cluster (seeds by the stack,
    scaling nodes by scale-out)."""
    found = [
        i for i in runtime.instances.list_node_instances()
        if i.tags.get(NODE_NAME_TAG) == name and i.tags.get(CLUSTER_TAG) == runtime.settings.cluster_name and i.state == "running"
    ]  # fmt: skip
    if len(found) != 1:
        what = "no running instance" if not found else f"{len(found)} running instances ({', '.join(i.instance_id for i in found)})"
        raise LifecycleError(f"{what} tagged {NODE_NAME_TAG}={name} in cluster {runtime.settings.cluster_name}")
    return found[0].instance_id


def poll_idle(runtime: Runtime, state: State) -> dict[str, Any]:
    """Done once no AWS-RunPatchBaseline command runs on the node's instance (one a stopped run
    left behind ends by itself: Success, Failed, TimedOut or Cancelled)."""
    current = state["current"]
    running = _running(runtime, current["instance_id"])
    if running:
        _check_deadline(runtime, state, f"the AWS-RunPatchBaseline command(s) still running on {current['node_name']} to end ({running})")
    return {"done": not running, "running": running}


def _running(runtime: Runtime, instance_id: str) -> str:
    """The patch commands still running on the instance, in words ('' when none)."""
    return ", ".join(f"{c.command_id} {c.status}" for c in runtime.patch_baseline.running(instance_id))


def _check_nothing_runs(runtime: Runtime, current: Mapping[str, Any]) -> None:
    running = _running(runtime, current["instance_id"])
    if running:
        raise LifecycleError(f"{current['node_name']} stays deactivated: an AWS-RunPatchBaseline command still runs on it ({running})")


def scan(runtime: Runtime, state: State) -> dict[str, Any]:
    current = state["current"]
    command_id = runtime.patch_baseline.send(current["instance_id"], SCAN, node_name=current["node_name"],
                                             snapshot_id=state["run"]["snapshot_id"])  # fmt: skip
    return {"command_id": command_id, "sent_at": runtime.clock()}


def poll_scan(runtime: Runtime, state: State) -> dict[str, Any]:
    """Done once the scan ended and its patch state is in; whether anything is to install."""
    current, sent = state["current"], state["scan"]
    _check_deadline(runtime, state, f"the scan of {current['node_name']}")
    command = runtime.patch_baseline.command(sent["command_id"], current["instance_id"])
    if command.finished and command.status != "Success":
        raise PatchInstallFailed(f"the scan of {current['node_name']} ended {command.status}: {command.detail}")
    if not command.finished:
        return {"done": False, "status": command.status}
    found = runtime.patch_baseline.state(current["instance_id"])
    if not _reported_by(found, SCAN, sent, state["run"]):
        return {"done": False, "status": "patch state not reported yet"}
    return {"done": True, "status": command.status, **found.to_dict(), "to_install": found.to_install}


def _reported_by(found: PatchState, operation: str, sent: Mapping[str, Any], run: Mapping[str, Any]) -> bool:
    """The patch state is the one the command sent at `sent` reported, not an earlier one still
    read: its operation, an end after the send (less the clock skew), and this run's snapshot
    where the state names one."""
    return (found.operation == operation and found.operation_end_time >= float(sent["sent_at"]) - STATE_CLOCK_SKEW_SECONDS
            and found.snapshot_id in ("", run.get("snapshot_id")))  # fmt: skip


def up_to_date(runtime: Runtime, state: State) -> dict[str, Any]:
    """Nothing to install: the node is done without leaving service. One the run of this round
    that stopped before left deactivated for its restart (its host running) is activated first:
    its updates are in, and nothing else would ever bring it back into service. A node another
    operation deactivated is left as it is."""
    name = state["current"]["node_name"]
    node = _node(runtime, name)
    reactivated = node.status in (NodeStatus.DISABLING, NodeStatus.DISABLED) and _ours(runtime, state["run"], node)
    if reactivated:
        _check_nothing_runs(runtime, state["current"])
        runtime.client.activate_node(name)
    _progress(runtime).record(state["run"]["owner"], current=name, stage="up to date", lease_seconds=_lease_seconds(runtime), done=name)
    runtime.record_metric("NodesUpToDate", 1, "Count")
    return {"node_name": name, "outcome": "up to date", "reactivated": reactivated}


def acquire_lock(runtime: Runtime, state: State) -> dict[str, Any]:
    _check_deadline(runtime, state, "the membership lock")
    grant = runtime.lock.acquire(state["run"]["owner"], ttl_seconds=runtime.settings.lock_ttl_seconds, intent=PATCH,
                                 node=state["current"]["node_name"])  # fmt: skip
    return grant.to_dict()


def check_health(runtime: Runtime, state: State) -> dict[str, Any]:
    """Cluster health must be Ok (a Warning stops too), no cluster code upgrade under way, and for a
    seed every other seed Up and active, before the node leaves service."""
    current = state["current"]
    health = runtime.client.get_cluster_health()
    if not health.is_ok:
        raise ClusterNotHealthy(f"cluster health is {health.describe()} before {current['node_name']} was taken out of service")
    upgrade = runtime.client.get_cluster_upgrade_progress()
    if upgrade.state not in UPGRADE_AT_REST:
        raise ClusterUpgradeInProgress(
            f"a cluster code upgrade is under way ({upgrade.summary()}); {current['node_name']} was not taken out of service"
        )
    if current["is_seed"]:
        _check_seed_quorum(runtime.client.get_node_info_list(), current["node_name"])
    return {"health": health.aggregated_health_state}


def _check_seed_quorum(nodes: list[NodeInfo], name: str) -> None:
    others = [n for n in nodes if n.is_seed_node and n.name != name]
    away = [f"{n.name} ({n.status})" for n in others if n.status != NodeStatus.UP or n.deactivation_intent not in ("", "Invalid")]
    if away:
        raise ClusterNotHealthy(f"seed {name} stays in service while another seed is not Up and active: {', '.join(away)}")


def deactivate(runtime: Runtime, state: State) -> dict[str, Any]:
    """Deactivate with intent Restart, noting the node's instance first: poll_back_up knows the
    reboot by a new one. A node another operation deactivated since it was picked (a drain held
    for the operator) is not touched: `skipped` says why, and the node is passed over."""
    name = state["current"]["node_name"]
    node = _node(runtime, name)
    other = _deactivated_by_other(runtime, state["run"], node)
    if other:
        return {"node_name": name, "skipped": other}
    _record(runtime, state, "deactivate")
    runtime.client.deactivate_node(name, DeactivationIntent.RESTART)
    return {"node_name": name, "intent": DeactivationIntent.RESTART, "sent_at": runtime.clock(), **_instance(node)}


def poll_disabled(runtime: Runtime, state: State) -> dict[str, Any]:
    """Disabled with the deactivation completed. A seed the FM holds in its seed quorum safety
    check is waited for (the FM lets it through once the other seeds have been up for its seed
    wait); held for longer than SEED_QUORUM_WAIT_SECONDS, it is refused."""
    name = state["current"]["node_name"]
    _renew_lock(runtime, state)
    node = _node(runtime, name)
    pending = [check.get("SafetyCheck", {}).get("Kind", "") for check in
               (node.raw.get("NodeDeactivationInfo") or {}).get("PendingSafetyChecks") or []]  # fmt: skip
    if SEED_QUORUM_CHECK in pending:
        sent_at = float((state.get("deactivation") or {}).get("sent_at") or runtime.clock())
        if runtime.clock() - sent_at > SEED_QUORUM_WAIT_SECONDS:
            raise DeactivationRefused(
                f"the Failover Manager held the deactivation of seed {name} in its {SEED_QUORUM_CHECK} safety check "
                f"for more than {SEED_QUORUM_WAIT_SECONDS} s: restarting it now would leave too few seeds up"
            )
        _check_deadline(runtime, state, f"{name} to be Disabled (held in {SEED_QUORUM_CHECK})")
        return {"done": False, "status": node.status, "deactivation": node.deactivation_status, "held": SEED_QUORUM_CHECK}
    if node.status == NodeStatus.UP and node.deactivation_intent in ("", "Invalid"):
        raise DeactivationRefused(f"{name} is Up and active again: someone activated it while it was being deactivated")
    if node.deactivation_intent not in ("", "Invalid", DeactivationIntent.RESTART):
        raise LifecycleError(f"{name} was {_deactivated_by_other(runtime, state['run'], node)} while patching waited for it")
    if not node.is_deactivated:
        _check_deadline(runtime, state, f"{name} to be Disabled (last: {node.status}, {node.deactivation_status}, pending {pending})")
    return {"done": node.is_deactivated, "status": node.status, "deactivation": node.deactivation_status}


def install(runtime: Runtime, state: State) -> dict[str, Any]:
    """Send the Install, unless this run's is already running there: the Task is invoked again
    after an answer lost on the way back (Lambda's 500, outcome unknown), and a second Install
    would run a second Windows Update session beside the first."""
    current, snapshot_id = state["current"], state["run"]["snapshot_id"]
    _record(runtime, state, "install")
    sent = runtime.patch_baseline.running_of(current["instance_id"], INSTALL, snapshot_id)
    if sent:
        return {"command_id": sent, "sent_at": runtime.clock(), "adopted": True}
    command_id = runtime.patch_baseline.send(current["instance_id"], INSTALL, node_name=current["node_name"], snapshot_id=snapshot_id)
    return {"command_id": command_id, "sent_at": runtime.clock(), "adopted": False}


def poll_install(runtime: Runtime, state: State) -> dict[str, Any]:
    current = state["current"]
    _renew_lock(runtime, state)
    command = runtime.patch_baseline.command(state["install"]["command_id"], current["instance_id"])
    if command.finished and command.status != "Success":
        raise PatchInstallFailed(
            f"installing updates on {current['node_name']} ended {command.status} (exit code {command.response_code}): {command.detail}"
        )
    if command.finished:
        found = runtime.patch_baseline.state(current["instance_id"])
        if not _reported_by(found, INSTALL, state["install"], state["run"]):
            _check_deadline(runtime, state, f"the patch state of the install on {current['node_name']}")
            return {"done": False, "status": "patch state not reported yet"}
        if found.failed:
            raise PatchInstallFailed(f"{found.failed} update(s) failed to install on {current['node_name']}")
        return {"done": True, "status": command.status, **found.to_dict()}
    _check_deadline(runtime, state, f"the updates to install on {current['node_name']} (last: {command.status})")
    return {"done": False, "status": command.status}


def poll_back_up(runtime: Runtime, state: State) -> dict[str, Any]:
    """The node is back from its reboot: a new instance of its host is up (Disabled, its
    deactivation still in force, or Up). An Install that installed anything reboots
    (RebootIfNeeded), and the FM may show the last instance, Disabled, until it notices; IsStopped
    says nothing of a reboot (only the StopNode API sets it)."""
    name = state["current"]["node_name"]
    _renew_lock(runtime, state)
    node = _node(runtime, name)
    before = {key: value for key, value in (state.get("deactivation") or {}).items() if key in INSTANCE_FIELDS and value}
    now = _instance(node)
    restarted = not before or any(now.get(key) != value for key, value in before.items())
    back = node.status in (NodeStatus.UP, NodeStatus.DISABLED) and restarted
    if not back and _over_deadline(runtime, state):
        how = node.status if restarted else f"{node.status}, its host not restarted since the deactivation ({before})"
        raise NodeDidNotReturn(f"{name} is still {how} after its updates were installed")
    return {"done": back, "status": node.status, **now}


def activate(runtime: Runtime, state: State) -> dict[str, Any]:
    name = state["current"]["node_name"]
    other = _deactivated_by_other(runtime, state["run"], _node(runtime, name))
    if other:
        raise LifecycleError(f"{name} was {other} while it was patched; it is left as that operation set it")
    _check_nothing_runs(runtime, state["current"])
    _record(runtime, state, "activate")
    runtime.client.activate_node(name)
    return {"node_name": name}


def poll_health(runtime: Runtime, state: State) -> dict[str, Any]:
    name = state["current"]["node_name"]
    _renew_lock(runtime, state)
    node, health = _node(runtime, name), runtime.client.get_cluster_health()
    done = health.is_ok and node.status == NodeStatus.UP
    if not done and _over_deadline(runtime, state):
        raise ClusterNotHealthy(f"cluster health did not come back to Ok after {name} was patched: {health.describe()}; {name} is {node.status}")
    return {"done": done, "health": health.describe(), "status": node.status}


def skip_node(runtime: Runtime, state: State) -> dict[str, Any]:
    """Another operation deactivated the node after it was picked: the lock goes, the node is
    passed over (the run's `current`, with it among the skipped)."""
    run, current = state["run"], state["current"]
    runtime.lock.release(run["owner"])
    skipped = [*(current.get("skipped") or []), _skip(runtime, run, current["node_name"], state["deactivation"]["skipped"])]
    return {**current, "skipped": skipped}


def node_done(runtime: Runtime, state: State) -> dict[str, Any]:
    """The node is patched, active and the cluster healthy: the lock goes, the node is recorded."""
    run, name = state["run"], state["current"]["node_name"]
    release = runtime.lock.release(run["owner"])
    _progress(runtime).record(run["owner"], current=name, stage="patched", lease_seconds=_lease_seconds(runtime), done=name)
    runtime.record_metric("NodesPatched", 1, "Count")
    runtime.record_metric("NodePatchSeconds", runtime.clock() - float(state["current"]["node_started_at"]), "Seconds")
    return {"node_name": name, "outcome": "patched", "lock_released": release.released}


def finish(runtime: Runtime, state: State) -> dict[str, Any]:
    """Every node went through: the round is over (a one-node run leaves the round as it was).
    Nodes skipped because another operation had deactivated them are listed with the reason; the
    round ends all the same, so the next maintenance window tries them again with every other node
    (a node held deactivated for long would otherwise keep every round open)."""
    run, skipped = state["run"], list((state.get("current") or {}).get("skipped") or [])
    if run.get("only"):
        _progress(runtime).release(run["owner"], stopped="")
    else:
        _progress(runtime).finish(run["owner"])
    runtime.record_metric("PatchRunsSucceeded", 1, "Count")
    return {"nodes": len(run["order"]), "seconds": round(runtime.clock() - float(run["started_at"])), "skipped": skipped}


# -- the failure path --------------------------------------------------------------------------


def stop(runtime: Runtime, state: State) -> dict[str, Any]:
    """After any failure: leave the node in its safest state, give up the lock and the progress
    lease (recording why, so the next run starts at this node), and word the alarm. Fails on
    nothing it calls; what it could not do is in the alarm."""
    run, current = state.get("run") or {}, state.get("current") or {}
    owner, name = str(run.get("owner") or ""), str(current.get("node_name") or "")
    notes: list[str] = []
    reason = _failure(state)
    try:
        progress = _progress(runtime).read()
    except Exception:  # noqa: BLE001 - only the wording and the install guard depend on it
        progress = None
    done = list(progress.done) if progress else []
    # An install that was sent (or may have been) and has not ended may yet reboot the machine.
    install_may_run = progress is None or (progress.stage == "install" and "PatchInstallFailed" not in reason)
    if name and not install_may_run:
        # A command still running (this run's, cancelled but not ended, or an earlier run's) may reboot it.
        try:
            install_may_run = bool(_running(runtime, str(current.get("instance_id") or ""))) if current.get("instance_id") else False
        except Exception as err:  # noqa: BLE001 - not knowing is taken as running
            notes.append(f"Whether a patch command still runs on it could not be read ({type(err).__name__}: {err}).")
            install_may_run = True
    # Patching's own deactivation only: the record names the node at or after it, or the stopped
    # run before this one left it (unknown record: not ours, so left as it is).
    recorded = progress is not None and progress.current == name and progress.stage in DEACTIVATED_STAGES
    ours = name == run.get("left_deactivated") or recorded
    if name and progress is None and not ours:
        notes.append("The patch progress could not be read, so a deactivation in force was taken for another operation's and left.")
    left = _leave_safe(runtime, name, notes, install_may_run=install_may_run, ours=ours) if name else "no node had been started"
    for what, release in (("membership lock", lambda: runtime.lock.release(owner)),
                          ("patch progress lease", lambda: _progress(runtime).release(owner, stopped=f"{name}: {reason}"))):  # fmt: skip
        if not owner:
            break
        try:
            release()
        except Exception as err:  # noqa: BLE001 - the alarm must go out whatever
            notes.append(f"The {what} could not be released ({type(err).__name__}: {err}); it expires by itself.")
    runtime.record_metric("PatchRunsStopped", 1, "Count")
    subject = f"Service Fabric patching stopped at {name or 'the start'}"
    return {
        "subject": subject[:SUBJECT_LIMIT],
        "message": " ".join([
            f"Patching {'node ' + name if name else 'the cluster'} stopped: {reason}.",
            f"The node was {left}." if name else "",
            _what_to_do(reason, name),
            "Then run telemetry cluster patch --env <environment>: the run resumes "
            + ("at this node" if name else "where the round stopped")
            + (f" (done this round: {', '.join(done)})." if done else "."),
            *notes,
        ]).replace("  ", " ").strip(),
        "node_left": left,
    }  # fmt: skip


def _leave_safe(runtime: Runtime, name: str, notes: list[str], *, install_may_run: bool, ours: bool) -> str:
    """Activated where it is up (the deactivation cancelled or undone), left deactivated where it
    is Down (so it takes no replicas while it comes back) or where an install may still reboot it;
    a deactivation patching did not make (`ours`: the progress record's word) is never ended.
    What was done, in words."""
    try:
        node = runtime.client.get_node_info(name)
        if node is None:
            return "no longer in the cluster"
        deactivated = node.deactivation_intent not in ("", "Invalid")
        if deactivated and not (ours and node.deactivation_intent == DeactivationIntent.RESTART):
            return f"{node.status}; left deactivated (intent {node.deactivation_intent}) as another operation set it, not this run"
        if node.status in (NodeStatus.UP, NodeStatus.DISABLING, NodeStatus.DISABLED):
            if deactivated and install_may_run:
                return (f"{node.status}; left deactivated, because an install may still be running on it and reboot "
                        "it: activate it once its AWS-RunPatchBaseline command has ended and the node is Up")
            if deactivated:
                runtime.client.activate_node(name)
                return f"{node.status} and has been activated again"
            return f"{node.status} and active (not deactivated by this run)"
        return f"{node.status}; left deactivated ({node.deactivation_intent or 'no intent'}) until it is Up again"
    except Exception as err:  # noqa: BLE001 - the gateway may be what failed
        notes.append(f"Its state could not be read or changed ({type(err).__name__}: {err}).")
        return "in an unknown state (see telemetry cluster status)"


def _what_to_do(reason: str, name: str) -> str:
    if "ClusterNotHealthy" in reason:
        return ("Find out why cluster health is not Ok (Service Fabric Explorer, or telemetry cluster status) and "
                "fix it first: patching never takes a node out of service on an unhealthy cluster.")  # fmt: skip
    if "ClusterUpgradeInProgress" in reason:
        return ("Let the code upgrade end (telemetry cluster upgrade follows it; Get-ServiceFabricClusterUpgrade), "
                "or see why it failed: patching never takes a node out of service during one.")  # fmt: skip
    if "DeactivationRefused" in reason:
        return ("Service Fabric refused to take the seed out of service without risking seed quorum: check that "
                "every seed is Up (telemetry cluster status) and has been for a few minutes.")  # fmt: skip
    if "NodeDidNotReturn" in reason:
        return (f"The machine of {name} rebooted and its node did not come back: look at the instance (EC2 console, "
                "system log, FabricHostSvc) and start the node; once it is Up, activate it (Service Fabric Explorer or "
                f"Enable-ServiceFabricNode) if it is still Disabled.")  # fmt: skip
    if "PatchInstallFailed" in reason:
        return ("Read the AWS-RunPatchBaseline command's output (Run Command history, or the instance's patch "
                "compliance in Patch Manager) and fix the failing update.")  # fmt: skip
    return "The execution history says which step failed and why."


# -- helpers -------------------------------------------------------------------------------------


def _progress(runtime: Runtime) -> Any:
    if runtime.patch_progress is None:
        raise LifecycleError("this function has no patch progress store")
    return runtime.patch_progress


def _lease_seconds(runtime: Runtime) -> float:
    """A run that dies without its failure path frees the lease after twice a node's time."""
    return 2.0 * runtime.settings.workflow_timeout_seconds


def _record(runtime: Runtime, state: State, stage: str) -> None:
    _progress(runtime).record(state["run"]["owner"], current=state["current"]["node_name"], stage=stage,
                              lease_seconds=_lease_seconds(runtime))  # fmt: skip


def _renew_lock(runtime: Runtime, state: State) -> None:
    """Hold the membership lock while the node is out of service: renewed at every look."""
    grant = runtime.lock.acquire(state["run"]["owner"], ttl_seconds=runtime.settings.lock_ttl_seconds, intent=PATCH,
                                 node=state["current"]["node_name"])  # fmt: skip
    if not grant.acquired:
        raise LifecycleError(f"the membership lock was taken by {grant.holder} while a node was out of service")
    if (state.get("lock") or {}).get("acquired") and not grant.renewed:
        # Taken afresh, not renewed: ours lapsed, and another operation may have held it and let it
        # go meanwhile, with this node out of service.
        raise LifecycleError("the membership lock lapsed while a node was out of service (it was taken afresh, not "
                             "renewed): another operation may have changed the cluster meanwhile")


def _instance(node: NodeInfo) -> dict[str, str]:
    """Which run of the node's host this is: NodeInfo's InstanceId (new each time the host starts)
    and NodeUpAt; absent from a gateway that does not send them."""
    return {key: str(node.raw.get(field) or "") for key, field in INSTANCE_FIELDS.items()}


def _node(runtime: Runtime, name: str) -> NodeInfo:
    node = runtime.client.get_node_info(name)
    if node is None:
        raise LifecycleError(f"{name} is no longer in the cluster")
    return node


def _over_deadline(runtime: Runtime, state: State) -> bool:
    return runtime.clock() - float(state["current"]["node_started_at"]) > runtime.settings.workflow_timeout_seconds


def _check_deadline(runtime: Runtime, state: State, what: str) -> None:
    if _over_deadline(runtime, state):
        raise WaitTimedOut(f"gave up waiting for {what} after the node's {runtime.settings.workflow_timeout_seconds} s")


def _failure(state: State) -> str:
    error = state.get("error") or {}
    name, cause = str(error.get("Error") or "unknown error"), error.get("Cause") or ""
    try:
        cause = str(json.loads(cause).get("errorMessage") or "")
    except (ValueError, AttributeError):
        pass
    return f"{cause} ({name})" if cause else name


def keep_warm(runtime: Runtime, state: State) -> dict[str, Any]:
    return {"warm": True}


PATCH_STEPS: dict[str, Step] = {
    "begin": begin,
    "next_node": next_node,
    "poll_idle": poll_idle,
    "scan": scan,
    "poll_scan": poll_scan,
    "up_to_date": up_to_date,
    "acquire_lock": acquire_lock,
    "check_health": check_health,
    "deactivate": deactivate,
    "poll_disabled": poll_disabled,
    "install": install,
    "poll_install": poll_install,
    "poll_back_up": poll_back_up,
    "activate": activate,
    "poll_health": poll_health,
    "skip_node": skip_node,
    "node_done": node_done,
    "finish": finish,
    "stop": stop,
    "alarm_undelivered": count_undelivered_alarm,  # no lifecycle action to keep alive
    "keep_warm": keep_warm,
}
