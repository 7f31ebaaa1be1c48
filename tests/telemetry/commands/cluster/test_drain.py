"""`telemetry cluster drain` (telemetry/commands/cluster/drain.py) end to end: run as an operator would, against
the HTTPS emulator.

The drain's order (docs/service-fabric.md, "Node lifecycle"): deactivate -> wait Disabled -> the removal
upgrade while the node's machine still runs (waiting out others) -> wait until done -> node
gone; a clean-up (stop the host, RemoveNodeState) only when the upgrade leaves the node listed.

Most drains run in-process through the command's `cli.main` (fast, and the emulator's cluster can
be watched while they run); the operator-facing edges (usage, help, seed, TLS, a timeout) run the
installed `telemetry` command in a fresh interpreter from outside the repository. The endpoint,
the client certificate and the CA (or thumbprint) are given as flags, so the only AWS calls are the
membership lock's, in moto's DynamoDB (the table as the NodeLifecycle stack makes it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from moto import mock_aws
from sf_rest.cluster_config import node_names, nodes_to_be_removed

from telemetry import cli
from telemetry.commands.cluster import drain as drain_node
from telemetry.shared.errors import EXIT_USAGE
from tests.sf_emulator import make_pki

pytestmark = pytest.mark.integration  # starts the HTTPS emulator and subprocesses

TELEMETRY = Path(sys.executable).parent / "telemetry"
DRAIN = ("cluster", "drain", "--env", "dev")
PROG = "telemetry: error"  # every failure's prefix, the kind of failure after it
INSTANCE = "i-0123456789abcdef0"
SEEDS = ["seed-0", "seed-1", "seed-2"]
FAST = ("--poll-interval", "0.02", "--timeout", "20")
START = "/$/StartClusterConfigurationUpgrade"
IN_PROGRESS = "is already in progress and cannot be interrupted"


def deactivate_path(name: str) -> str:
    return f"/Nodes/{name}/$/Deactivate"


def remove_state_path(name: str) -> str:
    return f"/Nodes/{name}/$/RemoveNodeState"


# -- running the script ------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def client_flags(sf_pki) -> list[str]:
    return ["--client-cert", sf_pki.client.cert_path, "--client-key", sf_pki.client.key_path]


@pytest.fixture
def gateway(sf_emulator, sf_pki, client_flags) -> list[str]:
    """The flags that reach the emulator over mutual TLS."""
    return ["--endpoint", sf_emulator.endpoint, *client_flags, "--ca-bundle", sf_pki.ca_path]


@pytest.fixture
def drain(tmp_path) -> Callable[..., subprocess.CompletedProcess]:
    """Runs the script in a fresh interpreter, from a directory outside the repository."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(TELEMETRY), *DRAIN, *args],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env=env,
        )

    return run


@pytest.fixture
def lock_item(moto_session, lock_table) -> Callable[[], dict | None]:
    """The membership lock's item as DynamoDB holds it now (None when nobody holds it)."""
    dynamodb = moto_session.client("dynamodb")
    return lambda: dynamodb.get_item(TableName=lock_table, Key={"LockName": {"S": "cluster-membership"}}).get("Item")


@pytest.fixture
def run(capsys, lock_table) -> Callable[..., Run]:
    """Runs the command in this process; stdout and stderr as the operator sees them. AWS is
    moto's (the lock table in it), or, with `session`, reached through that (its region ->
    session factory)."""

    def go(*args: str, session: Any = None) -> Run:
        capsys.readouterr()
        code = cli.main([*DRAIN, *args], session_factory=(lambda region: session) if session else None)
        out, err = capsys.readouterr()
        return Run(code, out, err)

    return go


@pytest.fixture
def aws_calls(monkeypatch) -> list[str]:
    """Every AWS client the drain makes is recorded; any but DynamoDB's (the membership lock) is
    refused (SSM, for --instance-id, say)."""
    calls: list[str] = []
    make = boto3.session.Session.client

    def lock_only(self, *args, **kwargs):
        service = str(args[0] if args else kwargs.get("service_name"))
        calls.append(service)
        if service != "dynamodb":
            raise AssertionError("the drain made an AWS client")
        return make(self, *args, **kwargs)

    monkeypatch.setattr(boto3.session.Session, "client", lock_only)
    return calls


