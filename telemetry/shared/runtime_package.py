"""The runtime package `telemetry cluster upgrade --package` puts into the image store
(MicrosoftServiceFabric.<version>.cab, the Cab link of a release's notes): checked on this
machine before anything is called, then sent in chunks through the REST client's upload session
(sf_rest.image_store), a progress line every 10 %.

Why chunks, and of what size: the gateway takes a chunk of any size (imagestorehandler.cpp streams
a PUT's body to a file; HttpGatewayConfig's MaxEntityBodySize, 4 MiB, bounds only bodies read into
memory, in RequestMessageContext::ReadBodyAsyncOperation), but no timeout bounds a chunk's
transfer (the gateway's request timeout starts once the body is read; the client's read timeout
once it is sent). What bounds the size is what a failure costs: a refused or lost chunk is sent
again whole, the gateway keeps a refused chunk's temporary file on its node
(ImageStoreHandler::OnUploadChunkComplete deletes it only on success), and the commit reads each
chunk whole into memory as it joins them. 8 MiB resends little, and a gigabyte is about 130
chunks, whose per-request cost is small beside their transfer.
Microsoft's own File Store Service tests stage 3 MiB chunks
(processuploadchunkrequestasyncoperation.cpp, EnableChaosDuringFileUpload).

Why resumable: the store keeps a session's chunks for 30 minutes after the last one (sf_rest.
image_store.UPLOAD_SESSION_TIMEOUT). The session id is derived from the store path, the size and
the SHA-256 of the file, so the same command run again after an interruption finds the session
and sends only what the store lacks, with no state kept on this machine; a different file (or
path) is a different session and never mixes with it.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import struct
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from telemetry.shared.errors import OperationFailed, UsageError

MIB = 1024 * 1024
DEFAULT_CHUNK_BYTES = 8 * MIB
MIN_CHUNK_BYTES = 64 * 1024  # the tool's bound: a gigabyte in 64 KiB chunks is already 16,000 calls
MAX_CHUNK_BYTES = 32 * MIB  # the tool's bound: held in memory here and by the commit, resent whole
PROGRESS_STEP_PERCENT = 10
# [MS-CAB] 2.1 CFHEADER: a cabinet starts with the signature "MSCF", then reserved1 (u4), then
# cbCabinet (u4, little-endian), the cabinet's size. A signed cabinet carries its signature after
# those bytes, so a file is at least cbCabinet long; shorter is a download cut off.
CAB_SIGNATURE = b"MSCF"
CAB_HEADER = struct.Struct("<4sII")
# The runtime's name as its release notes link it (MicrosoftAzureServiceFabric.<v>.cab up to 10.x).
# Lower-case .cab only: Image Builder takes a package for a cabinet by a case-sensitive extension
# (ImageBuilderUtility.IsCabFile), and would read another as an XCopy package.
NAMED_VERSION = re.compile(r"(\d+\.\d+\.\d+\.\d+)\.cab$")
# uuid5 namespace of the upload sessions this tool opens (any fixed value; this one is its own).
SESSION_NAMESPACE = uuid.UUID("5b8f3c1e-2f4a-4d7b-9c6e-0a1b2c3d4e5f")
_SIZE = re.compile(r"^\s*([0-9]+)\s*(B|KiB|MiB|GiB)?\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "kib": 1024, "mib": MIB, "gib": 1024 * MIB}


def chunk_size(text: str) -> int:
    """--chunk-size: bytes, or a number with KiB, MiB or GiB."""
    found = _SIZE.match(text)
    if not found:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (such as 8MiB, 512KiB or a number of bytes)")
    size = int(found.group(1)) * _UNITS[(found.group(2) or "b").lower()]
    if not MIN_CHUNK_BYTES <= size <= MAX_CHUNK_BYTES:
        raise argparse.ArgumentTypeError(f"must be {MIN_CHUNK_BYTES // 1024} KiB to {MAX_CHUNK_BYTES // MIB} MiB, "
                                         f"got {text}")
    return size


def mib(size: int) -> str:
    return f"{size / MIB:.1f} MiB"


def chunks(count: int) -> str:
    return f"{count} chunk{'' if count == 1 else 's'}"


def check_file(path: str, version: str) -> None:
    """What can be told of --package without reading it whole; UsageError otherwise."""
    package = Path(path).expanduser()
    if not package.exists():
        raise UsageError(f"--package {path}: no such file")
    if not package.is_file():
        raise UsageError(f"--package {path}: not a file")
    size = package.stat().st_size
    if size == 0:
        raise UsageError(f"--package {path} is empty")
    named = NAMED_VERSION.search(package.name)
    if named and named.group(1) != version:
        raise UsageError(f"--package {package.name} is the runtime {named.group(1)}, not --version {version}")
    with package.open("rb") as source:
        header = source.read(CAB_HEADER.size)
    if len(header) < CAB_HEADER.size or not header.startswith(CAB_SIGNATURE):
        raise UsageError(f"--package {path} is not a cabinet (.cab) file: it does not start with MSCF")
    cabinet_size = CAB_HEADER.unpack(header)[2]
    if size < cabinet_size:
        raise UsageError(f"--package {path} has {size} bytes of the {cabinet_size} its header names: the download "
                         "was cut off; download it again")


@dataclass(frozen=True)
class RuntimePackage:
    path: Path
    size: int
    sha256: str  # upper-case hex, as Get-FileHash prints it

    def session_id(self, store_path: str) -> str:
        from sf_rest.image_store import store_relative_path

        return str(uuid.uuid5(SESSION_NAMESPACE, f"{store_relative_path(store_path)}\n{self.size}\n{self.sha256}"))

    def chunk_count(self, chunk_bytes: int) -> int:
        return -(-self.size // chunk_bytes)

    def describe(self, store_path: str, chunk_bytes: int) -> dict[str, Any]:
        return {"path": str(self.path), "bytes": self.size, "sha256": self.sha256, "store_path": store_path,
                "chunk_bytes": chunk_bytes, "chunks": self.chunk_count(chunk_bytes),
                "session_id": self.session_id(store_path)}


def read(path: str, expected_sha256: str | None) -> RuntimePackage:
    """The package hashed (SHA-256); a hash other than --package-sha256 is refused (UsageError)."""
    package = Path(path).expanduser()
    digest = hashlib.sha256()
    with package.open("rb") as source:
        while block := source.read(MIB):
            digest.update(block)
    sha256 = digest.hexdigest().upper()
    if expected_sha256 and sha256 != expected_sha256.upper():
        raise UsageError(f"--package {path} has SHA-256 {sha256}, not --package-sha256 {expected_sha256.upper()}: "
                         "download it again, or check where the expected hash came from")
    return RuntimePackage(path=package, size=package.stat().st_size, sha256=sha256)


class ProgressLines:
    """A line each time the share the store has passes another PROGRESS_STEP_PERCENT, with the rate
    of this run's sending."""

    def __init__(self, name: str, total: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.name, self.total, self.clock = name, total, clock
        self.started: tuple[float, int] | None = None  # (when, bytes the store had then)
        self.next_mark = 0

    @staticmethod
    def _mark_after(percent: int) -> int:
        return (percent // PROGRESS_STEP_PERCENT + 1) * PROGRESS_STEP_PERCENT

    def __call__(self, done: int) -> None:
        percent = done * 100 // self.total
        if self.started is None:  # the first call: what the store had before this run sent anything
            if done:
                print(f"  resuming: the image store has {mib(done)} of it already", flush=True)
            self.started, self.next_mark = (self.clock(), done), self._mark_after(percent)
            return
        if percent < self.next_mark - PROGRESS_STEP_PERCENT:  # the store lost part of it: count from there
            self.next_mark = self._mark_after(percent)
        if percent < self.next_mark:
            return
        self.next_mark = self._mark_after(percent)
        began, had = self.started
        elapsed = self.clock() - began
        rate = f", {(done - had) / elapsed / MIB:.1f} MiB/s" if elapsed > 0 and done > had else ""
        print(f"uploaded {percent:3d}% of {self.name} ({mib(done)} of {mib(self.total)}){rate}", flush=True)


def upload(client: Any, package: RuntimePackage, store_path: str, chunk_bytes: int, *,
           clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """The package into the image store at store_path; what was done, for the run's document.
    A stop is OperationFailed, worded with what a rerun does."""
    from sf_rest.image_store import UPLOAD_SESSION_TIMEOUT, ImageStoreUploadError, upload_file

    session_id = package.session_id(store_path)
    print(f"uploading {package.path.name} ({mib(package.size)}, SHA-256 {package.sha256}) into the image store at "
          f"{store_path}: {chunks(package.chunk_count(chunk_bytes))} of at most {mib(chunk_bytes)}, upload session "
          f"{session_id}", flush=True)
    keep = int(UPLOAD_SESSION_TIMEOUT.total_seconds() // 60)
    try:
        with package.path.open("rb") as source:
            outcome = upload_file(client, source, content_path=store_path, file_size=package.size,
                                  session_id=session_id, chunk_bytes=chunk_bytes,
                                  progress=ProgressLines(package.path.name, package.size, clock=clock))
    except ImageStoreUploadError as error:
        share = f"{error.done_bytes * 100 // package.size}% ({mib(error.done_bytes)} of {mib(package.size)})"
        if error.resumable:
            raise OperationFailed(
                f"uploading {package.path.name} stopped at {share}: {error}; the image store keeps what it has for "
                f"{keep} minutes after the last chunk: run the same command again to resume (upload session "
                f"{session_id})") from None
        then = ("its upload session was deleted: a run again starts the upload afresh" if error.session_deleted
                else f"upload session {session_id} could not be deleted: a run starts afresh once it expires, {keep} "
                "minutes after its last chunk")
        raise OperationFailed(f"the image store refused {package.path.name} at {share}: {error}; {then}") from None
    print(f"committed {package.path.name} into the image store at {store_path}", flush=True)
    return {"store_path": store_path, "bytes": package.size, "sha256": package.sha256, "session_id": session_id,
            "resumed_bytes": outcome.resumed_bytes, "sent_bytes": outcome.sent_bytes}
