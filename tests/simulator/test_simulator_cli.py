import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GOOD = [
    "run",
    "--bootstrap-servers",
    "127.0.0.1:9",
    "--topic",
    "t",
    "--rate",
    "10",
    "--duration",
    "1",
    "--report",
    "out.json",
]


def simulator(*args, cwd=None, timeout=60):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "simulator", *args],
        cwd=cwd or REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def with_flag(flag, value):
    args = list(GOOD)
    if flag in args:
        args[args.index(flag) + 1] = value
    else:
        args += [flag, value]
    return args


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["run", "--topic", "t"], "required"),
        (with_flag("--rate", "-5"), "--rate must be >= 0"),
        (with_flag("--rate", "fast"), "invalid float value"),
        (with_flag("--duration", "0"), "--duration must be > 0"),
        (with_flag("--acks", "0"), "invalid choice"),
        (with_flag("--bootstrap-servers", "localhost"), "expected HOST:PORT"),
        (with_flag("--message-bytes", "100"), "below the"),
        (with_flag("--processes", "0"), "--processes must be between"),
        (with_flag("--devices", "1") + ["--processes", "2"], "--devices must be between"),
        (with_flag("--acks", "1") + ["--idempotence"], "--idempotence needs --acks all"),
        (with_flag("--security-protocol", "SASL_SSL"), "needs --region"),
        (with_flag("--producer-id", "bad name!"), "--producer-id"),
        (with_flag("--report", "out.txt"), "must end in .json"),
        (with_flag("--plot", "out.jpg"), "must end in .png"),
        (with_flag("--share", "0/3"), "--share '0/3': expected K/N with 1 <= K <= N"),
        (with_flag("--share", "4/3"), "--share '4/3': expected K/N with 1 <= K <= N"),
        (with_flag("--share", "half"), "--share 'half': expected K/N"),
        (["merge", "missing.json", "--report", "m.json"], "cannot read report"),
        (["launch"], "invalid choice"),
    ],
)
def test_bad_input_is_one_line_on_stderr_and_exit_2(args, fragment, tmp_path):
    result = simulator(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert fragment in lines[0]
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_sasl_ssl_region_may_come_from_the_environment():
    # Passes validation (then fails to reach the fake broker): the region error is gone.
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from simulator.cli import build_parser, run_config;"
            "args = build_parser().parse_args("
            + repr(with_flag("--security-protocol", "SASL_SSL"))
            + "); print(run_config(args).region)",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"AWS_REGION": "eu-west-1", "PATH": ""},
        check=False,
    )
    assert result.stdout.strip() == "eu-west-1", result.stderr


def test_help_documents_the_fixed_interface_and_exit_codes():
    result = simulator("run", "--help")
    assert result.returncode == 0
    for flag in (
        "--bootstrap-servers",
        "--topic",
        "--rate",
        "--duration",
        "--processes",
        "--devices",
        "--message-bytes",
        "--warmup",
        "--acks",
        "--security-protocol",
        "--region",
        "--report",
        "--plot",
        "--slo-p99-ms",
    ):
        assert flag in result.stdout
    assert "exit codes: 0" in " ".join(result.stdout.split())
    # Each option names its default once, and never as None.
    assert "(default: None)" not in result.stdout
    options = re.split(r"\n  (?=-)", result.stdout)
    assert not [o for o in options if o.count("(default") > 1], "a default said twice"


def test_merge_of_a_report_that_is_not_json_is_one_line(tmp_path):
    (tmp_path / "host.json").write_text(json.dumps({"version": 1}))
    result = simulator("merge", "host.json", "--report", "m.json", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "simulator: report host.json is not a simulator report (missing 'hosts')"
    )


MQTT = [
    "run", "--transport", "mqtt", "--mqtt-endpoint", "127.0.0.1:9", "--environment", "dev", "--no-consume",
    "--rate", "10", "--duration", "1", "--devices", "2", "--processes", "1",
    "--report", "out.json",
]  # fmt: skip


def _certificates(folder: Path, things, keys=True) -> Path:
    folder.mkdir()
    for thing in things:
        (folder / f"{thing}.cert.pem").write_text("not parsed before connecting")
        if keys:
            (folder / f"{thing}.key.pem").write_text("")
    return folder