@pytest.fixture
def aws_credentials(monkeypatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(name, "testing")


# -- reading the emulator ----------------------------------------------------------------------


def posts(emulator) -> list[str]:
    return [r.path for r in emulator.requests if r.method == "POST"]


def starts(emulator) -> list:
    return emulator.requests_to("POST", r"/\$/StartClusterConfigurationUpgrade")


def one_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def target_of(body: dict) -> dict:
    """The ClusterConfig a StartClusterConfigurationUpgrade body asked for."""
    return json.loads(body["ClusterConfig"])


def gateway_status(emulator, pki, path: str) -> int:
    """The HTTP status the gateway answers a GET with (one more request in its log)."""
    response = requests.get(
        emulator.endpoint + path,
        params={"api-version": "6.0"},
        cert=(pki.client.cert_path, pki.client.key_path),
        verify=pki.ca_path,
        timeout=5,
    )
    return response.status_code


def assert_gone(cluster, emulator, pki, name: str) -> None:
    """Out of the node list (GET 204), of GetClusterConfiguration and of the UOS's topology."""
    assert name not in node_names(cluster.config)
    assert name not in cluster.uos_nodes
    assert gateway_status(emulator, pki, f"/Nodes/{name}") == 204


def assert_still_member(cluster, name: str) -> None:
    assert name in node_names(cluster.config)
    assert name in cluster.uos_nodes
    assert cluster.upgrade_requests == []


# -- watching the cluster while a drain runs ---------------------------------------------------


@dataclass(frozen=True)
class StartSeen:
    """The cluster at the moment a StartClusterConfigurationUpgrade reached it."""

    node_status: str
    deactivation: str
    host_running: bool
    other_upgrade_running: bool


def watch_starts(monkeypatch, cluster, name: str, before: Callable[[], None] = lambda: None):
    """Records the node and the upgrade state whenever a start arrives; `before()` runs first."""
    seen: list[StartSeen] = []
    original = cluster.start_upgrade

    def start_upgrade(body):
        before()
        node = cluster.node(name)
        running = cluster.upgrade_status()["UpgradeState"] == "RollingForwardInProgress"
        seen.append(StartSeen(node.status, node.deactivation_status, node.host_running, running))
        return original(body)

    monkeypatch.setattr(cluster, "start_upgrade", start_upgrade)
    return seen


def watch_node_state_removals(monkeypatch, cluster) -> list[tuple[str, str]]:
    """(node, its status) for every RemoveNodeState the gateway receives (not the UOS's own)."""
    seen: list[tuple[str, str]] = []
    original = cluster.remove_node_state

    def remove_node_state(name):
        node = cluster.node(name)
        seen.append((name, node.status if node else "absent"))
        return original(name)

    monkeypatch.setattr(cluster, "remove_node_state", remove_node_state)
    return seen


def once_after_tick(
    monkeypatch, cluster, condition: Callable[[], bool], action: Callable[[], None]
):
    """Runs `action` right after the first tick (gateway request) at which `condition` holds."""
    fired: list[int] = []
    original = cluster.tick

    def tick(count: int = 1) -> None:
        original(count)
        if not fired and condition():
            fired.append(cluster.ticks)
            action()

    monkeypatch.setattr(cluster, "tick", tick)
    return fired


def removal_completed(cluster, name: str) -> Callable[[], bool]:
    return lambda: any(
        name in run.removing and run.log[-1:] == ["completed"] for run in cluster.upgrades
    )


def fabric_survives_the_removal(monkeypatch, cluster, name: str) -> list[int]:
    """The removal upgrade completes but Fabric comes back on the machine (its uninstall did
    not happen) and the UOS's RemoveNodeState fails: the node is listed, Disabled, afterwards."""
    cluster.removes_node_state = False
    return once_after_tick(
        monkeypatch, cluster, removal_completed(cluster, name), lambda: cluster.start_host(name)
    )


def stop_host_when(cluster, name: str, when: Callable[[], bool]) -> threading.Thread:
    """Stands in for whoever stops FabricHostSvc on the machine, once `when()` holds."""

    def watch() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if when():
                cluster.stop_host(name)
                return
            time.sleep(0.01)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


# -- 1. a drain over REST alone ----------------------------------------------------------------


def test_a_drain_removes_the_node_over_rest_alone_and_a_second_run_writes_nothing(
    run, gateway, sf_cluster, sf_emulator, sf_pki, monkeypatch, aws_calls
):
    at_start = watch_starts(monkeypatch, sf_cluster, "scale-0")
    state_removals = watch_node_state_removals(monkeypatch, sf_cluster)

    first = run(*gateway, "--node", "scale-0", *FAST)

    assert (first.returncode, first.stderr) == (0, ""), first.stdout
    out = first.stdout
    assert "scale-0: Up; in the cluster configuration (version 1.0.0)" in out
    assert "deactivating scale-0 (intent RemoveNode)" in out
    assert "  scale-0: Disabled (Completed, intent RemoveNode)" in out
    assert "configuration upgrade to version 1.0.1 sent" in out
    assert "done: scale-0 is out of the node list and the cluster configuration" in out
    assert "clean-up" not in out
    # Writes: the deactivation, then the one start; no RemoveNodeState (the UOS did it).
    assert posts(sf_emulator) == [deactivate_path("scale-0"), START]
    assert state_removals == []
    assert aws_calls == ["dynamodb"]  # the lock; no SSM: nothing stopped the host but the upgrade itself
    (request,) = sf_cluster.upgrade_requests
    target = target_of(request)
    assert nodes_to_be_removed(target) == ["scale-0"]
    assert sorted(node_names(target)) == ["scale-1", *SEEDS]
    assert target["clusterConfigurationVersion"] == "1.0.1"
    # The start found the node Disabled with its machine running, so the UOS went straight
    # through: no wait for a Down node, the node dropped, the manifest upgrade completed.
    assert at_start == [StartSeen("Disabled", "Completed", True, False)]
    (upgrade,) = sf_cluster.upgrades
    assert (upgrade.removing, upgrade.log) == (
        ("scale-0",),
        ["wait_disabled", "upgrade", "completed"],
    )
    assert sf_cluster.nodes["scale-0"].status == "Removed"  # by the UOS's RemoveNodeState
    assert_gone(sf_cluster, sf_emulator, sf_pki, "scale-0")
    assert sf_cluster.uos_nodes == ["scale-1", *SEEDS]

    sf_emulator.clear_log()
    second = run(*gateway, "--node", "scale-0", *FAST)

    assert (second.returncode, second.stderr) == (0, ""), second.stdout
    assert "already removed (listed in NodesToBeRemoved)" in second.stdout
    assert posts(sf_emulator) == []
    assert len(sf_cluster.upgrade_requests) == 1
    as_json = run(*gateway, "--node", "scale-0", *FAST, "--format", "json")
    assert json.loads(as_json.stdout) == {"node": "scale-0", "result": "already removed"}
    assert "already removed (listed in NodesToBeRemoved)" in as_json.stderr


# -- 1b. the membership lock: one owner for a node ---------------------------------------------


def holds(item: dict | None) -> tuple[str, str, str] | None:
    """(owner's kind and node, intent, node) of a lock item: the owner's user, host and pid vary."""
    if item is None:
        return None
    return (":".join(item["Owner"]["S"].split(":")[:2]), item["Intent"]["S"], item["Node"]["S"])


@pytest.mark.overlap
def test_a_drain_holds_the_membership_lock_while_it_changes_the_node_and_lets_it_go(
    run, gateway, sf_cluster, sf_emulator, monkeypatch, lock_item
):
    seen: list = []
    watch_starts(monkeypatch, sf_cluster, "scale-0", before=lambda: seen.append(lock_item()))

    result = run(*gateway, "--node", "scale-0", *FAST)

    assert (result.returncode, result.stderr) == (0, ""), result.stdout
    (at_start,) = seen
    assert holds(at_start) == ("operator-drain:scale-0", "drain", "scale-0")
    owner = at_start["Owner"]["S"]
    assert owner.split(":")[3] == str(os.getpid())  # operator-drain:NODE:USER@HOST:PID
    assert abs(float(at_start["Since"]["N"]) - time.time()) < 60
    assert f"took the membership lock as {owner} (intent drain, node scale-0)" in result.stdout
    assert result.stdout.rstrip().endswith("released the membership lock")
    assert lock_item() is None


@pytest.mark.overlap
def test_a_drain_is_refused_in_one_line_while_another_owner_holds_the_lock(
    run, gateway, sf_cluster, sf_emulator, moto_session, lock_table, lock_item
):
    since = time.time() - 120
    held = {"LockName": {"S": "cluster-membership"}, "Owner": {"S": "scale-out:i-0bbb:exec-7"},
            "ExpiresAt": {"N": str(int(since) + 3600)}, "Intent": {"S": "join"}, "Node": {"S": "scale-7"},
            "Since": {"N": str(int(since))}}
    moto_session.client("dynamodb").put_item(TableName=lock_table, Item=held)

    result = run(*gateway, "--node", "scale-0", *FAST)

    assert result.returncode == drain_node.EXIT_REFUSED == 1, result.stdout
    stamp = lambda epoch: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))  # noqa: E731
    assert one_line(result.stderr) == (
        f"{PROG}: refused: the membership lock ({lock_table}) is held by scale-out:i-0bbb:exec-7 (intent join, node "
        f"scale-7) since {stamp(int(since))}; nothing was changed: wait until it is released, then run again (if that "
        f"holder is known to be dead, the lock expires at {stamp(int(since) + 3600)})")
    assert posts(sf_emulator) == []
    assert sf_cluster.node("scale-0").status == "Up"
    assert lock_item() == held  # neither taken nor released


