"""A mosquitto MQTT broker on 127.0.0.1 that enforces what the fleet's AWS IoT policy does, for the
simulator's MQTT tests and `make bench`.

What it stands in for (stacks/constructs/device_policy.py): a device of one environment connects
with a client certificate, and may publish only to `telemetry/<environment>/<thing name>/data`.
Here the thing name is the certificate's common name, the broker requires a certificate from the
throwaway CA made here, takes the CN as the username and allows each username to write its own
topic of the broker's one environment only. The policy's other condition (the thing's
`environment` attribute) has no counterpart here: every certificate is the environment's. One
extra identity, `reader`, may read `telemetry/#` (the tests' subscriber; AWS IoT's rules engine
reads without any client connection). Another, `replayer`, may write every device's topic of the
environment: it stands in for AWS IoT's data plane Publish, which `telemetry devices replay` calls
with an IAM identity allowed iot:Publish on `topic/telemetry/<environment>/*`
(telemetry/commands/devices/replay.py).

Needs the Debian package: `apt-get install mosquitto` (mosquitto 2.0). Every mosquitto setting
below names the mosquitto.conf(5) entry it relies on.
"""

from __future__ import annotations

import dataclasses
import os
import pwd
import shutil
import socket
import ssl
import subprocess
import time
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from devtools.throwaway_ca import ThrowawayCa
from simulator.device_certificates import TOPIC_ROOT, telemetry_topic

READER = "reader"  # the identity that may read every device's topic
REPLAYER = "replayer"  # the identity that may write every device's topic
READY_TIMEOUT_S = 10.0
# The environment name the benchmarks' devices publish under (tests use "dev", whose synthesized
# rule they run).
LOCAL_ENVIRONMENT = "local"


class LocalMosquittoError(Exception):
    pass


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)
    return path


def _issue(authority: ThrowawayCa, common_name: str, folder: Path, stem: str, *, server: bool) -> tuple[Path, Path]:
    """A leaf certificate and key as <stem>.cert.pem and <stem>.key.pem."""
    cert, key = authority.issue(common_name, server=server)
    cert_path = folder / f"{stem}.cert.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, _write_key(key, folder / f"{stem}.key.pem")


def _write_ca(authority: ThrowawayCa, path: Path) -> Path:
    path.write_bytes(authority.cert.public_bytes(serialization.Encoding.PEM))
    return path


@dataclasses.dataclass(frozen=True)
class Pki:
    ca: Path  # the broker's CA: it signed the server and every device certificate
    server_cert: Path
    server_key: Path
    devices: Path  # <thing>.cert.pem and <thing>.key.pem for every thing, as the simulator reads
    reader_cert: Path
    reader_key: Path
    replayer_cert: Path
    replayer_key: Path
    foreign_cert: Path  # a device certificate (CN = the first thing) from a CA the broker never saw
    foreign_key: Path


