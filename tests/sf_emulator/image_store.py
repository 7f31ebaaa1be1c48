"""The image store (the native image store: the File Store Service) behind the gateway's
/ImageStore routes: files, and the upload sessions that write them chunk by chunk.

A model of what the open-source runtime does (microsoft/service-fabric, newest snapshot; paths
under src/prod/src/):
- httpgateway/imagestorehandler.cpp (ISH): the routes; GetRequestBody parses Content-Range;
  UploadChunk, ListUploadSessionBySessionId, DeleteUploadSession, CommitUploadSession
- Management/ImageStore/NativeImageStore.cpp (NIS): UploadChunkAsyncOperation,
  CommitUploadSessionAsyncOperation, what they check before the File Store Service acts
- Management/FileStoreService/ (FSS): uploadsessionmap.cpp, UploadSessionMetadata.cpp
  (AddRange, GetNextExpectedRanges, GetSortedStagingLocation),
  processcommituploadsessionrequestasyncoperation.cpp, FileStoreServiceConfig.h
- Management/HttpTransport/HttpUtil.cpp ErrorCodeToHttpStatus (HU): HTTP statuses
Each rule names its function. What no source says is marked as such.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from .failover_manager import EmulatedFabricError

# FileStoreServiceConfig.h UploadSessionTimeout: a session is dropped this long after its last
# chunk (uploadsessionmap.cpp ProcessCleanupPeriodicTask). The real cleanup runs every
# ProcessPendingCleanupInterval (5 min), so a session lives 30 to 35 min; the emulator drops it
# at 30 exactly.
UPLOAD_SESSION_TIMEOUT_SECONDS = 30 * 60

RANGE_NOT_SATISFIABLE = (400, "FABRIC_E_UPLOAD_SESSION_RANGE_NOT_SATISFIABLE")  # HU: BadRequest
INVALID_UPLOAD_SESSION_ID = (400, "FABRIC_E_INVALID_UPLOAD_SESSION_ID")  # HU: BadRequest
UPLOAD_SESSION_ID_CONFLICT = (409, "FABRIC_E_UPLOAD_SESSION_ID_CONFLICT")  # HU: Conflict
INVALID_ARGUMENT = (400, "E_INVALIDARG")  # HU: E_INVALIDARG -> BadRequest


def _error(answer: tuple[int, str], message: str) -> EmulatedFabricError:
    return EmulatedFabricError(answer[0], answer[1], message)


def normalise(path: str) -> str:
    """FSS ProcessRequestAsyncOperation::NormalizeStoreRelativePath: separators unified, spaces
    and separators trimmed at both ends (the emulator keeps '/'; Windows keeps '\\'). Case is kept:
    the emulator's store is case-sensitive where Windows' is not (no source: assumed)."""
    return path.replace("\\", "/").strip().strip("/")


@dataclass(frozen=True)
class Upload:
    """A PUT's body as the image store handler takes it (ISH GetRequestBody streams any PUT's body
    into a file), with the request's Content-Range header, or None when it had none."""

    content_range: str | None
    data: bytes


@dataclass
class StoredFile:
    data: bytes
    upload_request_id: str | None = None  # FSS FileMetadata.UploadRequestId: the session that wrote it


@dataclass
class UploadSession:
    """FSS UploadSessionMetadata: the path and size fixed when the first chunk created it, the
    received ranges merged into edges, the chunks as they came."""

    path: str
    session_id: str
    file_size: int
    modified: float
    edges: list[list[int]] = field(default_factory=list)  # sorted [start, end], inclusive
    received: list[tuple[int, int, bytes]] = field(default_factory=list)

    def expected_ranges(self) -> list[tuple[int, int]]:
        """UploadSessionMetadata::GetNextExpectedRanges: the gaps between the edges. A session of
        0 bytes always expects (0, 0), so it can never be committed (NIS commit refuses while any
        range is expected)."""
        if self.file_size == 0:
            return [(0, 0)]
        gaps, start = [], 0
        for first, last in self.edges:
            if first > start:
                gaps.append((start, first - 1))
            start = max(start, last + 1)
        if start < self.file_size:
            gaps.append((start, self.file_size - 1))
        return gaps

    def add_range(self, start: int, end: int, data: bytes) -> None:
        """UploadSessionMetadata::AddRange: a range inside an edge already is success, and nothing
        is kept; one that overlaps an edge partly is refused; otherwise it is kept and merged with
        the edges it touches."""
        if self.file_size == 0 and start != end:
            raise _error(INVALID_ARGUMENT, "a session of 0 bytes takes the range 0-0 only")
        if start > end:
            raise _error(INVALID_ARGUMENT, f"range {start}-{end}")
        for first, last in self.edges:
            if first <= start and end <= last:
                return
        for first, last in self.edges:
            if first <= end and start <= last:
                raise _error(RANGE_NOT_SATISFIABLE, f"range {start}-{end} overlaps {first}-{last}")
        self.edges.append([start, end])
        self.edges.sort()
        merged: list[list[int]] = []
        for edge in self.edges:
            if merged and merged[-1][1] + 1 == edge[0]:
                merged[-1][1] = edge[1]
            else:
                merged.append(edge)
        self.edges = merged
        self.received.append((start, end, data))

    def to_json(self) -> dict[str, Any]:
        # UploadSessionInfo (REST reference); 64-bit numbers as strings, as the gateway writes them.
        return {
            "StoreRelativePath": self.path,
            "SessionId": self.session_id,
            "ModifiedDate": "2026-01-01T00:00:00.000Z",  # no source needed: nothing reads it here
            "FileSize": str(self.file_size),
            "ExpectedRanges": [{"StartPosition": str(s), "EndPosition": str(e)} for s, e in self.expected_ranges()],
        }


