"""Command line: `python -m simulator run ...` and `python -m simulator merge ...`."""

from __future__ import annotations

import math
import os
import re
import secrets
import socket
import sys
from pathlib import Path

from simulator import device_certificates, payload
from simulator.config import MQTT_KEEP_ALIVE_S, MqttSettings, RunConfig, SloThresholds, mqtt_timeout_ms
from simulator.errors import SimulatorError
from simulator.flags import (
    EXIT_ERROR,
    EXIT_PASS,
    EXIT_SLO_FAILED,
    HIGH_RATE_LINGER_MS,
    KAFKA_PROCESS_RATE,
    LOW_RATE_LINGER_MS,
    LOW_RATE_PER_PROCESS,
    MQTT_CONNECTS_PER_PROCESS,
    MQTT_PROCESS_RATE,
    build_parser,
    thresholds_from,
)
from simulator.kafka_config import SASL_PASSWORD_ENV

BOOTSTRAP = re.compile(r"^[A-Za-z0-9.\-\[\]:]+:\d{1,5}(,[A-Za-z0-9.\-\[\]:]+:\d{1,5})*$")
MQTT_ENDPOINT = re.compile(r"^([A-Za-z0-9.-]+)(?::(\d{1,5}))?$")
SHARE = re.compile(r"^(\d{1,4})/(\d{1,4})$")
DEFAULTS = SloThresholds()
# AWS IoT Core quotas per connection (not adjustable): publishes per second and bytes per second.
# The simulator opens one connection per device, so these bound each device's share of --rate.
IOT_PUBLISHES_PER_S = 100
IOT_BYTES_PER_S = 512 * 1024
IOT_MAX_MESSAGE_BYTES = 128 * 1024  # AWS IoT Core's largest message payload
MQTT_PORT = 8883


def _name(value: str | None, flag: str, fallback: str) -> str:
    name = value if value is not None else fallback
    if not payload.NAME_PATTERN.match(name):
        raise SimulatorError(f"{flag} {name!r}: use 1-64 letters, digits, '.', '_' or '-'")
    return name


def _check_output(path: Path | None, flag: str, suffix: str) -> None:
    if path is None:
        return
    if path.suffix.lower() != suffix:
        raise SimulatorError(f"{flag} {path}: the file name must end in {suffix}")
    if path.is_dir():
        raise SimulatorError(f"{flag} {path} is a directory")


def _kafka_flags(args) -> None:
    """--bootstrap-servers and --topic: needed to produce, or to read the messages back."""
    mqtt = args.transport == "mqtt"
    if mqtt and not args.consume and args.bootstrap_servers is None and args.topic is None:
        return
    why = "to read the messages back (or --no-consume)" if mqtt else "with --transport kafka"
    for flag, value in (("--bootstrap-servers", args.bootstrap_servers), ("--topic", args.topic)):
        if value is None:
            raise SimulatorError(f"{flag} is required {why}")
    if not BOOTSTRAP.match(args.bootstrap_servers):
        raise SimulatorError(
            f"--bootstrap-servers {args.bootstrap_servers!r}: expected HOST:PORT[,HOST:PORT...]"
        )
    if not re.match(r"^[A-Za-z0-9._-]{1,249}$", args.topic):
        raise SimulatorError(f"--topic {args.topic!r} is not a valid Kafka topic name")


def devices_needed(rate: float, message_bytes: int) -> int:
    """The fewest devices (connections) that can carry rate within AWS IoT's per-connection
    quotas."""
    return max(
        math.ceil(rate / IOT_PUBLISHES_PER_S), math.ceil(rate * message_bytes / IOT_BYTES_PER_S)
    )


