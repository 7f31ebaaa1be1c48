"""REST calls and time per drain and per join against the Service Fabric emulator.

    .venv/bin/python -m tests.bench_membership [--poll-interval 15] [--report FILE]

A drain runs `telemetry cluster drain` over REST, its membership lock in moto's DynamoDB (not
counted); a join is AddNode.ps1 (the emulator's
machine side) followed by the same steps the scale-out state machine runs (wait for Up, the
registration upgrade, wait for it). Time is the emulator's logical clock, so "seconds" is the
number of poll waits times the poll interval (what the state machine's Wait states would take
at the same pacing), plus the wall time the calls themselves took here.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "lambdas")]

from node_lifecycle import (  # noqa: E402
    poll_configuration_upgrade,
    start_configuration_registration,
    wait_until_done,
)
from sf_rest import NodeStatus, ServiceFabricClient  # noqa: E402

from telemetry import cli  # noqa: E402
from telemetry.commands.cluster import drain as drain_node  # noqa: E402
from tests.sf_emulator import SfEmulator, make_pki, standard_cluster  # noqa: E402


def calls(emulator: SfEmulator) -> dict[str, int]:
    counted = Counter(r.method for r in emulator.requests)
    return {"GET": counted["GET"], "POST": counted["POST"], "total": sum(counted.values())}


@contextlib.contextmanager
def membership_lock_table():
    """dev's membership lock table in moto, which the drain takes its lock in."""
    import os

    import boto3
    from moto import mock_aws
    from stacks.config import load_environment, read_environments
    from stacks.naming import membership_lock_table_name

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(name, "testing")
    with mock_aws():
        config = load_environment(read_environments(), "dev")
        boto3.client("dynamodb", region_name=config.region).create_table(
            TableName=membership_lock_table_name(config), KeySchema=[{"AttributeName": "LockName", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "LockName", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST")
        yield


def bench_drain(pki: Any, interval: float) -> dict[str, Any]:
    cluster = standard_cluster()
    waits: list[float] = []
    with SfEmulator(cluster, pki=pki) as emulator, membership_lock_table():
        started = time.perf_counter()
        real_sleep = drain_node.time.sleep
        drain_node.time.sleep = lambda seconds: waits.append(seconds)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                code = cli.main(
                    [
                        "cluster", "drain", "--env", "dev", "--endpoint", emulator.endpoint, "--node", "scale-0",
                        "--client-cert", pki.client.cert_path, "--client-key", pki.client.key_path,
                        "--ca-bundle", pki.ca_path, "--poll-interval", str(interval),
                    ]
                )
        finally:
            drain_node.time.sleep = real_sleep
        wall = time.perf_counter() - started
        if code != 0 or cluster.node("scale-0").status != "Removed":
            raise SystemExit(f"the drain did not complete (exit {code})")
        return {"rest_calls": calls(emulator), "polls_waited": len(waits),
                "seconds_at_interval": sum(waits), "wall_seconds": round(wall, 3)}


def bench_join(pki: Any, interval: float) -> dict[str, Any]:
    cluster = standard_cluster()
    waits: list[float] = []
    with SfEmulator(cluster, pki=pki) as emulator:
        client = ServiceFabricClient(
            emulator.endpoint,
            client_certificate=(pki.client.cert_path, pki.client.key_path),
            ca_bundle=pki.ca_path,
        )
        started = time.perf_counter()
        cluster.add_node("scale-9", ip="10.0.2.19")  # AddNode.ps1 on the machine

        def wait(poll: Any) -> None:
            wait_until_done(poll, what="the join", timeout_seconds=3600,
                            interval_seconds=interval, sleep=waits.append, clock=lambda: sum(waits))

        def node_up() -> Any:
            from node_lifecycle import WaitStatus
            node = client.get_node_info("scale-9")
            return WaitStatus(node is not None and node.status == NodeStatus.UP, "")

        wait(node_up)
        change = start_configuration_registration(client, "scale-9", now=sum(waits)).to_dict()
        wait(lambda: poll_configuration_upgrade(client, change, now=sum(waits)))
        wall = time.perf_counter() - started
        if "scale-9" not in cluster.uos_nodes:
            raise SystemExit("the join was not registered")
        return {"rest_calls": calls(emulator), "polls_waited": len(waits),
                "seconds_at_interval": sum(waits), "wall_seconds": round(wall, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--poll-interval", type=float, default=15.0, metavar="SECONDS")
    parser.add_argument("--report", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        pki = make_pki(Path(folder))
        figures = {"poll_interval_seconds": args.poll_interval,
                   "drain": bench_drain(pki, args.poll_interval),
                   "join": bench_join(pki, args.poll_interval)}
    for name in ("drain", "join"):
        row = figures[name]
        rest = row["rest_calls"]
        print(f"{name}: {rest['total']} REST calls ({rest['GET']} GET, {rest['POST']} POST), "
              f"{row['polls_waited']} poll waits = {row['seconds_at_interval']:.0f} s at "
              f"{args.poll_interval:g} s, {row['wall_seconds']:.2f} s of calls")
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
