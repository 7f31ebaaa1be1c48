"""Throwaway PKI for the emulator: a CA, a server certificate and a client certificate.

Generated at test time (EC P-256, fast) so no key material is ever committed.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


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


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def _validity(builder: x509.CertificateBuilder) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return builder.not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(
        now + datetime.timedelta(days=2)
    )


class CertificateAuthority:
    def __init__(self, common_name: str) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(_name(common_name))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False
            )
        )
        self.cert = _validity(builder).sign(self.key, hashes.SHA256())

    @property
    def pem(self) -> str:
        return self.cert.public_bytes(serialization.Encoding.PEM).decode()

    def issue(self, common_name: str, *, server: bool, directory: Path, stem: str) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
        cert = _validity(builder).sign(self.key, hashes.SHA256())
        cert_pem = cert.public_bytes(serialization.Encoding.PEM).decode()
        cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
        cert_path.write_text(cert_pem)
        key_path.write_text(_key_pem(key))
        key_path.chmod(0o600)
        return Issued(cert_pem, _key_pem(key), str(cert_path), str(key_path))

    def write(self, path: Path) -> str:
        path.write_text(self.pem)
        return str(path)


def make_pki(directory: Path, *, name: str = "sf-test") -> Pki:
    """A cluster CA with a server cert for 127.0.0.1/localhost and an admin client cert."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority(f"{name} cluster CA")
    return Pki(
        ca_path=ca.write(directory / f"{name}-ca.pem"),
        ca_pem=ca.pem,
        server=ca.issue("sf-gateway", server=True, directory=directory, stem=f"{name}-server"),
        client=ca.issue("sf-admin", server=False, directory=directory, stem=f"{name}-client"),
    )