def test_a_lock_its_dead_holder_let_expire_is_taken_over(
    run, gateway, sf_cluster, sf_emulator, moto_session, lock_table, lock_item, monkeypatch
):
    moto_session.client("dynamodb").put_item(TableName=lock_table, Item={
        "LockName": {"S": "cluster-membership"}, "Owner": {"S": "operator-drain:scale-1:bo@gone:99"},
        "ExpiresAt": {"N": str(int(time.time()) - 1)}, "Intent": {"S": "drain"}, "Node": {"S": "scale-1"}})  # fmt: skip
    seen: list = []
    watch_starts(monkeypatch, sf_cluster, "scale-0", before=lambda: seen.append(holds(lock_item())))

    result = run(*gateway, "--node", "scale-0", *FAST)

    assert (result.returncode, result.stderr) == (0, ""), result.stdout
    assert seen == [("operator-drain:scale-0", "drain", "scale-0")]
    assert lock_item() is None


@pytest.fixture
def lock_grants(monkeypatch) -> list:
    """Every answer the drain's acquires and renewals got from DynamoDB (the real calls, in moto)."""
    from node_lifecycle.membership_lock import DynamoDbMembershipLock

    grants: list = []
    acquire = DynamoDbMembershipLock.acquire

    def recorded(self, *args, **kwargs):
        grants.append(acquire(self, *args, **kwargs))
        return grants[-1]

    monkeypatch.setattr(DynamoDbMembershipLock, "acquire", recorded)
    return grants


def test_the_lock_is_renewed_from_the_waits_keeping_since(run, gateway, sf_cluster, monkeypatch, lock_grants):
    monkeypatch.setattr(drain_node, "LOCK_RENEW_SECONDS", 0.0)  # at every look, not once a minute

    result = run(*gateway, "--node", "scale-0", *FAST)

    assert (result.returncode, result.stderr) == (0, ""), result.stdout
    taken, *renewals = lock_grants
    assert len(renewals) >= 2  # the waits for Disabled and for the upgrade each looked more than once
    assert all(grant.acquired and grant.holder == taken.holder for grant in renewals)
    assert {grant.since for grant in renewals} == {taken.since}  # milliseconds apart: a new Since would show
    assert renewals[-1].expires_at >= taken.expires_at
    assert taken.expires_at - taken.since == pytest.approx(drain_node.lock_ttl_seconds(0.02), abs=1)


def test_at_the_default_pace_a_short_drain_takes_the_lock_once(run, gateway, sf_cluster, lock_grants):
    result = run(*gateway, "--node", "scale-0", *FAST)

    assert (result.returncode, result.stderr) == (0, ""), result.stdout
    assert len(lock_grants) == 1  # renewed at most every LOCK_RENEW_SECONDS, not at each look


