"""A command's AWS sessions: one per Region, each making a client for a service once.

boto3 builds a new client on every `session.client(...)`: it copies the session's event handlers,
resolves the endpoint rules and, in a new session, loads and parses the service's model again
(botocore/client.py, ClientCreator.create_client). `telemetry deploy` asked for some forty
clients a run, a dozen services; `telemetry cluster drain` made three sessions in one Region.
Clients are thread-safe and meant to be reused ("Multithreading or multiprocessing with clients"
in boto3's guide); a session is not, so clients are made under a lock (the session's other
methods are not locked: every command calls them from its main thread). A client kept for the
command keeps its credentials fresh as a new one would (each request signs with
get_frozen_credentials, which refreshes an assumed role's), and, in the standard and adaptive
retry modes, its retry quota: the retries spent by one step count against the next."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

# Arguments a client is remembered by: keywords whose values compare by what they are. A client
# asked for with anything else (a botocore Config, which compares by identity, or arguments by
# position) is made anew each time.
_PLAIN = (str, int, float, bool, type(None))


class CommandSession:
    """A boto3 session that hands back the client it made before for the same service and plain
    arguments; everything else is the session's own."""

    def __init__(self, session: Any) -> None:
        self._wrapped = session  # not `_session`, which names botocore's session on boto3's
        self._clients: dict[tuple, Any] = {}
        self._lock = threading.Lock()

    def client(self, service_name: str, *args: Any, **kwargs: Any) -> Any:
        if args or not all(isinstance(value, _PLAIN) for value in kwargs.values()):
            with self._lock:
                return self._wrapped.client(service_name, *args, **kwargs)
        key = (service_name, tuple(sorted(kwargs.items())))
        with self._lock:
            if key not in self._clients:
                self._clients[key] = self._wrapped.client(service_name, **kwargs)
            return self._clients[key]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapped, name)


def command_sessions(factory: Callable[[str], Any]) -> Callable[[str], Any]:
    """`factory` (Region -> boto3 session), asked once per Region; each session a CommandSession.
    A factory's None (a test's "no AWS here") stays None."""
    made: dict[str, Any] = {}
    lock = threading.Lock()

    def session(region: str) -> Any:
        with lock:
            if region not in made:
                given = factory(region)
                made[region] = None if given is None else CommandSession(given)
            return made[region]

    return session
