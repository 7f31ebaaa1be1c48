#!/usr/bin/env python3
"""A single-node Kafka (KRaft) on 127.0.0.1 for tests, benchmarks and the demo.

The broker runs from pinned Maven Central jars (devtools/local-kafka/pom.xml), fetched once into
.cache/kafka/libs under the repository root. Only the standard library is used, so the script
runs before any virtual environment exists.

Importable too: a pytest fixture calls start_broker(state_dir=...) with a folder of its own, so
its broker never collides with the one `make demo` started.

start_broker(sasl_users=..., super_user=...) starts the policy-enforcing variant instead: SASL/PLAIN
on the main listener, SASL/SCRAM-SHA-512 on a second one, and Kafka ACLs enforced
(devtools/local-kafka/listeners-sasl.properties), for tests that run a client as one IAM identity
translated into ACLs, or as the device gateway's SCRAM user.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import hashlib
import json
import os
import re
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


def broker_setting(name: str) -> str:
    """A value of the local broker's server.properties (every broker started here uses it)."""
    for line in (FILES / "server.properties").read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == name:
            return value.strip()
    raise KeyError(name)
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
    # Set on the SASL broker only: the user allowed everything (creates topics and ACLs), and
    # the port of its SASL/SCRAM-SHA-512 listener (MSK's 9096 for the device gateway's users).
    super_user: str | None = None
    super_user_password: str | None = None
    scram_port: int | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def security_protocol(self) -> str:
        return "PLAINTEXT" if self.super_user is None else "SASL_PLAINTEXT"

    def client_settings(self, username: str | None = None, password: str | None = None) -> dict:
        """librdkafka settings to reach this broker; on the SASL broker as `username`
        (default: the super user)."""
        settings = {"bootstrap.servers": self.bootstrap_servers}
        if self.super_user is not None:
            settings.update(
                {
                    "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "PLAIN",
                    "sasl.username": username or self.super_user,
                    "sasl.password": password if username else self.super_user_password,
                }
            )
        return settings

    def scram_client_settings(self, username: str, password: str) -> dict:
        """librdkafka settings for a SASL/SCRAM-SHA-512 user of the SASL broker's SCRAM listener."""
        if self.scram_port is None:
            raise LocalKafkaError("only the SASL broker has a SCRAM listener")
        return {
            "bootstrap.servers": f"127.0.0.1:{self.scram_port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": username,
            "sasl.password": password,
        }


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
    main_class: str,
    *args: str,
    libs_dir: Path = LIBS_DIR,
    jvm_options: list[str] | None = None,
    extra_classpath: list[Path] = (),
) -> list[str]:
    """The command line that runs one of Kafka's main classes from the fetched jars."""
    java = shutil.which("java")
    if java is None:
        raise LocalKafkaError("java not found on PATH: install a Java 17+ runtime")
    classpath = os.pathsep.join([str(libs_dir / "*"), *map(str, extra_classpath)])
    return [java, *(jvm_options or []), "-cp", classpath, main_class, *args]


AUTHORIZER_SOURCE = FILES / "authorizer" / "MskIamSemanticsAuthorizer.java"