@pytest.mark.overlap
def test_a_lock_taken_over_mid_drain_stops_it_before_the_next_change(
    run, gateway, sf_cluster, sf_emulator, moto_session, lock_table, monkeypatch, lock_item
):
    """Its renewals failed until it expired (a laptop asleep), and a join took the lock over."""
    monkeypatch.setattr(drain_node, "LOCK_RENEW_SECONDS", 0.0)
    dynamodb = moto_session.client("dynamodb")
    joined = {"LockName": {"S": "cluster-membership"}, "Owner": {"S": "scale-out:i-0ccc:exec-8"},
              "ExpiresAt": {"N": str(int(time.time()) + 3600)}, "Intent": {"S": "join"}, "Node": {"S": "scale-8"},
              "Since": {"N": str(int(time.time()))}}
    once_after_tick(monkeypatch, sf_cluster, lambda: sf_cluster.node("scale-0").status == "Disabling",
                    lambda: dynamodb.put_item(TableName=lock_table, Item=joined))

    result = run(*gateway, "--node", "scale-0", *FAST)

    assert result.returncode == 1, result.stdout
    assert one_line(result.stderr) == (
        f"{PROG}: the membership lock expired while this command held it and scale-out:i-0ccc:exec-8 took it (intent "
        "join, node scale-8); stopped before changing more: run again once it is released")
    assert starts(sf_emulator) == []  # no removal started under someone else's lock
    assert_still_member(sf_cluster, "scale-0")
    assert lock_item() == joined  # the join's lock is left alone


@pytest.mark.overlap
def test_a_lock_that_lapsed_and_was_let_go_by_another_meanwhile_stops_the_drain(
    run, gateway, sf_cluster, sf_emulator, moto_session, lock_table, monkeypatch, lock_item
):
    """Its renewals failed until it expired (a laptop asleep), a join took it over, joined and let
    it go (the item is gone): the next renewal finds no item of its own and takes the lock afresh.
    That is not a renewal: another operation may have changed the cluster meanwhile."""
    monkeypatch.setattr(drain_node, "LOCK_RENEW_SECONDS", 0.0)
    once_after_tick(monkeypatch, sf_cluster, lambda: sf_cluster.node("scale-0").status == "Disabling",
                    lambda: moto_session.client("dynamodb").delete_item(
                        TableName=lock_table, Key={"LockName": {"S": "cluster-membership"}}))

    result = run(*gateway, "--node", "scale-0", *FAST)

    assert result.returncode == 1, result.stdout
    assert "the membership lock lapsed while this command held it (it was taken afresh at the renewal" in result.stderr
    assert starts(sf_emulator) == []  # no removal started after the lapse
    assert lock_item() is None  # the fresh take is given back


def test_ctrl_c_while_the_drain_waits_releases_the_lock_and_exits_130(
    run, gateway, sf_cluster, sf_emulator, monkeypatch, lock_item
):
    sf_cluster.set_stuck_in_safety_check("scale-0")
    looks: list[float] = []

    def interrupted_on_the_third_wait(seconds: float) -> None:
        looks.append(seconds)
        if len(looks) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(drain_node.time, "sleep", interrupted_on_the_third_wait)

    result = run(*gateway, "--node", "scale-0", *FAST)

    assert result.returncode == 130, result.stdout
    assert one_line(result.stderr) == f"{PROG}: interrupted: re-run to pick up where the node is"
    assert "released the membership lock" in result.stdout
    assert lock_item() is None
    assert starts(sf_emulator) == []


# -- 2. two drains in a row --------------------------------------------------------------------


def test_two_drains_in_a_row_each_name_only_their_own_node(
    run, gateway, sf_cluster, sf_emulator, sf_pki
):
    first = run(*gateway, "--node", "scale-0", *FAST)
    second = run(*gateway, "--node", "scale-1", *FAST)

    assert (first.returncode, first.stderr) == (0, ""), first.stdout
    assert (second.returncode, second.stderr) == (0, ""), second.stdout
    assert "configuration upgrade to version 1.0.2 sent" in second.stdout
    before, after = (target_of(body) for body in sf_cluster.upgrade_requests)
    assert nodes_to_be_removed(before) == ["scale-0"]
    assert nodes_to_be_removed(after) == ["scale-1"]  # the first drain's value not carried on
    assert sorted(node_names(after)) == SEEDS
    assert [(u.removing, u.log[-1]) for u in sf_cluster.upgrades] == [
        (("scale-0",), "completed"),
        (("scale-1",), "completed"),
    ]
    assert sorted(node_names(sf_cluster.config)) == SEEDS
    assert sf_cluster.uos_nodes == SEEDS
    assert_gone(sf_cluster, sf_emulator, sf_pki, "scale-0")
    assert_gone(sf_cluster, sf_emulator, sf_pki, "scale-1")


# -- 3. another upgrade running ----------------------------------------------------------------


def test_a_drain_waits_out_an_upgrade_the_status_shows_running(
    run, gateway, sf_cluster, sf_emulator, sf_pki, monkeypatch
):
    # Someone else's upgrade (6 ticks) begins as the node turns Disabled, so it is running
    # when the drain is ready to start its own.
    fired = once_after_tick(
        monkeypatch,
        sf_cluster,
        lambda: sf_cluster.node("scale-0").status == "Disabled",
        lambda: sf_cluster.run_other_upgrade(ticks=6),
    )
    at_start = watch_starts(monkeypatch, sf_cluster, "scale-0")

    result = run(*gateway, "--node", "scale-0", *FAST)

    assert (result.returncode, result.stderr) == (0, ""), result.stdout
    assert fired
    assert (
        "another configuration upgrade is running (RollingForwardInProgress at version 1.0.0); "
        "waiting for it first"
    ) in result.stdout
    # No start reached the cluster while the other upgrade ran: one start, after it ended.
    assert at_start == [StartSeen("Disabled", "Completed", True, False)]
    assert len(starts(sf_emulator)) == 1
    assert [(u.version, u.removing, u.log[-1]) for u in sf_cluster.upgrades] == [
        ("other", (), "RollingForwardCompleted"),
        ("1.0.1", ("scale-0",), "completed"),
    ]
    assert_gone(sf_cluster, sf_emulator, sf_pki, "scale-0")


