"""A throwaway certificate authority for local TLS with client certificates: the Service Fabric
gateway emulator's (tests/sf_emulator/certs.py) and the local mosquitto's (devtools/local_mosquitto.py).

EC P-256 keys (fast to make, and accepted by AWS IoT and Service Fabric alike), valid from five
minutes ago for two days, made at run time so that no key material is ever committed. Callers
write the certificate and key in the file layout their server or client reads.
"""

from __future__ import annotations

import datetime
import ipaddress

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _validity(builder: x509.CertificateBuilder) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return builder.not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(
        now + datetime.timedelta(days=2)
    )


class ThrowawayCa:
    """A self-signed CA that issues leaf certificates for 127.0.0.1 servers and their clients."""

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
                    digital_signature=True, content_commitment=False, key_encipherment=False,
                    data_encipherment=False, key_agreement=False, key_cert_sign=True,
                    crl_sign=True, encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )  # fmt: skip
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False
            )
        )
        self.cert = _validity(builder).sign(self.key, hashes.SHA256())

    def issue(
        self, common_name: str, *, server: bool
    ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        """A leaf certificate and its key: for TLS servers (with localhost and 127.0.0.1 as
        names) when `server`, else for TLS clients."""
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
        return _validity(builder).sign(self.key, hashes.SHA256()), key
