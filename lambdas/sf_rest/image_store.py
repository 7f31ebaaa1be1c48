"""A large file into the image store over the REST API: an upload session of chunks, resumable,
then committed (Service Fabric REST reference: Upload File Chunk, Get Image Store Upload Session
By Id, Commit Image Store Upload Session, Delete Image Store Upload Session; the UploadSessionInfo
and UploadChunkRange models).

What the runtime does with a session, read in microsoft/service-fabric (src/prod/src/...):
- Management/ImageStore/NativeImageStore.cpp, UploadChunkAsyncOperation: the first chunk of an
  unknown session id creates the session (its path and file size); every later chunk must lie
  within one range the session still expects, or the answer is
  FABRIC_E_UPLOAD_SESSION_RANGE_NOT_SATISFIABLE. So a chunk sent again after its answer was lost
  is refused that way: the session, not that answer, says whether the store has the bytes.
- The same file, CommitUploadSessionAsyncOperation: a commit while the session still expects any
  range is E_INVALIDARG.
- Management/FileStoreService/uploadsessionmap.cpp: sessions live in the memory of the File
  Store Service's primary replica, dropped UploadSessionTimeout (30 min,
  FileStoreServiceConfig.h) after their last chunk, and lost at a failover. A session can be
  resumed within that time and not after it: the store then starts it afresh with the next chunk.
- Management/FileStoreService/processcommituploadsessionrequestasyncoperation.cpp: a commit of
  the session that already wrote the file answers success, so a commit is safe to send again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, BinaryIO, Protocol

from .errors import FabricError

RANGE_NOT_SATISFIABLE = "FABRIC_E_UPLOAD_SESSION_RANGE_NOT_SATISFIABLE"
# FileStoreServiceConfig.h UploadSessionTimeout; the REST reference's Commit page says the same
# ("30 minutes after the last chunk received").
UPLOAD_SESSION_TIMEOUT = timedelta(minutes=30)
# Rounds of "send what the session expects, then ask it again" before giving up: the store can
# lose chunks it acknowledged (a failover of its primary drops the session).
MAX_PASSES = 3
# The commit joins the staged chunks into the file and writes it into the store, replicated to
# the File Store Service's secondaries (processcommituploadsessionrequestasyncoperation.cpp): for
# a runtime package of a gigabyte and more, longer than the 30 s every other call is given. No
# source gives a duration: assumed. A commit that outlives it goes on (the retry budget, 60 s, is
# spent by then), and the same command run again commits the session, or finds it committed.
COMMIT_SECONDS = 600


def store_relative_path(path: str) -> str:
    """A path in the image store as the File Store Service keeps it, relative to the root
    (ProcessRequestAsyncOperation::NormalizeStoreRelativePath trims the separators at both ends;
    forward slashes here, which the REST path carries)."""
    return path.replace("\\", "/").strip().strip("/")


def _int(value: Any) -> int:
    return int(str(value))  # the REST API writes 64-bit numbers as strings


@dataclass(frozen=True)
class UploadSession:
    """UploadSessionInfo: what the store knows of a session. `expected_ranges` are the inclusive
    byte ranges it has not received yet (UploadChunkRange)."""

    store_relative_path: str
    session_id: str
    file_size: int
    expected_ranges: tuple[tuple[int, int], ...]

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> UploadSession:
        return cls(
            store_relative_path=str(document.get("StoreRelativePath") or ""),
            session_id=str(document.get("SessionId") or ""),
            file_size=_int(document.get("FileSize") or 0),
            expected_ranges=tuple(
                (_int(item["StartPosition"]), _int(item["EndPosition"])) for item in document.get("ExpectedRanges") or []
            ),
        )

    @property
    def missing_bytes(self) -> int:
        return sum(end - start + 1 for start, end in self.expected_ranges)

    def expects_any_of(self, start: int, end: int) -> bool:
        return any(first <= end and start <= last for first, last in self.expected_ranges)


def chunks(ranges: tuple[tuple[int, int], ...], chunk_bytes: int) -> Iterator[tuple[int, int]]:
    """The inclusive (start, end) of each chunk that covers `ranges`, none longer than chunk_bytes."""
    if chunk_bytes < 1:
        raise ValueError("chunk_bytes must be at least 1")
    for first, last in ranges:
        for start in range(first, last + 1, chunk_bytes):
            yield start, min(start + chunk_bytes - 1, last)


class ImageStoreClient(Protocol):
    def upload_file_chunk(self, content_path: str, session_id: str, start: int, data: bytes, file_size: int) -> None: ...
    def get_upload_session(self, session_id: str) -> UploadSession | None: ...
    def commit_upload_session(self, session_id: str) -> None: ...
    def delete_upload_session(self, session_id: str) -> None: ...


class ImageStoreUploadError(FabricError):
    """The upload stopped. `resumable`: the session was kept, and the same upload (same session id)
    sent again within UPLOAD_SESSION_TIMEOUT sends only what the store lacks; otherwise the store
    refused it for good and the session was deleted (`session_deleted`) where it could be."""

    def __init__(self, cause: FabricError, *, resumable: bool, done_bytes: int, session_deleted: bool = False) -> None:
        super().__init__(cause.code, cause.message, status=cause.status, method=cause.method, path=cause.path,
                         attempts=cause.attempts)
        self.resumable = resumable
        self.done_bytes = done_bytes
        self.session_deleted = session_deleted


@dataclass(frozen=True)
class UploadOutcome:
    session_id: str
    file_size: int
    resumed_bytes: int  # what the store had from an earlier run of the same session
    sent_bytes: int


def upload_file(
    client: ImageStoreClient,
    source: BinaryIO,
    *,
    content_path: str,
    file_size: int,
    session_id: str,
    chunk_bytes: int,
    progress: Callable[[int], None] = lambda done: None,
) -> UploadOutcome:
    """Send `source` (file_size bytes) to the image store at content_path in chunks of at most
    chunk_bytes, resuming the session if the store still has part of it, then commit.

    Each chunk goes through the client's retries (a lost connection, a timeout, a 503). A definite
    refusal (HTTP 4xx) deletes the session, since what it holds cannot be committed; anything else
    keeps it for a later run. A chunk answered NotFound (a failover of the store's primary) is
    sent again once the session says it still expects it. `progress` gets the bytes the store has
    so far after each chunk."""
    if file_size < 1:
        raise ValueError("an upload session needs at least one byte (the store never commits an empty one)")
    done = 0

    def stopped(error: FabricError) -> ImageStoreUploadError:
        if isinstance(error, ImageStoreUploadError):
            return error
        # Kept, not deleted: NotFound (404) is what a chunk or a commit meets while the File Store
        # Service's primary moves (processuploadchunkrequestasyncoperation.cpp answers NotFound "to
        # simulate failover"; HttpUtil::ErrorCodeToHttpStatus makes it 404), and a session id
        # conflict (409) is another run's session, not this one's to delete.
        if error.status is not None and 400 <= error.status < 500 and error.status not in (404, 409):
            deleted = _delete_quietly(client, session_id)
            return ImageStoreUploadError(error, resumable=False, done_bytes=done, session_deleted=deleted)
        return ImageStoreUploadError(error, resumable=True, done_bytes=done)

    try:
        session = client.get_upload_session(session_id)
        # The store compares a session's path case-sensitively (NativeImageStore.cpp
        # UploadChunkAsyncOperation: StringUtility::Compare), and so does this.
        theirs = (store_relative_path(session.store_relative_path), session.file_size) if session else None
        if theirs is not None and theirs != (store_relative_path(content_path), file_size):
            raise ImageStoreUploadError(
                FabricError("UPLOAD_SESSION_OF_ANOTHER_FILE", f"session {session_id} uploads {session.file_size} bytes "
                            f"to {session.store_relative_path}, not {file_size} to {content_path}"),
                resumable=False, done_bytes=0)  # fmt: skip
        expected = session.expected_ranges if session is not None else ((0, file_size - 1),)
        resumed = file_size - (session.missing_bytes if session is not None else file_size)
        done = resumed
        progress(done)
        sent = 0
        for _ in range(MAX_PASSES):
            for start, end in chunks(expected, chunk_bytes):
                source.seek(start)
                data = source.read(end - start + 1)
                if len(data) != end - start + 1:
                    raise OSError(f"the file ended at byte {start + len(data)} of {file_size}: did it change?")
                if not _send_chunk(client, content_path, session_id, start, data, file_size):
                    continue  # not taken: the next pass sends it
                sent += len(data)
                done += len(data)
                progress(done)
            session = client.get_upload_session(session_id)
            if session is not None and not session.expected_ranges:
                break
            # The store lost what it had acknowledged (its primary moved, or the session expired).
            expected = session.expected_ranges if session is not None else ((0, file_size - 1),)
            done = file_size - (session.missing_bytes if session is not None else file_size)
            progress(done)
        else:
            raise ImageStoreUploadError(
                FabricError("UPLOAD_INCOMPLETE", f"the store still expects {expected} after {MAX_PASSES} passes"),
                resumable=True, done_bytes=done)  # fmt: skip
        client.commit_upload_session(session_id)
    except FabricError as error:
        raise stopped(error) from error
    return UploadOutcome(session_id=session_id, file_size=file_size, resumed_bytes=resumed, sent_bytes=sent)


def _send_chunk(client: ImageStoreClient, content_path: str, session_id: str, start: int, data: bytes, file_size: int) -> bool:
    """Whether the store has the chunk now."""
    end = start + len(data) - 1
    try:
        client.upload_file_chunk(content_path, session_id, start, data, file_size)
    except FabricError as error:
        if error.code == RANGE_NOT_SATISFIABLE:
            # Refused as a range the session does not expect: after a retry, that is the answer to
            # an attempt that got through before. The session says.
            session = client.get_upload_session(session_id)
            if session is None or session.expects_any_of(start, end):
                raise
        elif error.status == 404:
            # The store's primary moved (see upload_file): the pass's closing look at the session
            # says what it lacks, and the next pass sends it.
            return False
        else:
            raise
    return True


def _delete_quietly(client: ImageStoreClient, session_id: str) -> bool:
    try:
        client.delete_upload_session(session_id)
    except FabricError:
        return False  # it expires by itself (UPLOAD_SESSION_TIMEOUT)
    return True