def test_a_start_refused_because_an_upgrade_began_meanwhile_is_sent_again_after_it(
    run, gateway, sf_cluster, sf_emulator, sf_pki, monkeypatch
):
    # Another party's upgrade begins between the drain's look at the status and its start.
    began: list[bool] = []

    def other_begins() -> None:
        if not began:
            began.append(True)
            sf_cluster.run_other_upgrade(ticks=6)

    at_start = watch_starts(monkeypatch, sf_cluster, "scale-0", before=other_begins)

    result = run(*gateway, "--node", "scale-0", *FAST)

    assert (result.returncode, result.stderr) == (0, ""), result.stdout
    assert "another configuration upgrade is running (" in result.stdout
    assert IN_PROGRESS in result.stdout
    refused, accepted = starts(sf_emulator)
    assert refused.status == 500 and accepted.status in (202, 504)
    # The first start met the running upgrade and was refused; the second came after it.
    assert [seen.other_upgrade_running for seen in at_start] == [True, False]
    assert [nodes_to_be_removed(target_of(b)) for b in sf_cluster.upgrade_requests] == [
        ["scale-0"],
        ["scale-0"],
    ]
    assert [(u.version, u.log[-1]) for u in sf_cluster.upgrades] == [
        ("other", "RollingForwardCompleted"),
        ("1.0.1", "completed"),
    ]
    assert_gone(sf_cluster, sf_emulator, sf_pki, "scale-0")


# -- 4. the start call outlives the gateway's timeout ------------------------------------------


@pytest.mark.parametrize(
    ("start_wait_ticks", "answer", "said"),
    [
        (1, 504, "sent; the gateway's timeout passed, the upgrade goes on"),  # as on a real cluster
        (50, 202, "started"),  # the orchestration ended within the call
    ],
)
def test_the_start_is_sent_once_whether_or_not_it_answers_in_time(
    run, gateway, sf_cluster, sf_emulator, sf_pki, start_wait_ticks, answer, said
):
    sf_cluster.start_wait_ticks = start_wait_ticks

    result = run(*gateway, "--node", "scale-0", *FAST)

    assert (result.returncode, result.stderr) == (0, ""), result.stdout
    assert f"configuration upgrade to version 1.0.1 {said}: scale-0 out of nodes" in result.stdout
    (start,) = starts(sf_emulator)
    assert start.status == answer
    assert len(sf_cluster.upgrade_requests) == 1
    assert [(u.removing, u.log[-1]) for u in sf_cluster.upgrades] == [(("scale-0",), "completed")]
    assert_gone(sf_cluster, sf_emulator, sf_pki, "scale-0")


def test_a_start_the_cluster_never_saw_is_not_resent_and_a_re_run_finishes(
    run, gateway, sf_cluster, sf_emulator, sf_pki
):
    # The gateway answers FABRIC_E_TIMEOUT without passing the start on: the outcome is
    # unknown to the drain, which must watch the status, not send the start again.
    sf_emulator.inject_error(504, "FABRIC_E_TIMEOUT", method="POST", path="StartCluster")

    lost = run(*gateway, "--node", "scale-0", *FAST)

    assert lost.returncode == drain_node.EXIT_FAILED, lost.stdout
    assert "ended without upgrading the cluster" in one_line(lost.stderr)
    assert [s.status for s in starts(sf_emulator)] == [504]
    assert_still_member(sf_cluster, "scale-0")
    assert sf_cluster.node("scale-0").status == "Disabled"

    sf_emulator.clear_log()
    again = run(*gateway, "--node", "scale-0", *FAST)

    assert (again.returncode, again.stderr) == (0, ""), again.stdout
    assert "scale-0 is already deactivated for removal (intent RemoveNode)" in again.stdout
    assert posts(sf_emulator) == [START]
    assert_gone(sf_cluster, sf_emulator, sf_pki, "scale-0")


# -- 5. a safety check that never ends ---------------------------------------------------------


def test_a_drain_that_runs_out_of_time_says_where_it_stopped_and_lets_the_lock_go(
    run, gateway, sf_cluster, sf_emulator, lock_item
):
    # In this process: the membership lock is in moto's DynamoDB, which a fresh interpreter lacks.
    sf_cluster.set_stuck_in_safety_check("scale-0")

    result = run(*gateway, "--node", "scale-0", "--timeout", "1", "--poll-interval", "0.05")

    assert result.returncode == drain_node.EXIT_TIMED_OUT, result.stdout
    line = one_line(result.stderr)
    assert line.startswith(
        f"{PROG}: timed out: --timeout 1 s passed waiting for scale-0 to be Disabled"
    )
    assert "SafetyCheckInProgress" in line
    assert starts(sf_emulator) == []
    assert_still_member(sf_cluster, "scale-0")
    assert sf_cluster.node("scale-0").status == "Disabling"  # and a re-run picks up from here
    assert "released the membership lock" in result.stdout and lock_item() is None


# -- 6. clean-up: the UOS's RemoveNodeState did not happen -------------------------------------