def mqtt_settings(args) -> MqttSettings | None:
    """The MQTT flags, checked against AWS IoT's limits; None for a Kafka run."""
    flags = ("--mqtt-endpoint", "--device-certificates", "--environment", "--mqtt-ca", "--mqtt-plaintext")
    given = [args.mqtt_endpoint, args.device_certificates, args.environment, args.mqtt_ca, args.mqtt_plaintext or None]
    if args.transport != "mqtt":
        for flag, value in zip(flags, given):
            if value is not None:
                raise SimulatorError(f"{flag} goes with --transport mqtt")
        return None
    for flag, value in zip(flags[:3], given[:3]):
        if value is None:
            raise SimulatorError(f"--transport mqtt needs {flag}")
    if not device_certificates.ENVIRONMENT.match(args.environment):
        raise SimulatorError(
            f"--environment {args.environment!r}: expected 1-32 letters, digits, '_' or '-' (one MQTT topic level)"
        )
    endpoint = MQTT_ENDPOINT.match(args.mqtt_endpoint)
    if not endpoint or not 0 < int(endpoint.group(2) or MQTT_PORT) < 65536:
        raise SimulatorError(f"--mqtt-endpoint {args.mqtt_endpoint!r}: expected HOST[:PORT]")
    if args.rate <= 0:
        raise SimulatorError(
            f"--transport mqtt needs a --rate: AWS IoT takes at most {IOT_PUBLISHES_PER_S} "
            "publishes/s per device"
        )
    if args.message_bytes > IOT_MAX_MESSAGE_BYTES:
        raise SimulatorError(
            f"--message-bytes {args.message_bytes} is above AWS IoT's {IOT_MAX_MESSAGE_BYTES} "
            "bytes per message"
        )
    needed = devices_needed(args.rate, args.message_bytes)
    if args.devices < needed:
        raise SimulatorError(
            f"--rate {args.rate:g} needs at least {needed} devices at AWS IoT's "
            f"{IOT_PUBLISHES_PER_S} publishes/s and {IOT_BYTES_PER_S // 1024} KiB/s per "
            f"connection; --devices is {args.devices}"
        )
    if args.mqtt_ca is not None and not args.mqtt_ca.is_file():
        raise SimulatorError(f"--mqtt-ca {args.mqtt_ca}: no such file")
    if not args.connect_rate > 0:
        raise SimulatorError(f"--connect-rate must be more than 0 connects per second, got {args.connect_rate:g}")
    if args.connect_attempts < 1:
        raise SimulatorError(f"--connect-attempts must be 1 or more, got {args.connect_attempts}")
    things = device_certificates.thing_names(args.device_certificates, args.devices)
    return MqttSettings(
        host=endpoint.group(1),
        port=int(endpoint.group(2) or MQTT_PORT),
        certificates=str(args.device_certificates.resolve()),
        things=things,
        environment=args.environment,
        ca=None if args.mqtt_ca is None else str(args.mqtt_ca.resolve()),
        plaintext=args.mqtt_plaintext,
        connect_rate=args.connect_rate,
        connect_attempts=args.connect_attempts,
    )


def default_processes(rate: float, transport: str, connect_rate: float = 0.0) -> int:
    """As few producer processes as the rate needs, at most one per core; one per core with
    --rate 0 (as fast as possible). Over MQTT also as many as the connects need: each CONNECT
    builds the device's TLS context first, about 10 ms of CPU (MQTT_CONNECTS_PER_PROCESS)."""
    cores = os.cpu_count() or 1
    if rate <= 0:
        return cores
    per_process = MQTT_PROCESS_RATE if transport == "mqtt" else KAFKA_PROCESS_RATE
    needed = math.ceil(rate / per_process)
    if transport == "mqtt":
        needed = max(needed, math.ceil(connect_rate / MQTT_CONNECTS_PER_PROCESS))
    return max(1, min(cores, needed))


def default_linger_ms(rate: float, processes: int) -> float:
    """Latency first while a process's rate needs no batching; the Java client's 5 ms above."""
    if 0 < rate / processes <= LOW_RATE_PER_PROCESS:
        return LOW_RATE_LINGER_MS
    return HIGH_RATE_LINGER_MS


def share(value: str, transport: str) -> tuple[int, int]:
    """--share K/N: host K (1-based) of N."""
    match = SHARE.match(value)
    if not match or not 1 <= int(match.group(1)) <= int(match.group(2)):
        raise SimulatorError(f"--share {value!r}: expected K/N with 1 <= K <= N, e.g. 2/3")
    host, hosts = int(match.group(1)), int(match.group(2))
    if hosts > 1 and transport == "mqtt":
        raise SimulatorError(
            "--share goes with --transport kafka: the IoT rule picks each message's partition "
            "by thing name, so an MQTT host reads every partition"
        )
    return host, hosts


