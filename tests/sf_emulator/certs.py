"""Throwaway PKI for the emulator: a CA, a server certificate and a client certificate.

Generated at test time by devtools/throwaway_ca.py, so no key material is ever committed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from devtools.throwaway_ca import ThrowawayCa


@dataclass(frozen=True)
class Issued:
    cert_pem: str
    key_pem: str
    cert_path: str
    key_path: str

    @property
    def sha1_thumbprint(self) -> str:
        cert = x509.load_pem_x509_certificate(self.cert_pem.encode())
        return cert.fingerprint(hashes.SHA1()).hex().upper()


@dataclass(frozen=True)
class Pki:
    ca_path: str
    ca_pem: str
    server: Issued
    client: Issued

    def gateway_flags(self, endpoint: str) -> list[str]:
        """What an operator's `telemetry cluster ...` command is given to reach the gateway at
        `endpoint` over mutual TLS with the admin client certificate."""
        return ["--endpoint", endpoint, "--client-cert", self.client.cert_path, "--client-key", self.client.key_path,
                "--ca-bundle", self.ca_path]  # fmt: skip


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def _issue(ca: ThrowawayCa, common_name: str, *, server: bool, directory: Path, stem: str) -> Issued:
    cert, key = ca.issue(common_name, server=server)
    cert_pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_path.write_text(cert_pem)
    key_path.write_text(_key_pem(key))
    key_path.chmod(0o600)
    return Issued(cert_pem, _key_pem(key), str(cert_path), str(key_path))


def make_pki(directory: Path, *, name: str = "sf-test") -> Pki:
    """A cluster CA with a server cert for 127.0.0.1/localhost and an admin client cert."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = ThrowawayCa(f"{name} cluster CA")
    ca_pem = ca.cert.public_bytes(serialization.Encoding.PEM).decode()
    ca_path = directory / f"{name}-ca.pem"
    ca_path.write_text(ca_pem)
    return Pki(
        ca_path=str(ca_path),
        ca_pem=ca_pem,
        server=_issue(ca, "sf-gateway", server=True, directory=directory, stem=f"{name}-server"),
        client=_issue(ca, "sf-admin", server=False, directory=directory, stem=f"{name}-client"),
    )