def compile_authorizer(libs_dir: Path = LIBS_DIR) -> Path:
    """Compile the SASL broker's authorizer (one small class) next to the jars; a no-op when the
    classes match the source. Returns the folder to add to the broker's class path."""
    classes_dir = libs_dir.parent / "authorizer-classes"
    digest = hashlib.sha256(AUTHORIZER_SOURCE.read_bytes()).hexdigest()
    marker = classes_dir / ".compiled-from-sha256"
    if marker.is_file() and marker.read_text().strip() == digest:
        return classes_dir
    javac = shutil.which("javac")
    if javac is None:
        raise LocalKafkaError("javac not found on PATH: install a Java 17+ JDK for the SASL broker")
    shutil.rmtree(classes_dir, ignore_errors=True)
    classes_dir.mkdir(parents=True)
    command = [
        javac, "--release", "17", "-cp", str(libs_dir / "*"), "-d", str(classes_dir),
        str(AUTHORIZER_SOURCE),
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise LocalKafkaError(f"compiling {AUTHORIZER_SOURCE.name} failed: {result.stderr[:300]}")
    marker.write_text(digest + "\n")
    return classes_dir


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


def _plain_jaas(login_user: str, users: dict[str, str]) -> str:
    """PlainLoginModule settings: the broker logs in as login_user; user_<name> lists who may."""
    for name, password in users.items():
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", name) or '"' in password or "\\" in password:
            raise LocalKafkaError(f"SASL user {name!r}: use letters, digits, . _ -; no quotes")
    entries = " ".join(f'user_{name}="{password}"' for name, password in users.items())
    return (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{login_user}" password="{users[login_user]}" {entries};'
    )


def _write_config(
    data_dir: Path,
    port: int,
    controller_port: int,
    sasl_users: dict[str, str] | None = None,
    super_user: str | None = None,
    scram_port: int | None = None,
    tiered_storage: bool = False,
) -> Path:
    config = data_dir / "server.properties"
    values = {"port": port, "controller_port": controller_port, "log_dirs": data_dir / "logs",
              "remote_dir": data_dir / "remote"}  # fmt: skip
    if sasl_users is None:
        listeners = "listeners-plaintext.properties"
    else:
        listeners = "listeners-sasl.properties"
        values.update(
            super_user=super_user,
            scram_port=scram_port,
            client_jaas=_plain_jaas(super_user, sasl_users),
            # Only the broker itself talks to the controller listener.
            controller_jaas=_plain_jaas(super_user, {super_user: sasl_users[super_user]}),
        )
    text = "\n".join(
        string.Template((FILES / name).read_text()).substitute(values)
        for name in ("server.properties", listeners, *(["tiered-storage.properties"] if tiered_storage else []))
    )
    config.write_text(text)
    return config


def _prepare_storage(
    data_dir: Path,
    port: int,
    controller_port: int,
    libs_dir: Path,
    sasl_users: dict[str, str] | None = None,
    super_user: str | None = None,
    extra_classpath: list[Path] = (),
    scram_port: int | None = None,
    tiered_storage: bool = False,
) -> Path:
    """Writes server.properties and formats the KRaft storage; removes data_dir on failure."""
    try:
        config = _write_config(data_dir, port, controller_port, sasl_users, super_user, scram_port, tiered_storage)
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
            extra_classpath=extra_classpath,
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


def _request(sock: socket.socket, api_key: int, version: int, correlation_id: int, body: bytes):
    """One request with header v1 (non-flexible versions only); returns the response after its
    correlation id."""
    client_id = b"local-kafka"
    header = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
    sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
    size = struct.unpack(">i", _read_exactly(sock, 4))[0]
    response = _read_exactly(sock, size)
    if struct.unpack(">i", response[:4])[0] != correlation_id:
        raise ConnectionError("unexpected correlation id")
    return response[4:]


def _sasl_plain_login(sock: socket.socket, username: str, password: str) -> None:
    """SaslHandshake v1 (api 17) then SaslAuthenticate v0 (api 36) with a PLAIN token
    (RFC 4616: authzid NUL authcid NUL password); raises ConnectionError when refused."""
    mechanism = b"PLAIN"
    answer = _request(sock, 17, 1, 10, struct.pack(">h", len(mechanism)) + mechanism)
    if struct.unpack(">h", answer[:2])[0] != 0:
        raise ConnectionError("PLAIN is not enabled on this listener")
    token = b"\0" + username.encode() + b"\0" + password.encode()
    answer = _request(sock, 36, 0, 11, struct.pack(">i", len(token)) + token)
    if struct.unpack(">h", answer[:2])[0] != 0:
        raise ConnectionError(f"SASL/PLAIN login as {username} refused")


def broker_is_ready(
    port: int, timeout: float = 2.0, sasl_plain: tuple[str, str] | None = None
) -> bool:
    """True when the broker on port answers a Metadata request listing at least one broker;
    sasl_plain=(user, password) logs in first (the SASL broker)."""
    # Metadata v4 (the oldest Kafka 4 accepts): all topics, no auto-creation.
    body = struct.pack(">ib", -1, 0)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            if sasl_plain is not None:
                _sasl_plain_login(sock, *sasl_plain)
            response = _request(sock, 3, 4, 1, body)
    except (OSError, struct.error):
        return False
    _throttle_ms, broker_count = struct.unpack(">ii", response[:8])
    return broker_count > 0


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
    sasl_users: dict[str, str] | None = None,
    super_user: str | None = None,
    tiered_storage: bool = False,
) -> Broker:
    """Start a broker recorded in state_dir, or return the one already running there.
    tiered_storage: remote log storage on, into a directory (local-kafka/tiered-storage.properties).
    full_jit: let the JVM's C2 compiler run (for long benchmarks that warm the broker first).
    sasl_users ({name: password}) with super_user (one of them): the policy-enforcing broker,
    SASL/PLAIN on its main listener and SASL/SCRAM-SHA-512 on a second (no SCRAM users until
    the super user adds them), ACLs enforced, nothing allowed without an ACL but to super_user."""
    if (sasl_users is None) != (super_user is None) or (
        sasl_users is not None and super_user not in sasl_users
    ):
        raise LocalKafkaError("a SASL broker needs sasl_users and a super_user among them")
    running = read_state(state_dir)
    if running is not None:
        if running.super_user != super_user:
            raise LocalKafkaError(
                f"the broker in {state_dir} runs with other security settings; stop it first"
            )
        return running
    stop_broker(state_dir)  # clears what a broker that died left behind
    fetch_jars(libs_dir, quiet=True)
    extra_classpath = [compile_authorizer(libs_dir)] if sasl_users is not None else []
    state_dir.mkdir(parents=True, exist_ok=True)
    data_dir = Path(tempfile.mkdtemp(prefix="local-kafka-"))
    port, controller_port = free_port(), free_port()
    while controller_port == port:
        controller_port = free_port()
    scram_port = None
    if sasl_users is not None:
        scram_port = free_port()
        while scram_port in (port, controller_port):
            scram_port = free_port()
    config = _prepare_storage(
        data_dir, port, controller_port, libs_dir, sasl_users, super_user, extra_classpath, scram_port, tiered_storage
    )
    log_path = state_dir / "broker.log"
    process = _launch(config, log_path, "wb", libs_dir, JVM_OPTIONS + ([] if full_jit else QUICK_JIT), extra_classpath)
    broker = Broker(
        pid=process.pid,
        port=port,
        controller_port=controller_port,
        data_dir=str(data_dir),
        log_path=str(log_path),
        state_file=str(state_dir / "state.json"),
        super_user=super_user,
        super_user_password=sasl_users[super_user] if sasl_users else None,
        scram_port=scram_port,
    )
    _record(broker)
    login = (super_user, broker.super_user_password) if sasl_users else None
    failure = _await_ready(process, port, login, ready_timeout)
    if failure:
        stop_broker(state_dir)
        raise LocalKafkaError(f"the broker {failure}; see {log_path}")
    return broker