@pytest.mark.parametrize(
    "args,certificates,fragment",
    [
        (["--rate", "201"], ["a", "b"], "--rate 201 needs at least 3 devices at AWS IoT's 100 "
         "publishes/s and 512 KiB/s per connection; --devices is 2"),
        (["--rate", "150", "--message-bytes", "100000"], ["a", "b"], "needs at least 29 devices"),
        (["--rate", "0"], ["a", "b"], "--transport mqtt needs a --rate"),
        (["--message-bytes", "200000"], ["a", "b"], "above AWS IoT's 131072 bytes"),
        ([], ["a"], "holds 1 device certificate(s) (*.cert.pem); --devices 2 needs 2"),
        ([], None, "no such directory"),
        (["--mqtt-endpoint", "host:port"], ["a", "b"], "expected HOST[:PORT]"),
        (["--mqtt-ca", "missing.pem"], ["a", "b"], "--mqtt-ca missing.pem: no such file"),
        ([], ["a", "b b"], "'b b' is not an AWS IoT thing name"),
        (["--connect-timeout", "60"], ["a", "b"],
         "--connect-timeout must be under 60 s with --transport mqtt (the devices' keep-alive)"),
        (["--connect-timeout", "59.9995"], ["a", "b"], "--connect-timeout must be under 60 s"),  # 60,000 ms
    ],
)
def test_bad_mqtt_input_is_one_line_and_exit_2(args, certificates, fragment, tmp_path):
    folder = tmp_path / "certs"
    if certificates is not None:
        _certificates(folder, certificates)
    # argparse keeps the last value of a repeated flag: args override MQTT's.
    result = simulator(*MQTT, "--device-certificates", str(folder), *args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_a_device_certificate_without_its_key_is_one_line(tmp_path):
    folder = _certificates(tmp_path / "certs", ["a", "b"], keys=False)
    result = simulator(*MQTT, "--device-certificates", str(folder), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "simulator: --device-certificates: a.cert.pem has no private key a.key.pem"
    )


KAFKA_FLAGS = ("--bootstrap-servers", "127.0.0.1:9", "--topic", "t")
WITHOUT_KAFKA = [a for a in GOOD if a not in KAFKA_FLAGS]


@pytest.mark.parametrize(
    "args,fragment",
    [
        (GOOD + ["--mqtt-endpoint", "h:8883"], "--mqtt-endpoint goes with --transport mqtt"),
        (WITHOUT_KAFKA, "--bootstrap-servers is required with --transport kafka"),
        (WITHOUT_KAFKA + ["--transport", "mqtt", "--no-consume"], "needs --mqtt-endpoint"),
        (
            WITHOUT_KAFKA + ["--transport", "mqtt", "--bootstrap-servers", "h:1"],
            "--topic is required to read the messages back (or --no-consume)",
        ),
    ],
)
def test_transport_flags_go_together(args, fragment, tmp_path):
    result = simulator(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and fragment in result.stderr


@pytest.mark.parametrize(
    "rate,transport,cores,expected",
    [
        (5000, "kafka", 2, 1),  # one process until the rate needs more
        (100_000, "kafka", 2, 1),
        (100_001, "kafka", 2, 2),
        (500_000, "kafka", 2, 2),  # never more than one per core
        (500_000, "kafka", 16, 5),
        (0, "kafka", 4, 4),  # as fast as possible: every core
        (4000, "mqtt", 8, 1),
        (9225, "mqtt", 8, 2),
    ],
)
def test_the_default_process_count_follows_the_rate(rate, transport, cores, expected, monkeypatch):
    from simulator import cli

    monkeypatch.setattr(cli.os, "cpu_count", lambda: cores)
    assert cli.default_processes(rate, transport) == expected


def test_share_goes_with_the_kafka_transport_only():
    from simulator import cli
    from simulator.errors import SimulatorError

    assert cli.share("2/3", "kafka") == (2, 3)
    assert cli.share("1/1", "mqtt") == (1, 1)
    with pytest.raises(SimulatorError, match="--share goes with --transport kafka"):
        cli.share("1/2", "mqtt")


@pytest.mark.parametrize(
    "rate,processes,expected",
    [(5000, 1, 1.0), (10_000, 1, 1.0), (10_001, 1, 5.0), (20_000, 2, 1.0), (73_800, 1, 5.0),
     (0, 2, 5.0)],
)
def test_the_default_linger_follows_each_process_s_rate(rate, processes, expected):
    from simulator import cli

    assert cli.default_linger_ms(rate, processes) == expected
