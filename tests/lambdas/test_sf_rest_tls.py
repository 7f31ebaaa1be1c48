"""Mutual TLS with the gateway: client certificate, cluster CA, thumbprint, and the
REQUESTS_CA_BUNDLE trap."""

from __future__ import annotations

import os
import socket
import stat
import threading

import pytest
import requests
from sf_rest import (
    ServiceFabricClient,
    TlsError,
    remove_client_certificate,
    write_client_certificate,
)

from tests.sf_emulator import make_pki
from tests.tcp_relay import relay

pytestmark = pytest.mark.integration  # starts the HTTP(S) emulator


@pytest.fixture(scope="module")
def stranger_pki(tmp_path_factory):
    """A second, unrelated CA with its own server and client certificates."""
    return make_pki(tmp_path_factory.mktemp("stranger-pki"), name="stranger")


def test_admin_certificate_and_cluster_ca_work(sf_client, sf_emulator):
    assert sf_client.get_node_info("seed-0").name == "seed-0"
    assert sf_emulator.requests[0].client_cn == "sf-admin"


def test_gateway_refuses_a_client_without_certificate(make_client, sf_emulator, fake_time):
    with pytest.raises(TlsError) as raised:
        make_client(client_certificate=None).get_node_info("seed-0")

    assert raised.value.attempts == 1 and fake_time.sleeps == []  # not retried
    assert sf_emulator.requests == []  # nothing got past the handshake
    assert "did not return a certificate" in sf_emulator.wait_for_tls_failures()[0]


def test_gateway_refuses_a_certificate_from_another_ca(make_client, sf_emulator, stranger_pki):
    stranger = (stranger_pki.client.cert_path, stranger_pki.client.key_path)

    with pytest.raises(TlsError) as raised:
        make_client(client_certificate=stranger).get_node_info("seed-0")

    assert raised.value.attempts == 1
    assert sf_emulator.requests == []
    assert "certificate verify failed" in sf_emulator.wait_for_tls_failures()[0]


def test_wrong_cluster_ca_fails_even_when_the_environment_bundle_would_trust(
    make_client, sf_emulator, sf_pki, stranger_pki, monkeypatch, fake_time
):
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", sf_pki.ca_path)
    monkeypatch.setenv("CURL_CA_BUNDLE", sf_pki.ca_path)
    cert = (sf_pki.client.cert_path, sf_pki.client.key_path)
    # The trap is real: plain requests, verify left to the environment, trusts the server.
    plain = requests.get(
        f"{sf_emulator.endpoint}/Nodes/seed-0?api-version=6.0", cert=cert, timeout=5
    )
    assert plain.status_code == 200

    client = make_client(ca_bundle=stranger_pki.ca_path)
    with pytest.raises(TlsError) as raised:
        client.get_node_info("seed-0")

    assert raised.value.code == "TLS_FAILED"
    assert raised.value.attempts == 1 and fake_time.sleeps == []  # not retried
    assert "certificate verify failed" in raised.value.message


def test_right_cluster_ca_works_when_the_environment_bundle_would_not(
    make_client, stranger_pki, monkeypatch
):
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", stranger_pki.ca_path)

    assert make_client().get_node_info("seed-0").name == "seed-0"


def test_server_thumbprint_pins_the_gateway_certificate(
    make_client, sf_pki, stranger_pki, monkeypatch
):

    monkeypatch.setenv("REQUESTS_CA_BUNDLE", stranger_pki.ca_path)
    pinned = make_client(ca_bundle=None, server_thumbprint=sf_pki.server.sha1_thumbprint)
    wrong = make_client(ca_bundle=None, server_thumbprint=stranger_pki.server.sha1_thumbprint)

    assert pinned.get_node_info("seed-0").name == "seed-0"
    with pytest.raises(TlsError):
        wrong.get_node_info("seed-0")