def make_pki(folder: Path, things: list[str]) -> Pki:
    """A throwaway CA with a server certificate for localhost, one client certificate per thing
    (CN = thing name), one for the reader, and a look-alike device certificate from another CA."""
    folder.mkdir(parents=True, exist_ok=True)
    devices = folder / "devices"
    devices.mkdir(exist_ok=True)
    authority = ThrowawayCa("simulator test MQTT CA")
    server_cert, server_key = _issue(authority, "localhost", folder, "server", server=True)
    for thing in things:
        _issue(authority, thing, devices, thing, server=False)
    reader_cert, reader_key = _issue(authority, READER, folder, READER, server=False)
    replayer_cert, replayer_key = _issue(authority, REPLAYER, folder, REPLAYER, server=False)
    foreign_folder = folder / "foreign"
    foreign_folder.mkdir(exist_ok=True)
    foreign_cert, foreign_key = _issue(
        ThrowawayCa("some other CA"), things[0], foreign_folder, things[0], server=False
    )
    return Pki(
        ca=_write_ca(authority, folder / "ca.pem"),
        server_cert=server_cert,
        server_key=server_key,
        devices=devices,
        reader_cert=reader_cert,
        reader_key=reader_key,
        replayer_cert=replayer_cert,
        replayer_key=replayer_key,
        foreign_cert=foreign_cert,
        foreign_key=foreign_key,
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclasses.dataclass
class Mosquitto:
    process: subprocess.Popen
    tls_port: int
    plaintext_port: int | None
    pki: Pki
    log: Path
    environment: str  # the devices' topics are telemetry/<environment>/<thing>/data

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.tls_port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def reader_connection(self, client_id: str):
        """A connected MQTT client (AWS IoT Device SDK) as the READER identity, which may read
        every device's topic; the caller subscribes and disconnects."""
        return self._connection(client_id, self.pki.reader_cert, self.pki.reader_key)

    def replayer_connection(self, client_id: str):
        """A connected MQTT client as the REPLAYER identity, which may publish to every device's
        topic; the caller disconnects."""
        return self._connection(client_id, self.pki.replayer_cert, self.pki.replayer_key)

    def device_connection(self, thing: str):
        """A connected MQTT client as one device (its certificate, its thing name as client id)."""
        from simulator.device_certificates import certificate_files

        cert, key = certificate_files(self.pki.devices, thing)
        return self._connection(thing, cert, key)

    def _connection(self, client_id: str, cert: Path, key: Path):
        from awsiot import mqtt_connection_builder

        connection = mqtt_connection_builder.mtls_from_path(
            endpoint="127.0.0.1",
            port=self.tls_port,
            cert_filepath=str(cert),
            pri_key_filepath=str(key),
            ca_filepath=str(self.pki.ca),
            client_id=client_id,
            clean_session=True,
        )
        connection.connect().result(10)
        return connection

    def restart(self, down_s: float = 1.0) -> None:
        """Stops the broker, keeps it down for down_s, and starts it again on the same ports with
        the same configuration (a broker restart as the devices see it); returns once it takes TLS."""
        self.stop()
        time.sleep(down_s)
        folder = self.log.parent
        self.process = subprocess.Popen(
            [_binary(), "-c", str(folder / "mosquitto.conf")],
            stdout=subprocess.DEVNULL,
            stderr=open(folder / "mosquitto.stderr", "wb"),  # noqa: SIM115 - the child owns it
        )
        _wait_for_tls(self, folder)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def _config(folder: Path, pki: Pki, environment: str, tls_port: int, plaintext_port: int | None, debug: bool) -> str:
    acl = folder / "acl"
    acl.write_text(
        # acl_file: "user <username>" lines grant one user; "pattern ... %u" applies to every
        # user with %u replaced by the username, which here is the certificate's CN.
        f"user {READER}\n"
        f"topic read {TOPIC_ROOT}/#\n"
        f"user {REPLAYER}\n"
        f"topic write {telemetry_topic(environment, '+')}\n"
        f"pattern write {telemetry_topic(environment, '%u')}\n"
    )
    lines = [
        # per_listener_settings true: allow_anonymous and acl_file below apply to the listener
        # they follow, so the benchmark's plaintext listener cannot weaken the TLS one.
        "per_listener_settings true",
        # user: when run as root mosquitto switches to this user; the current one keeps the
        # private keys in a 0700 temporary folder readable.
        f"user {pwd.getpwuid(os.getuid()).pw_name}",
        # persistence defaults to false: nothing is kept between runs. Said here to be plain.
        "persistence false",
        # max_queued_messages / max_inflight_messages: per client, default 1000 and 20; a
        # subscriber reading a whole run at QoS 1 must never have messages dropped for a full
        # queue. The queue gets a large limit, not 0 ("no maximum"): since the fix for
        # CVE-2023-28366 (upstream commit 6113eac9, in Debian's 2.0.11-1.2+deb12u2) a refused
        # QoS 1 publish ends the connection when out_packet_count >= max_queued_messages, which
        # with 0 is always true (src/handle_publish.c, process_bad_message).
        "max_queued_messages 1000000",
        "max_inflight_messages 0",
        f"log_dest file {folder / 'mosquitto.log'}",
        # log_type debug logs every packet, including "Denied PUBLISH" for an ACL refusal.
        *(["log_type all"] if debug else ["log_type error", "log_type warning"]),
        "",
        # listener port bind-address: only 127.0.0.1.
        f"listener {tls_port} 127.0.0.1",
        f"cafile {pki.ca}",
        f"certfile {pki.server_cert}",
        f"keyfile {pki.server_key}",
        # require_certificate: a client without a certificate the cafile trusts cannot connect.
        "require_certificate true",
        # use_identity_as_username: the CN is the username the ACL sees (%u), so the device's
        # identity is its certificate, as in AWS IoT.
        "use_identity_as_username true",
        f"acl_file {acl}",
        # allow_anonymous: only clients "without a username" (there is always one here: the CN).
        "allow_anonymous false",
    ]
    if plaintext_port is not None:
        # The benchmark's listener without TLS: anyone on 127.0.0.1 may publish anywhere.
        lines += ["", f"listener {plaintext_port} 127.0.0.1", "allow_anonymous true"]
    return "\n".join(lines) + "\n"


def _tls_ready(port: int, pki: Pki) -> bool:
    """The TLS listener completes a handshake with the reader's certificate."""
    context = ssl.create_default_context(cafile=str(pki.ca))
    context.load_cert_chain(str(pki.reader_cert), str(pki.reader_key))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as raw:
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.unwrap()  # a clean close: no "unexpected eof" in the broker's log
                return True
    except OSError:
        return False


def start_mosquitto(
    folder: Path, pki: Pki, *, environment: str, plaintext: bool = False, debug: bool = True
) -> Mosquitto:
    """Starts mosquitto with its config, ACL and log in folder, for the devices of one platform
    environment (their topics telemetry/<environment>/<thing>/data); returns once it takes TLS."""
    binary = _binary()
    folder.mkdir(parents=True, exist_ok=True)
    tls_port = free_port()
    plaintext_port = free_port() if plaintext else None
    config = folder / "mosquitto.conf"
    config.write_text(_config(folder, pki, environment, tls_port, plaintext_port, debug))
    log = folder / "mosquitto.log"
    process = subprocess.Popen(
        [binary, "-c", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=open(folder / "mosquitto.stderr", "wb"),  # noqa: SIM115 - the child owns it
    )
    broker = Mosquitto(process, tls_port, plaintext_port, pki, log, environment)
    _wait_for_tls(broker, folder)
    return broker


def _binary() -> str:
    binary = shutil.which("mosquitto") or (
        "/usr/sbin/mosquitto" if Path("/usr/sbin/mosquitto").exists() else None
    )
    if binary is None:
        raise LocalMosquittoError("mosquitto is not installed: apt-get install mosquitto")
    return binary


def _wait_for_tls(broker: Mosquitto, folder: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not _tls_ready(broker.tls_port, broker.pki):
        if broker.process.poll() is not None or time.monotonic() > deadline:
            broker.stop()
            reason = (folder / "mosquitto.stderr").read_text(errors="replace").strip()
            raise LocalMosquittoError(
                f"mosquitto did not start on 127.0.0.1:{broker.tls_port}: {reason[-300:] or 'no output'}"
            )
        time.sleep(0.05)
