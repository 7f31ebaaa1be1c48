"""One HTTP(S) conversation with the Service Fabric HTTP gateway: TLS, timeouts, retries.

Server verification is passed as `verify=` on every request. requests lets the
REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE environment variables replace a session-level
`verify=True`, so without this a machine-wide bundle, not the cluster CA, would decide
whom we trust.
"""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.exceptions import NewConnectionError
from urllib3.util import create_urllib3_context

from .client_certificate import ClientCertificate
from .errors import (
    CONNECT_FAILED,
    CONNECTION_LOST,
    READ_TIMEOUT,
    TLS_FAILED,
    FabricError,
    GatewayUnavailableError,
    TlsError,
    error_from_response,
)
from .retry import RetryPolicy, should_retry

LOG = logging.getLogger("sf_rest")
_E = TypeVar("_E", bound=BaseException)


@dataclass(frozen=True)
class Timeouts:
    """Client connect/read timeouts, and the `timeout` the gateway is asked to honour.

    The read timeout is kept above the server timeout so that the gateway's own
    FABRIC_E_TIMEOUT answer normally arrives before we give up on the socket.
    """

    connect_seconds: float = 5.0
    read_seconds: float = 35.0
    server_seconds: int = 30

    def __post_init__(self) -> None:
        if self.connect_seconds <= 0 or self.read_seconds <= 0 or self.server_seconds < 1:
            raise ValueError("timeouts must be positive (server_seconds >= 1)")


DEFAULT_TIMEOUTS = Timeouts()
DEFAULT_RETRY = RetryPolicy()


class _ThumbprintAdapter(HTTPAdapter):
    """Pins the server certificate by thumbprint (SHA-1, as SF names certificates; or SHA-256)."""

    def __init__(self, thumbprint: str) -> None:
        self._thumbprint = thumbprint
        # The chain is not checked (verify=False), so the context need not hold the machine's
        # trust store. Given none, urllib3 makes a context per connection and loads that store
        # into it (_ssl_wrap_socket_and_match_hostname in urllib3/connection.py): work for
        # nothing on every connection a step opens. One Gateway is used by one thread at a time:
        # urllib3 sets the client certificate on this shared context for each connection.
        self._context = create_urllib3_context(cert_reqs=ssl.CERT_NONE)
        super().__init__()  # calls init_poolmanager

    def _pinned(self, options: dict[str, Any]) -> dict[str, Any]:
        options["assert_fingerprint"] = self._thumbprint
        options["ssl_context"] = self._context
        return options

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **self._pinned(kwargs))

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        # Called for every request through a proxy (HTTPS_PROXY); the first call for a proxy makes
        # its manager from these arguments alone, not init_poolmanager's (requests/adapters.py,
        # HTTPAdapter.proxy_manager_for): without the pin here a tunnelled connection would check
        # nothing at all, verify being False.
        return super().proxy_manager_for(proxy, **self._pinned(proxy_kwargs))


def normalise_thumbprint(value: str) -> str:
    """A SHA-1 or SHA-256 certificate thumbprint as lower-case hex; ValueError if it is not one."""
    digits = value.replace(":", "").replace(" ", "").lower()
    if len(digits) not in (40, 64) or any(c not in "0123456789abcdef" for c in digits):
        raise ValueError("server_thumbprint must be a SHA-1 (40 hex) or SHA-256 (64 hex) digest")
    return digits


def _find_cause(exc: BaseException, kind: type[_E]) -> _E | None:
    """The first exception of `kind` in exc's chain (cause, context, args, urllib3 reason)."""
    seen: set[int] = set()
    stack: list[Any] = [exc]
    while stack:
        item = stack.pop()
        if not isinstance(item, BaseException) or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, kind):
            return item
        stack.extend([item.__cause__, item.__context__, getattr(item, "reason", None), *item.args])
    return None


def _transport_error(exc: requests.RequestException, method: str, path: str) -> FabricError:
    detail = str(exc)[:300]
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return GatewayUnavailableError(CONNECT_FAILED, detail, method=method, path=path)
    if isinstance(exc, requests.exceptions.ReadTimeout):
        return GatewayUnavailableError(READ_TIMEOUT, detail, method=method, path=path)
    if isinstance(exc, requests.exceptions.SSLError):
        # Failed in the handshake: a bad CA or thumbprint, or a gateway hanging up on a
        # client certificate it refuses (an EOF is how that usually looks). Final.
        return TlsError(TLS_FAILED, detail, method=method, path=path)
    tls = _find_cause(exc, ssl.SSLError)
    if tls is not None and not isinstance(tls, (ssl.SSLEOFError, ssl.SSLZeroReturnError)):
        return TlsError(TLS_FAILED, detail, method=method, path=path)
    if _find_cause(exc, NewConnectionError) is not None:
        code = CONNECT_FAILED  # nothing was sent
    else:
        code = CONNECTION_LOST  # the request may have reached the gateway
    return GatewayUnavailableError(code, detail, method=method, path=path)


