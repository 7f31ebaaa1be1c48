"""The admin client certificate as files, which is how `requests` wants it.

Lambdas fetch the PEM text from Secrets Manager; this writes it to a private temporary
directory (0700) as two files readable only by the owner (0600).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import tempfile
from dataclasses import dataclass

_PEM_CERTIFICATE = re.compile(
    r"-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----", re.DOTALL
)


@dataclass(frozen=True)
class ClientCertificate:
    cert_path: str
    key_path: str

    def as_requests_cert(self) -> tuple[str, str]:
        return (self.cert_path, self.key_path)


def _write_private(path: str, text: str) -> None:
    # O_EXCL + mode at creation: the file is never readable by others, not even briefly.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(text if text.endswith("\n") else text + "\n")


def write_client_certificate(
    cert_pem: str, key_pem: str, *, directory: str | None = None
) -> ClientCertificate:
    """Write PEM certificate (chain) and private key to new 0600 files; return their paths."""
    if "-----BEGIN CERTIFICATE-----" not in cert_pem:
        raise ValueError("cert_pem holds no PEM certificate")
    if "PRIVATE KEY-----" not in key_pem:
        raise ValueError("key_pem holds no PEM private key")
    folder = tempfile.mkdtemp(prefix="sf-admin-cert-", dir=directory)
    cert_path = os.path.join(folder, "client.crt")
    key_path = os.path.join(folder, "client.key")
    _write_private(cert_path, cert_pem)
    _write_private(key_path, key_pem)
    return ClientCertificate(cert_path=cert_path, key_path=key_path)


def remove_client_certificate(certificate: ClientCertificate) -> None:
    """Delete the files written by write_client_certificate (and their directory)."""
    folder = os.path.dirname(certificate.cert_path)
    if os.path.basename(folder).startswith("sf-admin-cert-"):
        shutil.rmtree(folder, ignore_errors=True)
    else:
        for path in (certificate.cert_path, certificate.key_path):
            if os.path.exists(path):
                os.remove(path)


def certificate_thumbprint(certificate_pem: str) -> str:
    """SHA-1 of the first certificate's DER bytes, upper-case hex: how Windows and Service
    Fabric name a certificate, and what `server_thumbprint` pins."""
    match = _PEM_CERTIFICATE.search(certificate_pem)
    if not match:
        raise ValueError("no PEM certificate where one was expected")
    der = base64.b64decode("".join(match.group(1).split()))
    return hashlib.sha1(der).hexdigest().upper()