def test_a_pinned_gateway_does_not_load_the_machines_trust_store_per_connection(
    make_client, sf_pki, monkeypatch
):
    # What the pinned chain does not need: urllib3 loads it into every context it makes itself.
    import ssl

    loaded = []
    monkeypatch.setattr(ssl.SSLContext, "load_default_certs", lambda self, *a: loaded.append(self))
    pinned = make_client(ca_bundle=None, server_thumbprint=sf_pki.server.sha1_thumbprint)
    pinned.get_node_info("seed-0")
    pinned.close()  # the next call opens a new connection
    assert pinned.get_node_info("seed-0").name == "seed-0"
    assert loaded == []


@pytest.fixture
def connect_proxy():
    """A forward proxy that tunnels CONNECT host:port (RFC 9110, 9.3.6): after its 200 it relays
    bytes both ways and reads none of them, as a corporate or VPC egress proxy does for TLS."""
    listener = socket.create_server(("127.0.0.1", 0))
    tunnels = []

    def tunnel(client: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            head += client.recv(4096)
        host, port = head.split()[1].decode().rsplit(":", 1)
        upstream = socket.create_connection((host, int(port)))
        tunnels.append(f"{host}:{port}")
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        relay(client, upstream)

    def accept() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=tunnel, args=(client,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}", tunnels
    listener.close()


def test_the_pin_holds_through_an_https_proxy(make_client, sf_pki, connect_proxy, monkeypatch):
    proxy, tunnels = connect_proxy
    monkeypatch.setenv("HTTPS_PROXY", proxy)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    wrong = make_client(ca_bundle=None, server_thumbprint="00" * 20)
    with pytest.raises(TlsError):
        wrong.get_node_info("seed-0")
    pinned = make_client(ca_bundle=None, server_thumbprint=sf_pki.server.sha1_thumbprint)
    assert pinned.get_node_info("seed-0").name == "seed-0"
    assert len(tunnels) >= 2  # both went through the proxy


def test_insecure_must_be_asked_for(sf_emulator, sf_pki, make_client, stranger_pki, monkeypatch):
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", stranger_pki.ca_path)
    cert = (sf_pki.client.cert_path, sf_pki.client.key_path)

    with pytest.raises(ValueError, match="ca_bundle, server_thumbprint, or insecure"):
        ServiceFabricClient(sf_emulator.endpoint, client_certificate=cert)
    with pytest.raises(ValueError, match="choose one"):
        ServiceFabricClient(sf_emulator.endpoint, ca_bundle=sf_pki.ca_path, insecure=True)
    with pytest.raises(ValueError, match="not a file"):
        ServiceFabricClient(sf_emulator.endpoint, ca_bundle="/nonexistent/ca.pem")

    with pytest.warns(Warning):  # urllib3 says so on every unverified request
        node = make_client(ca_bundle=None, insecure=True).get_node_info("seed-0")
    assert node.name == "seed-0"


def test_pem_text_is_written_to_private_files(sf_pki, tmp_path, make_client):
    written = write_client_certificate(
        sf_pki.client.cert_pem, sf_pki.client.key_pem, directory=str(tmp_path)
    )

    for path in (written.cert_path, written.key_path):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(written.key_path)).st_mode) == 0o700
    with open(written.key_path, encoding="ascii") as handle:
        assert handle.read().strip() == sf_pki.client.key_pem.strip()

    assert make_client(client_certificate=written).get_node_info("seed-0") is not None

    remove_client_certificate(written)
    assert not os.path.exists(os.path.dirname(written.cert_path))


def test_pem_helper_rejects_text_that_is_not_pem(sf_pki, tmp_path):
    with pytest.raises(ValueError, match="cert_pem"):
        write_client_certificate("not a cert", sf_pki.client.key_pem, directory=str(tmp_path))
    with pytest.raises(ValueError, match="key_pem"):
        write_client_certificate(sf_pki.client.cert_pem, "not a key", directory=str(tmp_path))
    assert list(tmp_path.iterdir()) == []