class Gateway:
    """Sends requests to one HTTP gateway endpoint and turns failures into FabricErrors."""

    def __init__(
        self,
        endpoint: str,
        *,
        client_certificate: ClientCertificate | tuple[str, str] | None = None,
        ca_bundle: str | None = None,
        server_thumbprint: str | None = None,
        insecure: bool = False,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        retry: RetryPolicy = DEFAULT_RETRY,
        session: requests.Session | None = None,
    ) -> None:
        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"endpoint must be http(s)://host:port, got {endpoint!r}")
        self.endpoint = endpoint.rstrip("/")
        self.timeouts = timeouts
        self.retry = retry
        self._session = session or requests.Session()
        if isinstance(client_certificate, ClientCertificate):
            client_certificate = client_certificate.as_requests_cert()
        self._cert = client_certificate
        self._verify: bool | str = self._choose_verification(
            parts.scheme, ca_bundle, server_thumbprint, insecure
        )

    def _choose_verification(
        self, scheme: str, ca_bundle: str | None, thumbprint: str | None, insecure: bool
    ) -> bool | str:
        chosen = [
            name
            for name, on in (
                ("ca_bundle", ca_bundle),
                ("server_thumbprint", thumbprint),
                ("insecure", insecure),
            )
            if on
        ]
        if len(chosen) > 1:
            raise ValueError(f"choose one of ca_bundle, server_thumbprint, insecure; got {chosen}")
        if scheme == "http":
            return False
        if ca_bundle:
            if not os.path.isfile(ca_bundle):
                raise ValueError(f"ca_bundle {ca_bundle!r} is not a file")
            return ca_bundle
        if thumbprint:
            self._session.mount(
                self.endpoint + "/", _ThumbprintAdapter(normalise_thumbprint(thumbprint))
            )
            return False  # the chain is not checked; the pinned thumbprint is
        if insecure:
            return False
        raise ValueError("https endpoint: pass ca_bundle, server_thumbprint, or insecure=True")

    def close(self) -> None:
        self._session.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int],
        body: Any = None,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool,
        timeouts: Timeouts | None = None,
    ) -> requests.Response:
        """Send with retries; return the 2xx response or raise the last FabricError.

        `body` goes as JSON; `data` as raw bytes (a file chunk), kept whole so that a retry
        sends the same bytes again. `timeouts` replaces the client's for an operation known to
        take longer."""
        if body is not None and data is not None:
            raise ValueError("a request carries a JSON body or raw data, not both")
        timeouts = timeouts or self.timeouts
        query = {**params, "timeout": timeouts.server_seconds}
        started = self.retry.clock()
        attempt = 0
        while True:
            attempt += 1
            outcome = self._attempt(method, path, query, body, data, headers, timeouts)
            if isinstance(outcome, requests.Response):
                return outcome
            error = outcome
            error.attempts = attempt
            if not should_retry(error, idempotent=idempotent):
                raise error
            delay = self.retry.backoff(attempt)
            elapsed = self.retry.clock() - started
            out_of_time = elapsed + delay > self.retry.max_elapsed_seconds
            if attempt >= self.retry.max_attempts or out_of_time:
                LOG.warning(
                    "giving up on %s %s after %d attempts: %s", method, path, attempt, error
                )
                raise error
            LOG.info(
                "retrying %s %s in %.2fs (attempt %d): %s", method, path, delay, attempt, error
            )
            self.retry.sleep(delay)

    def _attempt(
        self,
        method: str,
        path: str,
        query: Mapping[str, Any],
        body: Any,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeouts: Timeouts | None = None,
    ) -> requests.Response | FabricError:
        timeouts = timeouts or self.timeouts
        try:
            response = self._session.request(
                method,
                self.endpoint + path,
                params=query,
                json=body,
                data=data,
                headers=dict(headers) if headers else None,
                timeout=(timeouts.connect_seconds, timeouts.read_seconds),
                verify=self._verify,
                cert=self._cert,
            )
        except requests.RequestException as exc:
            return _transport_error(exc, method, path)
        if 200 <= response.status_code < 300:
            return response
        return error_from_response(response.status_code, response.text, method=method, path=path)
