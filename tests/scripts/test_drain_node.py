"""scripts/drain_node.py end to end: run as an operator would, against the HTTPS emulator."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import boto3
import pytest
from moto import mock_aws
from sf_rest.cluster_config import node_names, nodes_to_be_removed

from scripts import drain_node
from tests.sf_emulator import make_pki

pytestmark = pytest.mark.integration  # starts the HTTPS emulator and subprocesses

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "drain_node.py"
INSTANCE = "i-0123456789abcdef0"


@pytest.fixture
def gateway(sf_emulator, sf_pki) -> list[str]:
    """The flags that reach the emulator over mutual TLS."""
    return [
        "--endpoint",
        sf_emulator.endpoint,
        "--client-cert",
        sf_pki.client.cert_path,
        "--client-key",
        sf_pki.client.key_path,
        "--ca-bundle",
        sf_pki.ca_path,
    ]


@pytest.fixture
def drain(tmp_path) -> Callable[..., subprocess.CompletedProcess]:
    """Runs the script in a fresh interpreter, from a directory outside the repository."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(SCRIPT), *args],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env=env,
        )

    return run


def posts(emulator) -> list[str]:
    return [r.path for r in emulator.requests if r.method == "POST"]


def one_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def operator_stops_the_host(cluster, name: str, when: Callable[[], bool]) -> threading.Thread:
    """Stands in for whoever stops FabricHostSvc on the machine, once `when()` holds."""

    def watch() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if when():
                cluster.stop_host(name)
                return
            time.sleep(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def seen_disabled(cluster, emulator, name: str, reads: int = 2) -> Callable[[], bool]:
    """True once the drain has read the Disabled node `reads` more times: by then it has
    decided that the operator must stop the host (and said so)."""
    reads_when_disabled: list[int] = []

    def check() -> bool:
        count = len(emulator.requests_to("GET", f"/Nodes/{name}"))
        if not reads_when_disabled:
            if cluster.node(name).status != "Disabled":
                return False
            reads_when_disabled.append(count)
        return count >= reads_when_disabled[0] + reads

    return check


def test_a_drain_takes_the_node_out_and_a_second_run_finds_nothing_to_do(
    drain,
    gateway,
    sf_cluster,
    sf_emulator,
):
    disabled = seen_disabled(sf_cluster, sf_emulator, "scale-0")
    operator = operator_stops_the_host(sf_cluster, "scale-0", disabled)

    first = drain(*gateway, "--node", "scale-0", "--poll-interval", "0.05", "--timeout", "30")
    operator.join(timeout=5)
    sf_emulator.clear_log()
    second = drain(*gateway, "--node", "scale-0", "--poll-interval", "0.05")

    assert (first.returncode, first.stderr) == (0, ""), first.stdout
    out = first.stdout
    assert "deactivating scale-0 (intent RemoveNode)" in out
    assert "  scale-0: Disabling (SafetyCheckInProgress, intent RemoveNode)" in out
    assert "stop FabricHostSvc on its machine (no --instance-id given)" in out
    assert "  scale-0: Down" in out
    assert "removed the node state of scale-0" in out
    assert "configuration upgrade to version 1.0.1" in out
    assert "done: scale-0 is out of the cluster (gone from the node list)" in out
    assert "scale-0" not in sf_cluster.nodes
    assert "scale-0" not in node_names(sf_cluster.config)
    assert nodes_to_be_removed(sf_cluster.config) == ["scale-0"]
    assert second.returncode == 0
    assert "already removed (listed in NodesToBeRemoved)" in second.stdout
    assert posts(sf_emulator) == []


def test_a_dry_run_shows_the_remaining_steps_and_writes_nothing(
    drain,
    gateway,
    sf_cluster,
    sf_emulator,
):
    fresh = drain(*gateway, "--node", "scale-0", "--instance-id", INSTANCE, "--dry-run")
    sf_cluster.nodes["scale-1"].status = "Down"  # its machine died
    halfway = drain(*gateway, "--node", "scale-1", "--dry-run")

    assert (fresh.returncode, fresh.stderr) == (0, "")
    assert fresh.stdout.splitlines() == [
        "scale-0: Up; in the cluster configuration (version 1.0.0)",
        "dry run: nothing was changed. A drain would:",
        "  - deactivate scale-0 with intent RemoveNode (RemoveData if refused)",
        "  - wait for scale-0 to be Disabled with its deactivation Completed",
        f"  - stop FabricHostSvc on {INSTANCE} over SSM Run Command, wait for Down",
        "  - RemoveNodeState scale-0",
        "  - configuration upgrade 1.0.0 -> 1.0.1: scale-0 out of nodes, into NodesToBeRemoved",
    ]
    assert halfway.returncode == 0
    assert halfway.stdout.splitlines()[2:] == [
        "  - RemoveNodeState scale-1",
        "  - configuration upgrade 1.0.0 -> 1.0.1: scale-1 out of nodes, into NodesToBeRemoved",
    ]
    assert posts(sf_emulator) == []
    assert sf_cluster.node("scale-0").status == "Up"


def test_a_seed_node_is_refused_with_one_line_and_nothing_changed(
    drain,
    gateway,
    sf_emulator,
):
    result = drain(*gateway, "--node", "seed-1")

    assert result.returncode == drain_node.EXIT_REFUSED
    assert one_line(result.stderr).startswith("drain_node.py: refused: seed-1 is a seed node")
    assert posts(sf_emulator) == []


def test_an_unknown_node_is_one_line(drain, gateway, sf_emulator):
    result = drain(*gateway, "--node", "scale-42")

    assert result.returncode == drain_node.EXIT_FAILED
    assert "'scale-42' is not known to the cluster" in one_line(result.stderr)
    assert posts(sf_emulator) == []


def test_a_drain_that_runs_out_of_time_says_where_it_stopped(
    drain,
    gateway,
    sf_cluster,
):
    sf_cluster.set_stuck_in_safety_check("scale-0")

    result = drain(*gateway, "--node", "scale-0", "--timeout", "1", "--poll-interval", "0.1")

    assert result.returncode == drain_node.EXIT_TIMED_OUT
    line = one_line(result.stderr)
    assert line.startswith("drain_node.py: timed out: --timeout 1 s passed waiting for scale-0")
    assert "SafetyCheckInProgress" in line
    assert sf_cluster.node("scale-0").status == "Disabling"  # and a re-run picks up from here


def test_a_gateway_certificate_from_another_ca_is_one_line(
    drain,
    sf_emulator,
    sf_pki,
    tmp_path,
):
    stranger = make_pki(tmp_path / "other")

    result = drain(
        "--endpoint",
        sf_emulator.endpoint,
        "--node",
        "scale-0",
        "--ca-bundle",
        stranger.ca_path,
        "--client-cert",
        sf_pki.client.cert_path,
        "--client-key",
        sf_pki.client.key_path,
    )

    assert result.returncode == drain_node.EXIT_FAILED
    assert "TLS with https://127.0.0.1" in one_line(result.stderr)
    assert sf_emulator.requests == []


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--ca-bundle", "{ca}", "--insecure"],
            "--insecure: not allowed with argument --ca-bundle",
        ),
        (["--client-cert", "{cert}"], "--client-cert and --client-key go together"),
        (["--insecure", "--timeout", "-5"], "must be positive"),
        ([], "needs --ca-bundle PEM or --insecure"),
    ],
)
def test_bad_flags_are_one_line(drain, sf_emulator, sf_pki, flags, message):
    values = {"ca": sf_pki.ca_path, "cert": sf_pki.client.cert_path}
    flags = [flag.format(**values) for flag in flags]

    result = drain("--endpoint", sf_emulator.endpoint, "--node", "scale-0", *flags)

    assert result.returncode == drain_node.EXIT_USAGE
    assert message in one_line(result.stderr)
    assert sf_emulator.requests == []


