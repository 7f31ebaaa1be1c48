#!/usr/bin/env python3
"""A single-node Kafka (KRaft) on 127.0.0.1 for tests, benchmarks and the demo.

The broker runs from pinned Maven Central jars (scripts/local-kafka/pom.xml), fetched once into
.cache/kafka/libs under the repository root. Only the standard library is used, so the script
runs before any virtual environment exists.

Importable too: a pytest fixture calls start_broker(state_dir=...) with a folder of its own, so
its broker never collides with the one `make demo` started.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import hashlib
import json
import os
import shutil
import signal
import socket
import string
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
FILES = Path(__file__).resolve().parent / "local-kafka"  # pom, broker and logging settings
POM = FILES / "pom.xml"
CACHE_DIR = REPO_ROOT / ".cache" / "kafka"
LIBS_DIR = CACHE_DIR / "libs"
FETCHED_MARKER = ".fetched-from-pom-sha256"
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
JVM_OPTIONS = [
    "-Xms512m",
    "-Xmx1g",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-Djava.awt.headless=true",
    f"-Dlog4j.configuration=file:{FILES / 'log4j.properties'}",
    f"-Dlog4j2.configurationFile={FILES / 'log4j2.properties'}",
]
# A broker that lives for a test session or a demo: compile with C1 only, so it behaves the same
# from its first second instead of spending a core on C2 for its first minute of traffic.
QUICK_JIT = ["-XX:TieredStopAtLevel=1"]
TOOL_JVM_OPTIONS = [
    "-Xmx512m",
    f"-Dlog4j.configuration=file:{FILES / 'tools-log4j.properties'}",
    f"-Dlog4j2.configurationFile={FILES / 'log4j2.properties'}",
]


class LocalKafkaError(Exception):
    """A failure the operator can act on; the CLI prints it as one line."""


@dataclasses.dataclass(frozen=True)
class Broker:
    pid: int
    port: int
    controller_port: int
    data_dir: str
    log_path: str
    state_file: str

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"


# --- jars -------------------------------------------------------------------------------------


def fetch_jars(libs_dir: Path = LIBS_DIR, quiet: bool = False) -> Path:
    """Resolve the pinned jars with Maven into libs_dir; a no-op when they are already there."""
    pom_digest = hashlib.sha256(POM.read_bytes()).hexdigest()
    marker = libs_dir / FETCHED_MARKER
    if marker.is_file() and marker.read_text().strip() == pom_digest:
        return libs_dir
    if shutil.which("mvn") is None:
        raise LocalKafkaError("mvn not found on PATH: install Maven 3.8+ to fetch the Kafka jars")
    if libs_dir.exists():
        shutil.rmtree(libs_dir)
    libs_dir.mkdir(parents=True)
    if not quiet:
        print(f"fetching Kafka jars with Maven into {libs_dir} ...", file=sys.stderr)
    command = [
        "mvn",
        "-q",
        "-B",
        "-f",
        str(POM),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={libs_dir}",
        "-DincludeScope=runtime",
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        last = (result.stdout + result.stderr).strip().splitlines()[-1:] or ["no output"]
        raise LocalKafkaError(f"mvn dependency:copy-dependencies failed: {last[0]}")
    marker.write_text(pom_digest + "\n")
    return libs_dir


def java_command(
    main_class: str, *args: str, libs_dir: Path = LIBS_DIR, jvm_options: list[str] | None = None
) -> list[str]:
    """The command line that runs one of Kafka's main classes from the fetched jars."""
    java = shutil.which("java")
    if java is None:
        raise LocalKafkaError("java not found on PATH: install a Java 17+ runtime")
    return [java, *(jvm_options or []), "-cp", str(libs_dir / "*"), main_class, *args]


# --- broker lifecycle -------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _cluster_id() -> str:
    # Kafka's Uuid text form: unpadded URL-safe base64 of 16 bytes, never starting with '-'.
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def _write_config(data_dir: Path, port: int, controller_port: int) -> Path:
    config = data_dir / "server.properties"
    template = string.Template((FILES / "server.properties").read_text())
    config.write_text(
        template.substitute(port=port, controller_port=controller_port, log_dirs=data_dir / "logs")
    )
    return config


