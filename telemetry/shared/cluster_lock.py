"""The cluster's membership lock as the operator commands meet it (issue 44: one owner for a node).

The lock is one item of the membership lock table (lambdas/node_lifecycle/membership_lock.py): its
owner, what it does (intent), the node it works on and since when. Joins, drains, patching a node
and the reaper hold it while they change membership or take a node out of service, and so does
`telemetry cluster drain` (HeldLock). The whole-cluster commands, `telemetry cluster upgrade`,
`refresh` and `scale`, only read it, with the patch run's progress lease beside it in the same
table (lambdas/node_lifecycle/patch_progress.py), and start nothing while either is held
(refuse_while_held): they run for hours through the automation, which takes the lock node by node.

A refusal is one line naming the holder, its intent, its node and since when (UTC), exit 1.
"""

from __future__ import annotations

import getpass
import os
import socket
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from node_lifecycle.interfaces import LockGrant
from node_lifecycle.membership_lock import DynamoDbMembershipLock
from node_lifecycle.patch_progress import DynamoDbPatchProgress

from stacks.naming import membership_lock_table_name
from telemetry.shared.errors import OperationFailed


class ClusterBusy(OperationFailed):
    """Another operation holds the membership lock or the patch progress lease: nothing was
    started or changed; wait, then run again (exit 1)."""


class LockLost(OperationFailed):
    """The lock expired while we held it and another owner took it: stop before changing more."""


def utc(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def operator_owner(kind: str, node: str) -> str:
    """Who an operator's command is, as the lock names it: `operator-drain:scale-3:ana@laptop:4242`
    (what, on which node, who where, which process: enough to find it, or know it is dead)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        user = str(os.getuid()) if hasattr(os, "getuid") else "unknown"
    return f"operator-{kind}:{node}:{user}@{socket.gethostname()}:{os.getpid()}"


def holder_line(grant: LockGrant, table: str) -> str:
    """`the membership lock (TABLE) is held by OWNER (intent drain, node scale-3) since ...Z`."""
    what = ", ".join([f"intent {grant.intent or 'not stated'}", *([f"node {grant.node}"] if grant.node else [])])
    since = f"since {utc(grant.since)}" if grant.since else "since an unknown time (an owner that does not say)"
    return f"the membership lock ({table}) is held by {grant.holder} ({what}) {since}"


def wait_advice(grant: LockGrant) -> str:
    return (f"wait until it is released, then run again (if that holder is known to be dead, the lock expires at "
            f"{utc(grant.expires_at)})")


def membership_lock(config: Any, session: Any, *, clock: Callable[[], float] = time.time) -> DynamoDbMembershipLock:
    return DynamoDbMembershipLock(session.client("dynamodb"), membership_lock_table_name(config), clock=clock)


def refuse_while_held(config: Any, session: Any, command: str, *, now: Callable[[], float] = time.time) -> None:
    """ClusterBusy, before `command` starts anything, while the membership lock or the patch
    progress lease is held (an expired one is nobody's). Reads only: takes neither."""
    table = membership_lock_table_name(config)
    client = session.client("dynamodb")
    held = DynamoDbMembershipLock(client, table, clock=now).current()
    if held is not None:
        raise ClusterBusy(f"{holder_line(held, table)}; {command} starts nothing while another operation holds the "
                          f"cluster: {wait_advice(held)}")
    patch = DynamoDbPatchProgress(client, table, now).read()
    if patch.owner and patch.lease_until >= now():
        at = f", at {patch.current}" if patch.current else ""
        raise ClusterBusy(f"a patch run ({patch.owner}{at}) holds the patch progress lease in {table} for "
                          f"{patch.lease_until - now():.0f} s more; {command} starts nothing while it does: let it "
                          "finish or stop it, then run again")


class HeldLock:
    """The membership lock held by one operator command for its whole run: taken before its first
    change, renewed from its wait loops at most every `renew_every_seconds`, released at the end.

    `ttl_seconds` is how long the lock outlives the last renewal: it must cover the longest stretch
    without one (a step between two looks), and it is how long a command killed outright
    (SIGKILL, a closed laptop) keeps others out."""

    def __init__(self, lock: DynamoDbMembershipLock, table: str, owner: str, *, intent: str, node: str,
                 ttl_seconds: float, renew_every_seconds: float, say: Callable[[str], None] = print,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.lock, self.table, self.owner, self.intent, self.node = lock, table, owner, intent, node
        self.ttl_seconds, self.renew_every_seconds, self.say, self.clock = ttl_seconds, renew_every_seconds, say, clock
        self.held = False
        self.renewed_at = 0.0

    def take(self) -> LockGrant:
        """ClusterBusy, with nothing changed, while another owner holds it."""
        grant = self._acquire()
        if not grant.acquired:
            raise ClusterBusy(f"{holder_line(grant, self.table)}; nothing was changed: {wait_advice(grant)}")
        self.held, self.renewed_at = True, self.clock()
        self.say(f"took the membership lock as {self.owner} (intent {self.intent}, node {self.node}); it expires at "
                 f"{utc(grant.expires_at)} unless renewed")
        return grant

    def renew(self) -> None:
        """Renew when `renew_every_seconds` have passed since the last renewal. A renewal the
        table does not answer is tried again at the next look (the TTL leaves room for many); one
        that finds another owner (ours expired and was taken over) is LockLost."""
        from botocore.exceptions import BotoCoreError, ClientError

        if not self.held or self.clock() - self.renewed_at < self.renew_every_seconds:
            return
        try:
            grant = self._acquire()
        except (BotoCoreError, ClientError) as err:
            self.say(f"  note: renewing the membership lock failed ({err}); trying again at the next look")
            return
        if not grant.acquired:
            self.held = False
            raise LockLost(f"the membership lock expired while this command held it and {grant.holder} took it "
                           f"(intent {grant.intent or 'not stated'}{', node ' + grant.node if grant.node else ''}); "
                           "stopped before changing more: run again once it is released")
        if not grant.renewed:
            # Taken afresh, not renewed: ours lapsed (a laptop asleep past the TTL), someone else may
            # have held it and let it go meanwhile, and the acquire's fallback took it again.
            self.lock.release(self.owner)
            self.held = False
            raise LockLost("the membership lock lapsed while this command held it (it was taken afresh at the "
                           "renewal, not renewed), so another operation may have changed the cluster meanwhile; "
                           "stopped before changing more: look at the cluster, then run again")
        self.renewed_at = self.clock()

    def release(self) -> None:
        """Give it up (at the end, on failure, on Ctrl-C); a release that fails says when it expires."""
        if not self.held:
            return
        self.held = False
        try:
            released = self.lock.release(self.owner)
        except Exception as err:  # noqa: BLE001 - the command's own outcome is what it ends with
            self.say(f"  note: releasing the membership lock failed ({err}); it expires by itself within "
                     f"{self.ttl_seconds:.0f} s")
            return
        if released.released:
            self.say("released the membership lock")
        elif released.holder:
            self.say(f"  note: the membership lock was no longer this command's: {released.holder} holds it")

    def __enter__(self) -> HeldLock:
        self.take()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _acquire(self) -> LockGrant:
        return self.lock.acquire(self.owner, ttl_seconds=self.ttl_seconds, intent=self.intent, node=self.node)