def test_when_the_uos_leaves_the_node_down_the_drain_removes_its_state(
    run, gateway, sf_cluster, sf_emulator, sf_pki, monkeypatch, aws_calls
):
    sf_cluster.removes_node_state = False
    state_removals = watch_node_state_removals(monkeypatch, sf_cluster)

    result = run(*gateway, "--node", "scale-0", *FAST)

    assert (result.returncode, result.stderr) == (0, ""), result.stdout
    out = result.stdout
    assert (
        "clean-up: the upgrade completed but scale-0 is still listed "
        "(Down (Completed, intent RemoveNode))"
    ) in out
    assert "clean-up: removed the node state of scale-0" in out
    assert "stop FabricHostSvc" not in out  # already Down: nothing to stop
    assert posts(sf_emulator) == [deactivate_path("scale-0"), START, remove_state_path("scale-0")]
    assert state_removals == [("scale-0", "Down")]
    assert aws_calls == ["dynamodb"]
    assert sf_cluster.nodes["scale-0"].status == "Removed"
    assert_gone(sf_cluster, sf_emulator, sf_pki, "scale-0")


def test_when_fabric_survives_the_removal_the_operator_stops_it(
    run, gateway, sf_cluster, sf_emulator, sf_pki, monkeypatch, aws_calls
):
    restarted = fabric_survives_the_removal(monkeypatch, sf_cluster, "scale-0")
    state_removals = watch_node_state_removals(monkeypatch, sf_cluster)
    reads: list[int] = []

    def drain_is_waiting_for_down() -> bool:
        # Two reads of the node after Fabric came back: the drain has asked for the stop.
        count = len(sf_emulator.requests_to("GET", "/Nodes/scale-0"))
        if restarted and not reads:
            reads.append(count)
        return bool(reads) and count >= reads[0] + 2

    operator = stop_host_when(sf_cluster, "scale-0", drain_is_waiting_for_down)

    result = run(*gateway, "--node", "scale-0", *FAST)
    operator.join(timeout=5)

    assert (result.returncode, result.stderr) == (0, ""), result.stdout
    out = result.stdout
    assert "clean-up: the upgrade completed but scale-0 is still listed (Disabled" in out
    assert "stop FabricHostSvc on scale-0's machine (no --instance-id given)" in out
    assert "  scale-0: Down" in out
    assert "clean-up: removed the node state of scale-0" in out
    assert state_removals == [("scale-0", "Down")]
    assert aws_calls == ["dynamodb"]
    assert_gone(sf_cluster, sf_emulator, sf_pki, "scale-0")


# -- with --instance-id: SSM (moto), in-process ------------------------------------------------


def test_with_an_instance_id_ssm_is_only_checked_when_the_upgrade_removes_the_node(
    run, gateway, sf_cluster, sf_emulator, sf_pki, aws_credentials
):
    with mock_aws():
        ssm = boto3.client("ssm", region_name="eu-west-1")
        result = run(
            *gateway, "--node", "scale-0", "--instance-id", INSTANCE, "--region", "eu-west-1", *FAST
        )
        commands = ssm.list_commands(InstanceId=INSTANCE)["Commands"]

    assert (result.returncode, result.stderr) == (0, ""), result.stdout
    assert commands == []  # the upgrade took the node out; nothing was run on the machine
    assert "clean-up" not in result.stdout
    assert posts(sf_emulator) == [deactivate_path("scale-0"), START]
    assert_gone(sf_cluster, sf_emulator, sf_pki, "scale-0")


def test_with_an_instance_id_a_surviving_fabric_is_stopped_over_ssm(
    run, gateway, sf_cluster, sf_emulator, sf_pki, monkeypatch, aws_credentials
):
    fabric_survives_the_removal(monkeypatch, sf_cluster, "scale-0")
    state_removals = watch_node_state_removals(monkeypatch, sf_cluster)
    with mock_aws():
        ssm = boto3.client("ssm", region_name="eu-west-1")
        sent = lambda: bool(ssm.list_commands(InstanceId=INSTANCE)["Commands"])  # noqa: E731
        machine = stop_host_when(sf_cluster, "scale-0", sent)  # moto runs no PowerShell

        result = run(
            *gateway, "--node", "scale-0", "--instance-id", INSTANCE, "--region", "eu-west-1", *FAST
        )
        machine.join(timeout=5)
        (command,) = ssm.list_commands(InstanceId=INSTANCE)["Commands"]

    assert (result.returncode, result.stderr) == (0, ""), result.stdout
    assert (
        f"clean-up: stopping FabricHostSvc on {INSTANCE} over SSM (command {command['CommandId']})"
        in result.stdout
    )
    assert command["DocumentName"] == "telemetry-dev-sf-stop-host"  # runs stop_fabric_host.ps1 and nothing else
    assert state_removals == [("scale-0", "Down")]
    assert posts(sf_emulator) == [deactivate_path("scale-0"), START, remove_state_path("scale-0")]
    assert_gone(sf_cluster, sf_emulator, sf_pki, "scale-0")


# -- 7. a Down node ----------------------------------------------------------------------------


def test_a_node_whose_host_is_down_is_refused_and_nothing_is_sent(
    run, gateway, sf_cluster, sf_emulator
):
    sf_cluster.stop_host("scale-1")

    result = run(*gateway, "--node", "scale-1", *FAST)

    assert result.returncode == drain_node.EXIT_FAILED, result.stdout
    line = one_line(result.stderr)
    assert line.startswith(f"{PROG}: not removing scale-1: it is Down")
    assert posts(sf_emulator) == []
    assert_still_member(sf_cluster, "scale-1")
    assert sf_cluster.node("scale-1").status == "Down"


