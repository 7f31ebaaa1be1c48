"""A TCP relay the tests put between a client and a server: bytes pass both ways unread."""

from __future__ import annotations

import socket
import threading
import time


def relay(client: socket.socket, upstream: socket.socket, *, first_reply_delay: float = 0.0) -> None:
    """Relays until either side closes, on two daemon threads; the upstream's first bytes to the
    client wait `first_reply_delay` seconds. Closing one side closes both."""
    threading.Thread(target=_pipe, args=(client, upstream, 0.0), daemon=True).start()
    threading.Thread(target=_pipe, args=(upstream, client, first_reply_delay), daemon=True).start()


def _pipe(source: socket.socket, sink: socket.socket, first_delay: float) -> None:
    try:
        while data := source.recv(65536):
            time.sleep(first_delay)
            first_delay = 0.0
            sink.sendall(data)
    except OSError:  # the other direction closed the sockets, or a side reset the connection
        pass
    finally:
        for end in (source, sink):
            end.close()
