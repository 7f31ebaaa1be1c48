"""The command line's flags: `run` with the fixed interface the fleet calls, and `merge`."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from simulator.config import SloThresholds

EXIT_PASS, EXIT_SLO_FAILED, EXIT_ERROR = 0, 1, 2
# What one producer process sends on schedule while its publish delay stays well under a
# millisecond, on a 2-core machine that also runs the consumer (devtools/bench_simulator.py
# measures it): the default --processes follows the rate from these.
KAFKA_PROCESS_RATE = 100_000
MQTT_PROCESS_RATE = 5_000
# CONNECTs one MQTT producer process starts per second: each builds its device's TLS context
# first, 10-23 ms of CPU (awscrt ClientTlsContext with a CA file / the system trust store).
MQTT_CONNECTS_PER_PROCESS = 80
# The default linger follows the rate too (measured on the local broker, 2 cores, e2e p99):
# at 5,000 msg/s linger 1 ms gave 7.4 ms where 0 gave 12-28 ms and 5 gave 8.5 ms; at 73,800 msg/s
# linger 5 gave 13.9 ms where 1 gave 124 ms and 0 gave 280 ms (one request per few messages).
LOW_RATE_PER_PROCESS = 10_000
LOW_RATE_LINGER_MS = 1.0
HIGH_RATE_LINGER_MS = 5.0
# MQTT connects: a fifth of AWS IoT Core's default 500 CONNECTs/s per account per host, so five
# hosts fit the default quota (telemetry simulate splits the quota over the fleet's hosts).
DEFAULT_CONNECT_RATE = 100.0
DEFAULT_CONNECT_ATTEMPTS = 6
EPILOG = (
    "exit codes: 0 the SLO passed; 1 the run completed but the SLO failed; 2 bad input, "
    "an unreachable broker, a missing topic or another error (one line on stderr, "
    "no report). Progress goes to stderr, the summary and verdict to stdout."
)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line."""

    def error(self, message: str):
        self.exit(EXIT_ERROR, f"{self.prog}: {message} (see --help)\n")


def add_slo_flags(parser: argparse.ArgumentParser, defaults: SloThresholds | None) -> None:
    """--slo-* flags; without defaults each threshold not given comes from the reports."""
    group = parser.add_argument_group(
        "SLO thresholds" + ("" if defaults else " (default: those of the first report)")
    )

    def default(name):
        return getattr(defaults, name) if defaults else None

    said = " (default: %(default)s)" if defaults else ""

    group.add_argument(
        "--slo-min-rate",
        type=float,
        default=default("min_rate_msgs_per_s"),
        metavar="MSGS_PER_S",
        help="minimum throughput" + said,
    )
    group.add_argument(
        "--slo-p99-ms",
        type=float,
        default=default("max_p99_ms"),
        metavar="MS",
        help="maximum end-to-end p99" + said,
    )
    group.add_argument(
        "--slo-max-ms",
        type=float,
        default=default("max_latency_ms"),
        metavar="MS",
        help="maximum end-to-end latency" + said,
    )
    group.add_argument(
        "--slo-max-lost",
        type=int,
        default=default("max_lost"),
        metavar="N",
        help="most messages acked but never received" + said,
    )
    group.add_argument(
        "--slo-max-delivery-errors",
        type=int,
        default=default("max_delivery_errors"),
        metavar="N",
        help="most messages the broker never acked" + said,
    )