def _prepare_storage(data_dir: Path, port: int, controller_port: int, libs_dir: Path) -> Path:
    """Writes server.properties and formats the KRaft storage; removes data_dir on failure."""
    try:
        config = _write_config(data_dir, port, controller_port)
        command = java_command(
            "kafka.tools.StorageTool",
            "format",
            "-t",
            _cluster_id(),
            "-c",
            str(config),
            "--standalone",
            libs_dir=libs_dir,
            jvm_options=JVM_OPTIONS + QUICK_JIT,
        )
        formatted = subprocess.run(command, capture_output=True, text=True, check=False)
        if formatted.returncode != 0:
            output = (formatted.stderr or formatted.stdout).strip()
            raise LocalKafkaError(f"formatting the KRaft storage failed: {output[:300]}")
        return config
    except BaseException:
        shutil.rmtree(data_dir, ignore_errors=True)
        raise


def _is_broker_process(pid: int, data_dir: str) -> bool:
    """True while pid is a live broker started from data_dir (guards against reused pids)."""
    try:
        os.waitpid(pid, os.WNOHANG)  # reap it if it was our child and has exited
    except ChildProcessError:
        pass
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"kafka.Kafka" in cmdline and data_dir.encode() in cmdline


def read_state(state_dir: Path = CACHE_DIR) -> Broker | None:
    """The broker recorded in state_dir if it is still running, else None."""
    state_file = state_dir / "state.json"
    try:
        broker = Broker(**json.loads(state_file.read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return broker if _is_broker_process(broker.pid, broker.data_dir) else None


def broker_is_ready(port: int, timeout: float = 2.0) -> bool:
    """True when the broker on port answers a Metadata request listing at least one broker."""
    client_id = b"local-kafka"
    # Metadata v4 (the oldest Kafka 4 accepts): all topics, no auto-creation.
    body = struct.pack(">hhih", 3, 4, 1, len(client_id)) + client_id + struct.pack(">ib", -1, 0)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(struct.pack(">i", len(body)) + body)
            header = _read_exactly(sock, 4)
            response = _read_exactly(sock, struct.unpack(">i", header)[0])
    except OSError:
        return False
    correlation_id, _throttle_ms, broker_count = struct.unpack(">iii", response[:12])
    return correlation_id == 1 and broker_count > 0


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, remaining = [], size
    while remaining:
        chunk = sock.recv(remaining)
        if not chunk:
            raise ConnectionError("connection closed by broker")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def start_broker(
    state_dir: Path = CACHE_DIR,
    libs_dir: Path = LIBS_DIR,
    ready_timeout: float = READY_TIMEOUT_S,
    full_jit: bool = False,
) -> Broker:
    """Start a broker recorded in state_dir, or return the one already running there.
    full_jit: let the JVM's C2 compiler run (for long benchmarks that warm the broker first)."""
    running = read_state(state_dir)
    if running is not None:
        return running
    stop_broker(state_dir)  # clears what a broker that died left behind
    fetch_jars(libs_dir, quiet=True)
    state_dir.mkdir(parents=True, exist_ok=True)
    data_dir = Path(tempfile.mkdtemp(prefix="local-kafka-"))
    port, controller_port = free_port(), free_port()
    while controller_port == port:
        controller_port = free_port()
    config = _prepare_storage(data_dir, port, controller_port, libs_dir)
    log_path = state_dir / "broker.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            java_command(
                "kafka.Kafka",
                str(config),
                libs_dir=libs_dir,
                jvm_options=JVM_OPTIONS + ([] if full_jit else QUICK_JIT),
            ),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    broker = Broker(
        pid=process.pid,
        port=port,
        controller_port=controller_port,
        data_dir=str(data_dir),
        log_path=str(log_path),
        state_file=str(state_dir / "state.json"),
    )
    Path(broker.state_file).write_text(json.dumps(dataclasses.asdict(broker), indent=2) + "\n")
    deadline = time.monotonic() + ready_timeout
    while not broker_is_ready(port):
        if process.poll() is not None or time.monotonic() > deadline:
            stop_broker(state_dir)
            reason = "exited" if process.returncode is not None else "was not ready in time"
            raise LocalKafkaError(f"the broker {reason}; see {log_path}")
        time.sleep(0.2)
    return broker


def stop_broker(state_dir: Path = CACHE_DIR, timeout: float = STOP_TIMEOUT_S) -> bool:
    """Stop the broker recorded in state_dir and delete its data; False when none was running."""
    state_file = state_dir / "state.json"
    try:
        broker = Broker(**json.loads(state_file.read_text()))
    except (OSError, ValueError, TypeError):
        return False
    was_running = _is_broker_process(broker.pid, broker.data_dir)
    if was_running:
        os.kill(broker.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _is_broker_process(broker.pid, broker.data_dir):
            if time.monotonic() > deadline:
                os.kill(broker.pid, signal.SIGKILL)
            time.sleep(0.1)
    shutil.rmtree(broker.data_dir, ignore_errors=True)
    state_file.unlink(missing_ok=True)
    return was_running


def kafka_tool_command(main_class: str, *args: str, libs_dir: Path = LIBS_DIR) -> list[str]:
    """The command line of one of Kafka's own tools (TopicCommand, ProducerPerformance,
    EndToEndLatency ...), logging only errors."""
    return java_command(main_class, *args, libs_dir=libs_dir, jvm_options=TOOL_JVM_OPTIONS)


def create_topic(
    bootstrap_servers: str, name: str, partitions: int = 6, libs_dir: Path = LIBS_DIR
) -> None:
    """Create a topic with Kafka's TopicCommand (Python callers with confluent_kafka can use
    AdminClient instead). Creating a topic that exists is not an error."""
    command = kafka_tool_command(
        "org.apache.kafka.tools.TopicCommand",
        "--bootstrap-server",
        bootstrap_servers,
        "--create",
        "--if-not-exists",
        "--topic",
        name,
        "--partitions",
        str(partitions),
        "--replication-factor",
        "1",
        libs_dir=libs_dir,
    )
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        lines = (result.stderr or result.stdout).strip().splitlines() or ["no output"]
        raise LocalKafkaError(f"creating topic {name} failed: {lines[0][:300]}")


# --- command line ------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # bad usage is one line, not usage text and a traceback
        self.exit(2, f"{self.prog}: {message} (see --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        description="Fetch, start, stop and inspect a single-node KRaft Kafka on 127.0.0.1.",
        epilog="State lives in --state-dir (default .cache/kafka under the repository); "
        "data lives in a temp folder removed by stop. Exit codes: 0 ok; "
        "1 status found no broker; 2 bad usage or a failure.",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=CACHE_DIR,
        help="folder for state.json and broker.log (default: %(default)s)",
    )
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )
    commands.add_parser("fetch", help="resolve the pinned jars with Maven (skipped when present)")
    start = commands.add_parser(
        "start", help="start the broker (or find it running); print HOST:PORT"
    )
    start.add_argument(
        "--full-jit",
        action="store_true",
        help="let the JVM's C2 compiler run (long benchmarks; default: C1 only)",
    )
    commands.add_parser("stop", help="stop the broker and delete its data (no-op when stopped)")
    commands.add_parser("status", help="print HOST:PORT and pid when running; exit 1 if not")
    topic = commands.add_parser("create-topic", help="create a topic on the running broker")
    topic.add_argument("name")
    topic.add_argument("--partitions", type=int, default=6)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "fetch":
            print(fetch_jars())
        elif args.command == "start":
            print(start_broker(args.state_dir, full_jit=args.full_jit).bootstrap_servers)
        elif args.command == "stop":
            print("stopped" if stop_broker(args.state_dir) else "not running")
        elif args.command == "status":
            broker = read_state(args.state_dir)
            if broker is None:
                print("not running")
                return 1
            print(f"{broker.bootstrap_servers} pid={broker.pid} log={broker.log_path}")
        elif args.command == "create-topic":
            broker = read_state(args.state_dir)
            if broker is None:
                raise LocalKafkaError("no broker running: run `local_kafka.py start` first")
            create_topic(broker.bootstrap_servers, args.name, args.partitions)
            print(f"topic {args.name} ({args.partitions} partitions) on {broker.bootstrap_servers}")
    except LocalKafkaError as error:
        print(f"local_kafka: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("local_kafka: interrupted", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