def _launch(config: Path, log_path: Path, log_mode: str, libs_dir: Path, jvm_options: list[str],
            extra_classpath: list[Path] = ()) -> subprocess.Popen:  # fmt: skip
    """The broker's JVM on `config`, in a session of its own, its output into log_path."""
    with open(log_path, log_mode) as log:
        return subprocess.Popen(
            java_command("kafka.Kafka", str(config), libs_dir=libs_dir, jvm_options=jvm_options,
                         extra_classpath=extra_classpath),
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


def _record(broker: Broker) -> None:
    Path(broker.state_file).write_text(json.dumps(dataclasses.asdict(broker), indent=2) + "\n")


def _recorded(state_dir: Path) -> Broker:
    return Broker(**json.loads((state_dir / "state.json").read_text()))


def _await_ready(process: subprocess.Popen, port: int, login, timeout: float) -> str:
    """"" once the broker answers on port; otherwise why not ("exited", "was not ready in time")."""
    deadline = time.monotonic() + timeout
    while not broker_is_ready(port, sasl_plain=login):
        if process.poll() is not None or time.monotonic() > deadline:
            return "exited" if process.returncode is not None else "was not ready in time"
        time.sleep(0.2)
    return ""


def kill_broker(state_dir: Path) -> Broker:
    """Ends the broker's process as a lost machine would (SIGKILL: no controlled shutdown), keeping
    its data and its record for restart_broker(); returns the record."""
    broker = _recorded(state_dir)
    if _is_broker_process(broker.pid, broker.data_dir):
        os.kill(broker.pid, signal.SIGKILL)
        while _is_broker_process(broker.pid, broker.data_dir):
            time.sleep(0.05)
    return broker


def restart_broker(state_dir: Path, libs_dir: Path = LIBS_DIR, ready_timeout: float = READY_TIMEOUT_S) -> Broker:
    """Starts a killed plaintext broker again with its configuration and data, on its ports (a
    broker coming back); returns once it answers."""
    broker = _recorded(state_dir)
    if broker.super_user is not None:
        raise LocalKafkaError("restart_broker restarts the plaintext broker only")
    if _is_broker_process(broker.pid, broker.data_dir):
        return broker
    process = _launch(Path(broker.data_dir) / "server.properties", Path(broker.log_path), "ab", libs_dir,
                      JVM_OPTIONS + QUICK_JIT)
    broker = dataclasses.replace(broker, pid=process.pid)
    _record(broker)
    if _await_ready(process, broker.port, None, ready_timeout):
        raise LocalKafkaError(f"the restarted broker did not come back; see {broker.log_path}")
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
