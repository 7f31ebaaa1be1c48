"""A real HTTP(S) server on 127.0.0.1 that answers like the Service Fabric HTTP gateway."""

from __future__ import annotations

import json
import re
import socket
import ssl
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .certs import Pki
from .cluster import EmulatedCluster, EmulatedFabricError
from .faults import Fault, FaultPlan
from .image_store import Upload
from .routes import dispatch


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    status: int | None  # None when a fault hung or dropped the connection
    fault: str | None
    client_cn: str | None


def _client_cn(connection: Any) -> str | None:
    getpeercert = getattr(connection, "getpeercert", None)
    cert = getpeercert() if getpeercert else None
    for rdn in (cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return value
    return None


def _fault_answer(fault: Fault) -> tuple[int, Any, str | None]:
    if fault.code:
        return fault.status, {"Error": {"Code": fault.code, "Message": fault.message}}, None
    return fault.status, None, fault.message or "Service Unavailable"


def _cluster_answer(cluster: EmulatedCluster, request: dict[str, Any]) -> tuple[int, Any, None]:
    try:
        status, document = dispatch(
            cluster, request["method"], request["path"], request["query"], request["body"]
        )
    except EmulatedFabricError as err:
        status, document = err.status, {"Error": {"Code": err.code, "Message": err.message}}
    return status, document, None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in separate writes
    timeout = 10  # idle keep-alive connections do not hold a thread for ever
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - base signature
        pass

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    def _serve(self) -> None:
        emulator = self.server.emulator
        parts = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body: Any
        if self.command == "PUT":
            # ImageStoreHandler::GetRequestBody takes any PUT's body as a file, with Content-Range.
            body = Upload(self.headers.get("Content-Range"), raw)
            logged: Any = {"Content-Range": body.content_range, "Length": len(raw)}
        else:
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode(errors="replace")
            logged = body
        record = dict(
            method=self.command,
            path=parts.path,
            query=query,
            body=logged,
            client_cn=_client_cn(self.connection),
        )
        fault = emulator.faults.take(self.command, parts.path)
        if fault is not None and fault.kind in ("hang", "drop"):
            emulator._record(RecordedRequest(status=None, fault=fault.kind, **record))
            if fault.kind == "hang":
                emulator._stopping.wait(fault.seconds)
            self._drop()
            return
        if fault is not None and fault.kind == "lost_answer":
            # The cluster acts on the request; its answer never reaches the client.
            status, _, _ = _cluster_answer(emulator.cluster, {**record, "body": body})
            emulator._record(RecordedRequest(status=None, fault=f"lost_answer ({status})", **record))
            self._drop()
            return
        if fault is not None:
            status, document, text = _fault_answer(fault)
        else:
            status, document, text = _cluster_answer(emulator.cluster, {**record, "body": body})
        emulator._record(RecordedRequest(status=status, fault=fault and fault.kind, **record))
        self._answer(status, document, text)

    def _answer(self, status: int, document: Any, text: str | None) -> None:
        payload = b""
        if document is not None:
            payload = json.dumps(document).encode()
        elif text is not None:
            payload = text.encode()
        self.send_response(status)
        if payload:
            kind = "application/json; charset=utf-8" if document is not None else "text/plain"
            self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if payload:
            self.wfile.write(payload)

    def _drop(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, emulator: SfEmulator, ssl_context: ssl.SSLContext | None) -> None:
        self.emulator = emulator
        self.ssl_context = ssl_context
        super().__init__(("127.0.0.1", 0), _Handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.ssl_context is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(5)
        try:  # the handshake runs here, on the connection's own thread
            tls = self.ssl_context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            self.emulator._record_tls_failure(str(exc))
            return
        try:
            super().finish_request(tls, client_address)
        finally:
            tls.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        kind = sys.exc_info()[0]
        if kind is not None and issubclass(kind, (ConnectionError, ssl.SSLError, TimeoutError)):
            return  # clients that time out or go away mid-answer
        self.emulator.server_errors.append(repr(sys.exc_info()[1]))


class SfEmulator:
    """Serves `cluster` over HTTPS with mutual TLS (given `pki`) or plain HTTP (pki=None)."""

    def __init__(
        self,
        cluster: EmulatedCluster | None = None,
        *,
        pki: Pki | None = None,
        require_client_cert: bool = True,
    ) -> None:
        self.cluster = cluster or EmulatedCluster()
        self.faults = FaultPlan()
        self.tls_failures: list[str] = []
        self.server_errors: list[str] = []
        self._pki = pki
        self._require_client_cert = require_client_cert
        self._log: list[RecordedRequest] = []
        self._log_lock = threading.Condition()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- life cycle -------------------------------------------------------------------------

    def start(self) -> SfEmulator:
        context = None
        if self._pki is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self._pki.server.cert_path, self._pki.server.key_path)
            context.load_verify_locations(self._pki.ca_path)
            context.verify_mode = (
                ssl.CERT_REQUIRED if self._require_client_cert else ssl.CERT_OPTIONAL
            )
        self._server = _Server(self, context)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.01},
            name="sf-emulator",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> SfEmulator:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        if self._server is None:
            raise RuntimeError("emulator not started")
        scheme = "https" if self._pki is not None else "http"
        return f"{scheme}://127.0.0.1:{self._server.server_address[1]}"

    # -- faults -----------------------------------------------------------------------------

    def inject_error(
        self,
        status: int,
        code: str | None = None,
        *,
        times: int = 1,
        message: str = "",
        method: str | None = None,
        path: str | None = None,
        skip: int = 0,
    ) -> None:
        self.faults.add(
            Fault(
                "error", times, status=status, code=code, message=message, method=method, path=path,
                skip=skip,
            )
        )

    def inject_hang(
        self, seconds: float, *, times: int = 1, method: str | None = None, path: str | None = None
    ) -> None:
        self.faults.add(Fault("hang", times, seconds=seconds, method=method, path=path))

    def inject_drop(
        self, *, times: int = 1, method: str | None = None, path: str | None = None, skip: int = 0
    ) -> None:
        self.faults.add(Fault("drop", times, method=method, path=path, skip=skip))

    def inject_lost_answer(
        self, *, times: int = 1, method: str | None = None, path: str | None = None, skip: int = 0
    ) -> None:
        """The cluster carries the request out, and the connection closes before the answer."""
        self.faults.add(Fault("lost_answer", times, method=method, path=path, skip=skip))

    # -- request log ------------------------------------------------------------------------

    def _record(self, entry: RecordedRequest) -> None:
        with self._log_lock:
            self._log.append(entry)

    def _record_tls_failure(self, reason: str) -> None:
        with self._log_lock:
            self.tls_failures.append(reason)
            self._log_lock.notify_all()

    def wait_for_tls_failures(self, count: int = 1, timeout: float = 2.0) -> list[str]:
        """The handshakes the server refused; the client may hear of it before we log it."""
        with self._log_lock:
            self._log_lock.wait_for(lambda: len(self.tls_failures) >= count, timeout)
            return list(self.tls_failures)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._log_lock:
            return list(self._log)

    def requests_to(self, method: str, path_pattern: str) -> list[RecordedRequest]:
        """Logged requests with this method whose path matches the regex (fully)."""
        return [
            r for r in self.requests if r.method == method and re.fullmatch(path_pattern, r.path)
        ]

    def clear_log(self) -> None:
        with self._log_lock:
            self._log.clear()