def _content_range(header: str | None) -> tuple[int, int, int]:
    """ISH GetRequestBody (Windows): (start, end, file size) from Content-Range.

    No header (or an empty one) leaves all three at 0, which the handler passes on as they are.
    A leading "bytes" is dropped, then "{start}-{end}/{size}": not two parts around '/', or a
    size or position that is not a number, is RangeNotSatisfiable; a first part that is not two
    numbers around '-' leaves start and end at 0 (StringUtility::Split drops empty tokens, so
    "-5/9" is one token). start > end or end > size is RangeNotSatisfiable: end == size passes."""
    if not header:
        return 0, 0, 0
    text = header.strip()
    if text.startswith("bytes"):
        text = text[len("bytes"):].strip()
    parts = [part for part in text.split("/") if part]
    number = re.compile(r"^[0-9]+$")  # TryFromWString<uint64> (no source read for its exact grammar: assumed digits)
    if len(parts) != 2 or not number.match(parts[1]):
        raise _error(RANGE_NOT_SATISFIABLE, f"Content-Range {header!r}")
    size, start, end = int(parts[1]), 0, 0
    positions = [token for token in parts[0].split("-") if token]
    if len(positions) == 2:
        if not (number.match(positions[0]) and number.match(positions[1])):
            raise _error(RANGE_NOT_SATISFIABLE, f"Content-Range {header!r}")
        start, end = int(positions[0]), int(positions[1])
    if start > end or end > size:
        raise _error(RANGE_NOT_SATISFIABLE, f"Content-Range {header!r}")
    return start, end, size


def _session_id(query: dict[str, str], refusal: tuple[int, str]) -> str:
    """UriArgumentParser::TryGetUploadSessionId: `session-id` as a GUID. UploadChunk and
    GetUploadSession refuse a missing, malformed or empty one with InvalidUploadSessionId; Delete
    and Commit refuse a missing or malformed one with InvalidArgument, and the File Store Service
    an empty one likewise (ValidateRequest)."""
    try:
        parsed = uuid.UUID(query.get("session-id", ""))
    except ValueError:
        raise _error(refusal, "session-id is not a GUID") from None
    if parsed.int == 0:
        raise _error(refusal, "session-id is the empty GUID")
    return str(parsed)


