"""Device populations against a real mosquitto over TLS with client certificates: many devices at a
low rate, connects at a pace, a refused connect retried with backoff, and a broker restart in the
middle of a run after which every device is back and every message is accounted for.

What mosquitto stands in for, and where it differs from AWS IoT Core: it takes TLS with client
certificates and QoS 1 as IoT Core does (AWS IoT Developer Guide, "MQTT"), but it does not
throttle CONNECTs; the pace is the simulator's own, measured from the CONNECTs it started.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from devtools import local_mosquitto

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def population_pki(tmp_path_factory):
    """2,000 devices' certificates (EC keys: a second to issue them all)."""
    return local_mosquitto.make_pki(tmp_path_factory.mktemp("population-pki"), [f"pop-{i:05d}" for i in range(2000)])


@pytest.fixture
def broker(population_pki, tmp_path):
    broker = local_mosquitto.start_mosquitto(tmp_path / "broker", population_pki, environment="dev", debug=False)
    yield broker
    broker.stop()


def run_flags(broker, report: Path, *, devices: int, rate: float, duration: float, **more) -> list[str]:
    flags = {
        "--transport": "mqtt", "--mqtt-endpoint": broker.endpoint, "--device-certificates": broker.pki.devices,
        "--environment": broker.environment, "--mqtt-ca": broker.pki.ca, "--devices": devices, "--rate": rate, "--duration": duration, "--warmup": 0,
        "--drain-timeout": 30, "--connect-timeout": 5, "--slo-min-rate": 0, "--report": report, **more,
    }  # fmt: skip
    return [sys.executable, "-m", "simulator", "run", *[str(x) for pair in flags.items() for x in pair], "--no-consume"]


def simulator_process() -> dict:
    """How the tests start `python -m simulator`: from the checkout, text output."""
    return {"cwd": REPO, "env": {**os.environ, "PYTHONPATH": str(REPO)}, "text": True}


def simulate(command: list[str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(command, **simulator_process(), capture_output=True, timeout=timeout, check=False)


def launch(command: list[str]) -> subprocess.Popen:
    """The simulator started, its output read while it runs."""
    return subprocess.Popen(command, **simulator_process(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def connections(report: Path) -> tuple[dict, dict]:
    body = json.loads(report.read_text())
    return body, body["connections"]


def test_two_thousand_tls_devices_at_a_low_rate_every_message_acknowledged(broker, tmp_path):
    """Each device publishes once every 4 s, phases spread by the schedule's round robin; two
    processes share the connects. Exit 1 is the SLO's missing end-to-end figures (--no-consume)."""
    report = tmp_path / "r.json"
    # 100 CONNECTs/s: what mosquitto takes here beside the simulator on 2 cores without a failed
    # CONNECT. At 400/s its TLS handshakes fall behind: before the connect window
    # (simulator/connecting.py) 35 of 2,000 devices had connected after 35 s; with it all 2,000
    # connect, some after a retry, which this test counts as a failure. 400/s only ever ran at
    # about 100/s while each device's TLS context took 20 ms of CPU
    # (_no_trust_store_variables_that_name_the_defaults in tests/conftest.py).
    result = simulate(run_flags(broker, report, devices=2000, rate=500, duration=4,
                                **{"--processes": 2, "--connect-rate": 100}))  # fmt: skip
    assert result.returncode in (0, 1), result.stderr
    body, made = connections(report)
    assert (made["devices"], made["connected"], made["connect_failures"]) == (2000, 2000, 0)
    assert body["sent"] == body["acked"] == 2000 and body["delivery_errors"] == 0  # each device once
    assert made["rss_bytes_per_connection"] > 0
    assert "[connecting" in result.stderr  # the progress line shows connections while they open


def test_connects_keep_to_the_asked_pace(broker, tmp_path):
    """40 CONNECTs/s asked, far below what one process can start: no wall-clock second holds more
    than 41 (a token bucket that keeps one connect of credit), and the phase lasts as long as the
    pace says."""
    report = tmp_path / "r.json"
    result = simulate(run_flags(broker, report, devices=200, rate=20, duration=1, **{"--connect-rate": 40}))
    assert result.returncode in (0, 1), result.stderr
    _, made = connections(report)
    assert made["connected"] == 200
    assert made["connects_per_s_max"] <= 41
    assert made["connect_s"] >= 199 / 40 - 1


def test_a_refused_connect_is_retried_with_backoff_until_the_broker_answers(population_pki, tmp_path):
    """The broker is down when the devices first connect (connection refused) and comes up a
    second after the connect phase has begun: the refused devices are retried after their
    backoff and all connect."""
    broker = local_mosquitto.start_mosquitto(tmp_path / "broker", population_pki, environment="dev", debug=False)
    broker.stop()
    report = tmp_path / "r.json"
    command = run_flags(broker, report, devices=20, rate=10, duration=1,
                        **{"--connect-attempts": 8, "--progress-interval": 0.2})  # fmt: skip
    # Timed from the simulator's first progress line of the connect phase, not from its launch,
    # which can take longer than any fixed delay on a loaded machine (the CONNECTs then found
    # the broker up and none was refused). A second on, all 20 first CONNECTs (due within 0.2 s
    # at the default pace) have been refused.
    simulator = launch(command)
    restarted = threading.Timer(1.0, broker.restart, kwargs={"down_s": 0})
    try:
        before = []
        for line in simulator.stderr:
            before.append(line)
            if line.startswith("[connecting"):
                restarted.start()
                break
        out, err = simulator.communicate(timeout=240)
    finally:
        simulator.kill()
        if restarted.ident is not None:  # started
            restarted.join()
        broker.stop()
    result = subprocess.CompletedProcess(command, simulator.returncode, out, "".join(before) + err)
    assert result.returncode in (0, 1), result.stderr
    body, made = connections(report)
    assert made["connected"] == 20 and made["connect_failures"] >= 20
    assert body["acked"] == body["sent"] == 10


def test_every_device_survives_a_broker_restart_and_every_message_is_accounted_for(broker, tmp_path):
    """mosquitto restarts three seconds into the run (down one second): every connection is lost
    and reopened by the client (the run lasts long enough for the CRT's doubled waits), publishes made meanwhile are delivered after the reconnect or
    counted as delivery errors, and acked + delivery errors = sent exactly."""
    report = tmp_path / "r.json"
    command = run_flags(broker, report, devices=500, rate=100, duration=10,
                        **{"--processes": 1, "--connect-rate": 400, "--progress-interval": 1})  # fmt: skip
    run = launch(command)
    try:
        for line in run.stderr:
            if re.match(r"\[\s+3\.\d+s\] sent", line):
                broker.restart(down_s=1.0)
                break
        run.communicate(timeout=180)
    finally:
        if run.poll() is None:
            run.kill()
    body, made = connections(report)
    assert made["interruptions"] == 500 and made["reconnects"] == 500
    assert body["sent"] == 1000
    assert body["acked"] + body["delivery_errors"] == body["sent"]
    assert body["acked"] > 900  # what was published while down went out after the reconnect