# -- 8. the gateway verified by thumbprint -----------------------------------------------------


def sha256_thumbprint(cert_pem: str) -> str:
    return x509.load_pem_x509_certificate(cert_pem.encode()).fingerprint(hashes.SHA256()).hex()


@pytest.mark.parametrize(
    "thumbprint",
    [
        pytest.param(lambda pki: pki.server.sha1_thumbprint, id="sha1"),
        pytest.param(
            lambda pki: ":".join(
                pki.server.sha1_thumbprint[i : i + 2] for i in range(0, 40, 2)
            ).lower(),
            id="sha1-colons",
        ),
        pytest.param(lambda pki: sha256_thumbprint(pki.server.cert_pem), id="sha256"),
    ],
)
def test_a_drain_can_verify_the_gateway_by_its_thumbprint(
    run, client_flags, sf_cluster, sf_emulator, sf_pki, thumbprint
):
    result = run(
        "--endpoint",
        sf_emulator.endpoint,
        *client_flags,
        "--server-thumbprint",
        thumbprint(sf_pki),
        "--node",
        "scale-0",
        *FAST,
    )

    assert (result.returncode, result.stderr) == (0, ""), result.stdout
    assert {r.client_cn for r in sf_emulator.requests} == {"sf-admin"}  # still mutual TLS
    assert_gone(sf_cluster, sf_emulator, sf_pki, "scale-0")


def test_a_wrong_thumbprint_is_one_line_and_nothing_is_sent(
    drain, client_flags, sf_cluster, sf_emulator, sf_pki
):
    result = drain(
        "--endpoint",
        sf_emulator.endpoint,
        *client_flags,
        "--server-thumbprint",
        sf_pki.client.sha1_thumbprint,  # a real certificate, not the gateway's
        "--node",
        "scale-0",
        *FAST,
    )

    assert result.returncode == drain_node.EXIT_FAILED
    assert one_line(result.stderr).startswith(f"{PROG}: TLS with https://127.0.0.1")
    assert sf_emulator.requests == []
    assert sf_cluster.node("scale-0").status == "Up"


# -- usage, help, refusals ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--ca-bundle", "{ca}", "--insecure"],
            "--insecure: not allowed with argument --ca-bundle",
        ),
        (
            ["--ca-bundle", "{ca}", "--server-thumbprint", "{sha1}"],
            "--server-thumbprint: not allowed with argument --ca-bundle",
        ),
        (
            ["--insecure", "--server-thumbprint", "{sha1}"],
            "--server-thumbprint: not allowed with argument --insecure",
        ),
        (
            ["--server-thumbprint", "{sha1}00"],
            "--server-thumbprint must be 40 (SHA-1) or 64 (SHA-256) hex digits",
        ),
        (
            ["--server-thumbprint", "Z" * 40],
            "--server-thumbprint must be 40 (SHA-1) or 64 (SHA-256) hex digits",
        ),
        (["--client-cert", "{cert}"], "--client-cert and --client-key go together"),
        (["--insecure", "--timeout", "-5"], "must be positive"),
        (["--insecure", "--endpoint", "ftp://127.0.0.1:19080"], "--endpoint must be https://HOST:PORT"),
    ],
)
def test_bad_flags_are_one_line(drain, sf_emulator, sf_pki, flags, message):
    values = {
        "ca": sf_pki.ca_path,
        "cert": sf_pki.client.cert_path,
        "sha1": sf_pki.server.sha1_thumbprint,
    }
    flags = [flag.format(**values) for flag in flags]

    result = drain("--endpoint", sf_emulator.endpoint, "--node", "scale-0", *flags)

    assert result.returncode == EXIT_USAGE
    assert message in one_line(result.stderr)
    assert sf_emulator.requests == []


def test_help_describes_the_interface(drain):
    result = drain("--help")

    assert result.returncode == 0
    for flag in (
        "--endpoint",
        "--node",
        "--client-cert",
        "--client-key",
        "--ca-bundle",
        "--server-thumbprint",
        "--insecure",
        "--instance-id",
        "--timeout",
        "--poll-interval",
        "--dry-run",
    ):
        assert flag in result.stdout
    assert "Reaches the cluster's HTTP gateway (19080): from the VPC or a management CIDR" in " ".join(result.stdout.split())


def test_help_says_the_drain_holds_the_membership_lock(run):
    result = run("--help")

    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert ("It holds the cluster's membership lock (DynamoDB) from its first change to its end, and is refused, "
            "changing nothing, while a join, a drain, a patched node or the reaper holds it.") in text
    assert "the only AWS calls are the membership lock's (DynamoDB)" in text


def test_a_seed_node_is_refused_with_one_line_and_nothing_changed(
    drain, gateway, sf_cluster, sf_emulator
):
    result = drain(*gateway, "--node", "seed-1", *FAST)

    assert result.returncode == drain_node.EXIT_REFUSED
    assert one_line(result.stderr).startswith(f"{PROG}: refused: seed-1 is a seed node")
    assert posts(sf_emulator) == []
    assert sf_cluster.node("seed-1").status == "Up"


def test_an_unknown_node_is_one_line(drain, gateway, sf_cluster, sf_emulator):
    result = drain(*gateway, "--node", "scale-42")

    assert result.returncode == drain_node.EXIT_FAILED
    assert "'scale-42' is not known to the cluster" in one_line(result.stderr)
    assert posts(sf_emulator) == []
    assert "scale-42" not in sf_cluster.nodes  # a Deactivate would have made a placeholder