class ImageStore:
    def __init__(self, clock: Any) -> None:
        self.clock = clock
        self.files: dict[str, StoredFile] = {}
        self.sessions: dict[str, UploadSession] = {}

    def put(self, path: str, data: bytes) -> None:
        """A file put there some other way (Copy-ServiceFabricClusterPackage)."""
        self.files[normalise(path)] = StoredFile(data)

    def file(self, path: str) -> bytes | None:
        stored = self.files.get(normalise(path))
        return stored.data if stored else None

    def _live(self, session_id: str) -> UploadSession | None:
        session = self.sessions.get(session_id)
        if session is not None and self.clock() - session.modified >= UPLOAD_SESSION_TIMEOUT_SECONDS:
            del self.sessions[session_id]  # FSS UploadSessionMap::ProcessCleanupPeriodicTask
            return None
        return session

    # -- the gateway's routes -------------------------------------------------------------------

    def upload_chunk(self, path: str, query: dict[str, str], body: Any) -> None:
        upload = body if isinstance(body, Upload) else Upload(None, b"")
        start, end, size = _content_range(upload.content_range)  # ISH GetRequestBody, before the handler
        session_id = _session_id(query, INVALID_UPLOAD_SESSION_ID)  # ISH UploadChunk
        path = normalise(path)
        # NIS UploadChunkAsyncOperation::OnStart: the range against the size it names.
        if size < end or start > end:
            raise _error(RANGE_NOT_SATISFIABLE, f"{start}-{end}/{size}")
        session = self._live(session_id)
        if session is None:
            # NIS OnListUploadSessionComplete: no such session -> CreateUploadSession, then the
            # chunk, unchecked against any expected range (a first chunk ending at `size` passes
            # here and makes the session uncommittable: GetSortedStagingLocation).
            session = UploadSession(path, session_id, size, self.clock())
            self.sessions[session_id] = session
        else:
            if session.path != path:  # NIS: another path under this id -> UploadSessionIdConflict
                raise _error(UPLOAD_SESSION_ID_CONFLICT, f"session {session_id} uploads {session.path}")
            if session.file_size != size:  # NIS: "Session file size mismatch" -> InvalidArgument
                raise _error(INVALID_ARGUMENT, f"session {session_id} uploads {session.file_size} bytes")
            # NIS: the chunk must lie inside one expected range, so a chunk sent twice is refused.
            if not any(first <= start and end <= last for first, last in session.expected_ranges()):
                raise _error(RANGE_NOT_SATISFIABLE, f"{start}-{end} is not expected")
        # The body's length is not compared with the range anywhere on this path (ISH streams it
        # to a file; FSS ProcessUploadChunkRequestAsyncOperation stages it as it is): a wrong length
        # surfaces at the commit, as a merged size that differs.
        session.add_range(start, end, upload.data)  # FSS UploadChunkAsyncOperation -> AddRange
        session.modified = self.clock()  # AddRange: lastModifiedTime_

    def get_upload_session(self, query: dict[str, str]) -> tuple[int, Any]:
        session_id = _session_id(query, INVALID_UPLOAD_SESSION_ID)  # ISH ListUploadSessionBySessionId
        session = self._live(session_id)
        if session is None:
            # FSS ProcessListUploadSessionRequestAsyncOperation::EndOperation turns NotFound into
            # an empty list; ISH OnListUploadSessionComplete answers an empty list 204, no body.
            return 204, None
        return 200, {"UploadSessions": [session.to_json()]}

    def delete_upload_session(self, query: dict[str, str]) -> None:
        session_id = _session_id(query, INVALID_ARGUMENT)  # ISH DeleteUploadSession
        if self._live(session_id) is None:
            # FSS UploadSessionMap::DeleteUploadSessionMapEntry: NotFound, an internal code; HU
            # maps ErrorCodeValue::NotFound to 404. Its text in the body, "NotFound"
            # (ErrorCodeValue.cpp), assumed to reach the gateway unchanged: no source read for the
            # hop between the File Store Service and the gateway.
            raise EmulatedFabricError(404, "NotFound", f"upload session {session_id}")
        del self.sessions[session_id]  # and its staged chunks

    def commit_upload_session(self, query: dict[str, str]) -> None:
        session_id = _session_id(query, INVALID_ARGUMENT)  # ISH CommitUploadSession
        session = self._live(session_id)
        if session is None:  # NIS CommitUploadSessionAsyncOperation: "Invalid SessionId"
            raise _error(INVALID_ARGUMENT, f"no upload session {session_id}")
        if session.expected_ranges():  # NIS: "Incompleted session"
            raise _error(INVALID_ARGUMENT, f"upload session {session_id} still expects {session.expected_ranges()}")
        stored = self.files.get(session.path)
        if stored is not None and stored.upload_request_id == session_id:
            return  # FSS CommitUploadSessionAsyncOperation::OnStart: committed already -> success
        # FSS UploadSessionMetadata::GetSortedStagingLocation: the edges must be exactly 0..size-1.
        if session.edges != [[0, session.file_size - 1]]:
            raise _error(INVALID_ARGUMENT, f"upload session {session_id} holds {session.edges}")
        # FSS BeginJoinChunksAsyncOperation: the chunks joined in order, then their size checked
        # (IDS_FSS_UnexpectedMergeSize -> InvalidArgument).
        joined = b"".join(data for _, _, data in sorted(session.received, key=lambda chunk: chunk[:2]))
        if len(joined) != session.file_size:
            raise _error(INVALID_ARGUMENT, f"merged size {len(joined)} is not {session.file_size}")
        # FileUploadAsyncOperation with shouldOverwrite: a file at the path is replaced (the REST
        # reference's Upload File Chunk page says the same). The session stays until it expires.
        self.files[session.path] = StoredFile(joined, upload_request_id=session_id)