def test_help_describes_the_fixed_interface(drain):
    result = drain("--help")

    assert result.returncode == 0
    for flag in (
        "--endpoint",
        "--node",
        "--client-cert",
        "--client-key",
        "--ca-bundle",
        "--insecure",
        "--instance-id",
        "--timeout",
        "--poll-interval",
        "--dry-run",
    ):
        assert flag in result.stdout
    assert "exit status: 0 the node is out of the cluster" in result.stdout


# -- with --instance-id: Fabric stopped over SSM (moto), in-process ------------------------


def test_with_an_instance_id_the_host_is_stopped_over_ssm(
    gateway,
    sf_cluster,
    monkeypatch,
    capsys,
):
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        ssm = boto3.client("ssm", region_name="eu-west-1")
        sent = lambda: bool(ssm.list_commands(InstanceId=INSTANCE)["Commands"])
        machine = operator_stops_the_host(sf_cluster, "scale-0", sent)  # moto runs no PowerShell

        code = drain_node.main(
            [
                *gateway,
                "--node",
                "scale-0",
                "--instance-id",
                INSTANCE,
                "--region",
                "eu-west-1",
                "--poll-interval",
                "0.05",
                "--timeout",
                "30",
            ]
        )
        machine.join(timeout=5)
        (command,) = ssm.list_commands(InstanceId=INSTANCE)["Commands"]

    out, err = capsys.readouterr()
    assert (code, err) == (0, ""), out
    assert f"stopping FabricHostSvc on {INSTANCE} over SSM (command {command['CommandId']})" in out
    assert command["DocumentName"] == "AWS-RunPowerShellScript"
    assert "scale-0" not in sf_cluster.nodes
    assert "scale-0" not in node_names(sf_cluster.config)