def test_a_gateway_certificate_from_another_ca_is_one_line(
    drain, client_flags, sf_emulator, tmp_path
):
    stranger = make_pki(tmp_path / "other")

    result = drain(
        "--endpoint",
        sf_emulator.endpoint,
        "--node",
        "scale-0",
        "--ca-bundle",
        stranger.ca_path,
        *client_flags,
        *FAST,
    )

    assert result.returncode == drain_node.EXIT_FAILED
    assert "TLS with https://127.0.0.1" in one_line(result.stderr)
    assert sf_emulator.requests == []


# -- 9. dry run --------------------------------------------------------------------------------


def test_a_dry_run_plans_offline_reaching_neither_the_cluster_nor_aws(
    run, gateway, sf_cluster, sf_emulator, aws_calls
):
    """The whole drain from a node still in the cluster, and what a run reads first: here the
    flags name the gateway and its certificates, so only the cluster's own state is left."""
    fresh = run(*gateway, "--node", "scale-0", "--instance-id", INSTANCE, "--dry-run")

    assert (fresh.returncode, fresh.stderr) == (0, ""), fresh.stdout
    lines = fresh.stdout.splitlines()
    assert lines[:3] == [
        "drain scale-0 out of the dev cluster",
        "a run would first read (this offline dry run could not):",
        "  - from the cluster's HTTP gateway: scale-0's status and node type (a seed node is refused, an unknown one "
        "is a failure, one already removed is done), the cluster configuration and its version, and any configuration "
        "upgrade running; so which of the steps below are done already (a drain picks up where the node is)",
    ]
    assert "  - deactivate scale-0 with intent RemoveNode (RemoveData if refused) and wait until it is Disabled" in lines
    changes = lines[lines.index("and would change:") + 1:]
    assert changes[0].startswith(
        "  - take the membership lock (telemetry-dev-sf-membership-lock) as operator-drain:scale-0:<you>@<host>:<pid>, "
        "intent drain, node scale-0, for the whole drain: refused, with nothing changed, while a join, a drain, a patched "
        "node or the reaper holds it; renewed every 60 s from the waits")
    assert (f"  - only if the upgrade leaves scale-0 listed: stop FabricHostSvc on {INSTANCE} over SSM Run Command "
            "(document telemetry-dev-sf-stop-host), wait until it is Down, then RemoveNodeState") in lines
    assert lines[-1] == "dry run: nothing was read from AWS, nothing was changed"
    assert sf_emulator.requests == []  # not even a look at the node
    assert aws_calls == []


def test_a_dry_run_names_what_the_stack_would_give_and_refuses_a_seed_by_its_name(run, sf_emulator, aws_calls):
    plan = run("--node", "scale-0", "--dry-run", "--format", "json")
    seed = run("--node", "seed-1", "--dry-run")

    assert plan.returncode == 0, plan.stderr
    reads = json.loads(plan.stdout)["would_read"]
    assert reads[:3] == [
        "the outputs of stack Telemetry-dev-ServiceFabric (CloudFormation): the HTTP gateway's address "
        "(HttpGatewayEndpoint), the certificate secrets' names",
        "the admin client certificate: secret telemetry-dev/service-fabric/admin-certificate (Secrets Manager)",
        "the cluster certificate, to verify the gateway: secret telemetry-dev/service-fabric/cluster-certificate "
        "(Secrets Manager)",
    ]
    assert seed.returncode == drain_node.EXIT_REFUSED
    assert one_line(seed.stderr) == (f"{PROG}: refused: seed-1 is a seed node of dev (seed-0, seed-1, seed-2); a drain "
                                     "refuses it and changes nothing")
    assert sf_emulator.requests == [] and aws_calls == []


# -- 10. the cluster from --env ----------------------------------------------------------------


def test_with_env_the_endpoint_and_certificates_come_from_the_stack_outputs(
    run, moto_session, monkeypatch, sf_emulator, sf_pki
):
    """No --endpoint and no certificate flags: the gateway from the HttpGatewayEndpoint output
    (DescribeStacks through botocore's Stubber), the admin certificate from its secret, the
    gateway pinned to the cluster certificate's thumbprint."""
    from tests.telemetry.stack_outputs import StubbedStackSession, outputs_list

    secrets = moto_session.client("secretsmanager")
    for name, issued in (("cluster", sf_pki.server), ("admin", sf_pki.client)):
        secrets.create_secret(
            Name=f"telemetry-dev/service-fabric/{name}-certificate",
            SecretString=json.dumps({"certificate": issued.cert_pem, "private_key": issued.key_pem,
                                     "pfx": "cGZ4", "pfx_password": "pw"}),
        )
    stubbed = StubbedStackSession(moto_session, "Telemetry-dev-ServiceFabric", outputs_list({
        "HttpGatewayEndpoint": sf_emulator.endpoint,
        "ClusterCertificateSecret": "telemetry-dev/service-fabric/cluster-certificate",
        "AdminCertificateSecret": "telemetry-dev/service-fabric/admin-certificate",
    }))
    result = run("--node", "scale-42", session=stubbed)  # unknown: one look at the cluster, nothing changed
    assert result.returncode == drain_node.EXIT_FAILED, result.stderr
    assert f"'scale-42' is not known to the cluster at {sf_emulator.endpoint}" in one_line(result.stderr)
    assert posts(sf_emulator) == []
    stubbed.stubber.assert_no_pending_responses()


def test_without_env_is_one_usage_line(capsys):
    assert cli.main(["cluster", "drain", "--node", "scale-0"]) == EXIT_USAGE
    assert one_line(capsys.readouterr().err) == (
        "telemetry: error: the following arguments are required: --env (see telemetry cluster drain --help)")