def run_config(args) -> RunConfig:
    """Validates the run flags; every problem is one SimulatorError line."""
    _kafka_flags(args)
    if args.processes is None:
        connects = args.connect_rate if args.transport == "mqtt" else 0.0
        args.processes = min(default_processes(args.rate, args.transport, connects), max(args.devices, 1))
    host_share = share(args.share, args.transport)
    if args.linger_ms is None:
        args.linger_ms = default_linger_ms(args.rate, max(args.processes, 1))
    checks = [
        (args.rate >= 0, "--rate must be >= 0 (0 = as fast as possible)"),
        (args.duration > 0, "--duration must be > 0"),
        (args.warmup >= 0, "--warmup must be >= 0"),
        (
            1 <= args.processes <= payload.MAX_PROCESSES,
            f"--processes must be between 1 and {payload.MAX_PROCESSES}",
        ),
        (
            args.processes <= args.devices <= payload.MAX_DEVICES,
            f"--devices must be between --processes ({args.processes}) and {payload.MAX_DEVICES}",
        ),
        (args.message_bytes <= 1_000_000, "--message-bytes must be <= 1000000"),
        (args.linger_ms >= 0, "--linger-ms must be >= 0"),
        (args.batch_bytes > 0, "--batch-bytes must be > 0"),
        (args.progress_interval > 0, "--progress-interval must be > 0"),
        (args.drain_timeout > 0, "--drain-timeout must be > 0"),
        (args.connect_timeout > 0, "--connect-timeout must be > 0"),
        (
            args.transport != "mqtt" or mqtt_timeout_ms(args.connect_timeout) < MQTT_KEEP_ALIVE_S * 1000,
            f"--connect-timeout must be under {MQTT_KEEP_ALIVE_S} s with --transport mqtt (the devices' keep-alive)",
        ),
        (not (args.idempotence and args.acks != "all"), "--idempotence needs --acks all"),
    ]
    for ok, message in checks:
        if not ok:
            raise SimulatorError(message)
    mqtt = mqtt_settings(args)
    region = args.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if args.security_protocol == "SASL_SSL" and not region:
        raise SimulatorError("--security-protocol SASL_SSL needs --region (or $AWS_REGION)")
    if (args.security_protocol == "SASL_PLAINTEXT") != (args.sasl_username is not None):
        raise SimulatorError("--sasl-username goes with --security-protocol SASL_PLAINTEXT, and only")
    if args.security_protocol == "SASL_PLAINTEXT" and not os.environ.get(SASL_PASSWORD_ENV):
        raise SimulatorError(f"--security-protocol SASL_PLAINTEXT needs ${SASL_PASSWORD_ENV}")
    run_id = _name(args.run_id, "--run-id", secrets.token_hex(4))
    producer_id = _name(
        args.producer_id,
        "--producer-id",
        re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname().split(".")[0])[:64],
    )
    minimum = payload.minimum_message_bytes(run_id, producer_id, mqtt and list(mqtt.things))
    if args.message_bytes < minimum:
        raise SimulatorError(
            f"--message-bytes {args.message_bytes} is below the {minimum} "
            f"bytes a message of this run needs"
        )
    _check_output(args.report, "--report", ".json")
    _check_output(args.plot, "--plot", ".png")
    return RunConfig(
        bootstrap_servers=args.bootstrap_servers,
        topic=args.topic,
        rate=args.rate,
        duration_s=args.duration,
        warmup_s=args.warmup,
        processes=args.processes,
        devices=args.devices,
        message_bytes=args.message_bytes,
        acks=args.acks,
        idempotence=args.acks == "all" if args.idempotence is None else args.idempotence,
        linger_ms=args.linger_ms,
        batch_bytes=args.batch_bytes,
        compression=args.compression,
        security_protocol=args.security_protocol,
        region=region,
        run_id=run_id,
        producer_id=producer_id,
        consume=args.consume,
        progress_interval_s=args.progress_interval,
        drain_timeout_s=args.drain_timeout,
        connect_timeout_s=args.connect_timeout,
        sasl_username=args.sasl_username,
        slo=thresholds_from(args, DEFAULTS),
        transport=args.transport,
        mqtt=mqtt,
        share=host_share,
    )


def _finish(report: dict, args) -> int:
    from simulator.report import format_summary, write_report

    write_report(report, args.report)
    if args.plot:
        from simulator.plot import write_percentile_plot

        write_percentile_plot(report, args.plot)
    print(format_summary(report))
    print(f"report: {args.report}" + (f", plot: {args.plot}" if args.plot else ""))
    return EXIT_PASS if report["slo"]["passed"] else EXIT_SLO_FAILED


def _run(args) -> int:
    config = run_config(args)
    from simulator.host_run import run_host
    from simulator.report import host_report

    target = (
        f"{len(config.mqtt.things)} devices at MQTT {config.mqtt.endpoint}"
        if config.mqtt
        else f"{config.topic} at {config.bootstrap_servers}"
    )
    print(
        f"run {config.run_id}: {config.processes} process(es) on {config.producer_id} -> "
        f"{target}, "
        f"{'max rate' if config.rate == 0 else f'{config.rate:,.0f} msg/s'}, "
        f"{config.warmup_s:g} s warmup + {config.duration_s:g} s",
        file=sys.stderr,
    )
    return _finish(host_report(run_host(config)), args)


def _merge(args) -> int:
    from simulator.report import merge_reports, read_report

    for path in (args.report, args.plot):
        _check_output(
            path,
            "--plot" if path is args.plot else "--report",
            ".png" if path is args.plot else ".json",
        )
    reports = [read_report(path) for path in args.reports]
    from simulator.slo import thresholds_of

    return _finish(merge_reports(reports, thresholds_from(args, thresholds_of(reports[0]))), args)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _run(args) if args.command == "run" else _merge(args)
    except SimulatorError as error:
        print(f"simulator: {error}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("simulator: interrupted; no report written", file=sys.stderr)
        return EXIT_ERROR