class _DefaultsFormatter(argparse.HelpFormatter):
    """Names an option's default once: only when it has one, and only if its help does not
    already say it (argparse's ArgumentDefaultsHelpFormatter prints "(default: None)" too)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if not action.option_strings or "default" in text or action.default in (None, False, argparse.SUPPRESS):
            return text
        return f"{text} (default: %(default)s)"


def given_thresholds(args: argparse.Namespace) -> dict[str, float]:
    """The SLO thresholds given on the command line, by SloThresholds field."""
    given = {
        "min_rate_msgs_per_s": args.slo_min_rate,
        "max_p99_ms": args.slo_p99_ms,
        "max_latency_ms": args.slo_max_ms,
        "max_lost": args.slo_max_lost,
        "max_delivery_errors": args.slo_max_delivery_errors,
    }
    return {key: value for key, value in given.items() if value is not None}


def thresholds_from(args: argparse.Namespace, base: SloThresholds) -> SloThresholds:
    """base, with the thresholds given on the command line."""
    return dataclasses.replace(base, **given_thresholds(args))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m simulator",
        description="Telemetry simulator: open-loop Kafka load, end-to-end latency "
        "from intended send times, loss accounting.",
        epilog=EPILOG,
    )
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )
    run = commands.add_parser(
        "run",
        help="drive load from this host and report",
        epilog=EPILOG,
        formatter_class=_DefaultsFormatter,
    )
    run.add_argument(
        "--bootstrap-servers",
        metavar="HOST:PORT",
        help="Kafka to produce to (--transport kafka) or to read back from (required unless "
        "--transport mqtt --no-consume)",
    )
    run.add_argument("--topic", metavar="NAME", help="the Kafka topic (with --bootstrap-servers)")
    run.add_argument(
        "--transport",
        choices=("kafka", "mqtt"),
        default="kafka",
        help="kafka: produce to the topic directly; mqtt: publish as AWS IoT devices, one "
        "MQTT/TLS connection per device, QoS 1",
    )
    run.add_argument(
        "--rate",
        required=True,
        type=float,
        metavar="MSGS_PER_S",
        help="messages per second from this host; 0 = as fast as possible",
    )
    run.add_argument(
        "--duration",
        required=True,
        type=float,
        metavar="SECONDS",
        help="measured period, after the warmup",
    )
    run.add_argument(
        "--processes",
        type=int,
        default=None,
        metavar="N",
        help="producer processes, one client each (default: as few as the rate needs: one per "
        f"{KAFKA_PROCESS_RATE:,} msg/s over Kafka, {MQTT_PROCESS_RATE:,} over MQTT, at most "
        "one per core; one per core with --rate 0). Every process more than the rate needs "
        "adds wake-ups and broker requests that show up in the latency it measures",
    )
    run.add_argument(
        "--share",
        default="1/1",
        metavar="K/N",
        help="this host is host K of a fleet of N (--transport kafka): it writes to and reads "
        "back only the topic's partitions p with p %% N = K-1, so each host reads its own share "
        "and the fleet's measuring capacity grows with its hosts",
    )
    run.add_argument("--devices", type=int, default=1000, metavar="N")
    run.add_argument("--message-bytes", type=int, default=512, metavar="N")
    run.add_argument(
        "--warmup",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="sent and counted, but left out of latency and throughput",
    )
    run.add_argument("--acks", choices=("all", "1"), default="all")
    run.add_argument(
        "--idempotence",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="idempotent producer (default: on with --acks all)",
    )
    run.add_argument(
        "--linger-ms",
        type=float,
        default=None,
        help=f"batching delay (default: {LOW_RATE_LINGER_MS:g} ms while each process sends at "
        f"most {LOW_RATE_PER_PROCESS:,} msg/s, else {HIGH_RATE_LINGER_MS:g} ms, the Java client's "
        "default): on a small, shared broker fewer, larger requests keep the tail down",
    )
    run.add_argument("--batch-bytes", type=int, default=1_000_000)
    run.add_argument(
        "--compression", choices=("none", "lz4", "zstd", "snappy", "gzip"), default="lz4"
    )
    run.add_argument(
        "--security-protocol",
        choices=("PLAINTEXT", "SASL_SSL", "SASL_PLAINTEXT"),
        default="PLAINTEXT",
        help="SASL_SSL authenticates with MSK IAM; SASL_PLAINTEXT is for a local broker "
        "(SASL/PLAIN as --sasl-username, password from $SIMULATOR_SASL_PASSWORD)",
    )
    run.add_argument(
        "--sasl-username",
        metavar="NAME",
        help="SASL/PLAIN user with --security-protocol SASL_PLAINTEXT (local brokers only)",
    )
    run.add_argument(
        "--region", metavar="REGION", help="AWS region for MSK IAM (default: $AWS_REGION)"
    )
    run.add_argument(
        "--run-id",
        default=None,
        metavar="ID",
        help="names the run in every message (default: random)",
    )
    run.add_argument(
        "--producer-id",
        default=None,
        metavar="ID",
        help="names this host in every message (default: short host name)",
    )
    run.add_argument(
        "--consume",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="read own messages back for end-to-end latency and loss",
    )
    run.add_argument("--progress-interval", type=float, default=5.0, metavar="SECONDS")
    run.add_argument(
        "--drain-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long to wait for acks and for the consumer at the end",
    )
    run.add_argument(
        "--connect-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long to wait for the broker's first answer (MQTT: the TCP connect, then the CONNACK; "
        "under 60 s, the keep-alive)",
    )
    mqtt = run.add_argument_group(
        "MQTT (--transport mqtt)",
        "Each device is an AWS IoT thing: client id = thing name, topic "
        "telemetry/<environment>/<thing>/data. AWS IoT takes at most 100 publishes/s and 512 KiB/s per "
        "connection, so --rate / --devices may not exceed 100.",
    )
    mqtt.add_argument(
        "--mqtt-endpoint", metavar="HOST[:PORT]", help="the broker (port default 8883)"
    )
    mqtt.add_argument(
        "--device-certificates",
        type=Path,
        metavar="DIR",
        help="<thing>.cert.pem and <thing>.key.pem per device; --devices N takes the first N "
        "thing names in sorted order",
    )
    mqtt.add_argument(
        "--environment",
        metavar="ENV",
        help="the platform environment the devices belong to (dev, staging, prod): they publish to "
        "telemetry/ENV/<thing>/data, which only that environment's IoT rule reads",
    )
    mqtt.add_argument(
        "--mqtt-ca",
        type=Path,
        metavar="PATH",
        help="CA bundle for the broker's certificate (default: the system trust store, which "
        "holds Amazon Root CA 1)",
    )
    mqtt.add_argument(
        "--connect-rate",
        type=float,
        default=DEFAULT_CONNECT_RATE,
        metavar="CONNECTS_PER_S",
        help=f"CONNECTs this host starts per second (default {DEFAULT_CONNECT_RATE:g}: a share of AWS IoT's "
        "default 500 per account); a refused or timed-out connect is retried with backoff and full jitter, "
        "never sooner than 1 s after the same device's last",
    )
    mqtt.add_argument(
        "--connect-attempts",
        type=int,
        default=DEFAULT_CONNECT_ATTEMPTS,
        metavar="N",
        help=f"CONNECTs per device before the run gives up on it (default {DEFAULT_CONNECT_ATTEMPTS})",
    )
    mqtt.add_argument(
        "--mqtt-plaintext",
        action="store_true",
        help="no TLS and no client certificate: local brokers only (benchmarks)",
    )
    run.add_argument("--report", required=True, type=Path, metavar="PATH.json")
    run.add_argument("--plot", type=Path, metavar="PATH.png")
    add_slo_flags(run, SloThresholds())

    merge = commands.add_parser("merge", help="merge host reports into one", epilog=EPILOG)
    merge.add_argument("reports", nargs="+", type=Path, metavar="REPORT.json")
    merge.add_argument("--report", required=True, type=Path, metavar="OUT.json")
    merge.add_argument("--plot", type=Path, metavar="PATH.png")
    add_slo_flags(merge, None)
    return parser
