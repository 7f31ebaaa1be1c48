"""A file into the image store in chunks (sf_rest.image_store.upload_file) through the REST client,
over real HTTPS to the emulator's image store (tests/sf_emulator/image_store.py, each rule citing
microsoft/service-fabric): retries of a chunk, an answer lost after the store took the chunk, an
upload resumed from the session, and a refusal that deletes the session."""

from __future__ import annotations

import io
import os

import pytest
from sf_rest import FabricError
from sf_rest.image_store import ImageStoreUploadError, chunks, upload_file

pytestmark = pytest.mark.integration  # starts the HTTPS emulator

CAB = "MicrosoftServiceFabric.11.5.0.1.cab"
SESSION = "2b7d0c59-5e0b-4d6f-8a3e-91c2f5a0b7d4"
CHUNK = 64 * 1024
PACKAGE = os.urandom(5 * CHUNK + 1000)  # six chunks, the last one short
PUT = r"/ImageStore/.*/\$/UploadChunk"


def _upload(client, *, seen=None, session=SESSION):
    return upload_file(client, io.BytesIO(PACKAGE), content_path=CAB, file_size=len(PACKAGE), session_id=session,
                       chunk_bytes=CHUNK, progress=(seen if seen is not None else []).append)


def _ranges(emulator) -> list[str]:
    return [r.body["Content-Range"] for r in emulator.requests_to("PUT", PUT)]


def test_chunks_cover_each_range_without_crossing_its_end():
    assert list(chunks(((0, 9), (20, 24)), 4)) == [(0, 3), (4, 7), (8, 9), (20, 23), (24, 24)]


def test_an_upload_sends_every_chunk_once_then_commits(sf_client, sf_cluster, sf_emulator):
    seen = []
    outcome = _upload(sf_client, seen=seen)

    assert sf_cluster.image_store.file(CAB) == PACKAGE
    assert (outcome.resumed_bytes, outcome.sent_bytes) == (0, len(PACKAGE))
    assert _ranges(sf_emulator) == [f"bytes {start}-{min(start + CHUNK, len(PACKAGE)) - 1}/{len(PACKAGE)}"
                                    for start in range(0, len(PACKAGE), CHUNK)]
    assert seen == [0, *range(CHUNK, len(PACKAGE), CHUNK), len(PACKAGE)]
    (commit,) = sf_emulator.requests_to("POST", r"/ImageStore/\$/CommitUploadSession")
    assert commit.status == 200
    assert commit.query["timeout"] == "600"  # the commit joins and writes the whole file: COMMIT_SECONDS
    assert {r.query["timeout"] for r in sf_emulator.requests_to("PUT", PUT)} == {"1"}  # the client's own (TEST_TIMEOUTS)


def test_a_chunk_failing_transiently_is_sent_again_by_the_clients_retries(sf_client, sf_cluster, sf_emulator, fake_time):
    sf_emulator.inject_error(503, "FABRIC_E_NOT_READY", times=2, method="PUT")

    _upload(sf_client)

    assert sf_cluster.image_store.file(CAB) == PACKAGE
    assert _ranges(sf_emulator)[:3] == [f"bytes 0-{CHUNK - 1}/{len(PACKAGE)}"] * 3  # the same chunk, whole
    assert fake_time.sleeps == [0.5, 1.0]  # the client's retry policy, not a loop of the uploader's


def _before_chunk(client, number: int, action) -> list[int]:
    """Run `action` just before the client sends its number-th chunk (1-based); the starts sent."""
    sent, put = [], client.upload_file_chunk

    def counted(content_path, session_id, start, data, file_size):
        sent.append(start)
        if len(sent) == number:
            action()
        return put(content_path, session_id, start, data, file_size)

    client.upload_file_chunk = counted
    return sent


def test_a_chunk_whose_answer_was_lost_is_not_taken_for_a_failure(sf_client, sf_cluster, sf_emulator):
    # The store takes chunk 2 and its answer never arrives; the client's retry is refused as a
    # range the session no longer expects, and the session shows the store has it.
    _before_chunk(sf_client, 2, lambda: sf_emulator.inject_lost_answer(method="PUT", path=PUT))

    outcome = _upload(sf_client)

    assert sf_cluster.image_store.file(CAB) == PACKAGE
    assert [r.status for r in sf_emulator.requests_to("PUT", PUT)] == [200, None, 400, 200, 200, 200, 200]
    assert outcome.sent_bytes == len(PACKAGE)


def test_an_interrupted_upload_keeps_its_session_and_resumes_where_the_store_stopped(sf_client, sf_cluster,
                                                                                    sf_emulator):
    # Two chunks get through, then every attempt at the third is dropped (fast_retry: 4 attempts).
    _before_chunk(sf_client, 3, lambda: sf_emulator.inject_drop(times=4, method="PUT", path=PUT))
    with pytest.raises(ImageStoreUploadError) as stopped:
        _upload(sf_client)
    assert stopped.value.resumable and not stopped.value.session_deleted
    assert stopped.value.done_bytes == 2 * CHUNK and stopped.value.attempts == 4
    assert SESSION in sf_cluster.image_store.sessions  # kept for the next run
    assert not sf_emulator.requests_to("DELETE", r"/ImageStore/.*")

    del sf_client.upload_file_chunk  # the client's own method again
    sf_emulator.clear_log()
    seen = []
    outcome = _upload(sf_client, seen=seen)

    assert sf_cluster.image_store.file(CAB) == PACKAGE
    assert outcome.resumed_bytes == 2 * CHUNK and outcome.sent_bytes == len(PACKAGE) - 2 * CHUNK
    assert _ranges(sf_emulator)[0] == f"bytes {2 * CHUNK}-{3 * CHUNK - 1}/{len(PACKAGE)}"
    assert seen[0] == 2 * CHUNK  # the progress starts from what the store had


def test_chunks_the_store_lost_are_sent_again_before_the_commit(sf_client, sf_cluster, sf_emulator):
    # As after a failover of the File Store Service's primary: the session is gone mid-upload.
    sent = _before_chunk(sf_client, 4, sf_cluster.image_store.sessions.clear)

    _upload(sf_client)

    assert sf_cluster.image_store.file(CAB) == PACKAGE
    assert sent[6:] == [0, CHUNK, 2 * CHUNK]  # the second pass: what the new session lacked


def test_a_chunk_met_by_a_failover_is_sent_again_and_the_session_is_kept(sf_client, sf_cluster, sf_emulator):
    # The File Store Service answers NotFound while its primary moves (processuploadchunkrequest
    # asyncoperation.cpp, "to simulate failover"; HttpUtil::ErrorCodeToHttpStatus: 404). The code
    # text the gateway writes for it is not sourced: NotFound, as the emulator's delete answers.
    sf_emulator.inject_error(404, "NotFound", method="PUT", path=PUT, skip=2)  # the third chunk

    outcome = _upload(sf_client)

    assert sf_cluster.image_store.file(CAB) == PACKAGE
    assert [r.status for r in sf_emulator.requests_to("PUT", PUT)] == [200, 200, 404, 200, 200, 200, 200]
    assert _ranges(sf_emulator)[-1] == f"bytes {2 * CHUNK}-{3 * CHUNK - 1}/{len(PACKAGE)}"  # the second pass
    assert outcome.sent_bytes == len(PACKAGE)
    assert not sf_emulator.requests_to("DELETE", r"/ImageStore/.*")


def test_another_runs_session_is_not_deleted(sf_client, sf_cluster, sf_emulator):
    # Same session id, the path in another case: the store compares paths case-sensitively
    # (NativeImageStore.cpp UploadChunkAsyncOperation), so the session is another file's.
    sf_client.upload_file_chunk(CAB.upper(), SESSION, 0, PACKAGE[:CHUNK], len(PACKAGE))
    with pytest.raises(ImageStoreUploadError) as refused:
        _upload(sf_client)
    assert refused.value.code == "UPLOAD_SESSION_OF_ANOTHER_FILE" and not refused.value.session_deleted
    assert SESSION in sf_cluster.image_store.sessions
    assert not sf_emulator.requests_to("DELETE", r"/ImageStore/.*")


def test_a_refusal_deletes_the_session(sf_client, sf_cluster, sf_emulator):
    # Another file under the same session id (a path the store holds the session for).
    sf_client.upload_file_chunk("other.cab", SESSION, 0, b"x" * 10, len(PACKAGE))
    with pytest.raises(ImageStoreUploadError) as refused:
        _upload(sf_client)
    assert refused.value.code == "UPLOAD_SESSION_OF_ANOTHER_FILE" and not refused.value.resumable

    sf_cluster.image_store.sessions.clear()
    sf_emulator.inject_error(400, "E_INVALIDARG", message="merged size", method="POST", path="CommitUploadSession")
    with pytest.raises(ImageStoreUploadError) as refused:
        _upload(sf_client)
    assert (refused.value.status, refused.value.code) == (400, "E_INVALIDARG")
    assert not refused.value.resumable and refused.value.session_deleted
    assert [r.status for r in sf_emulator.requests_to("DELETE", r"/ImageStore/\$/DeleteUploadSession")] == [200]
    assert sf_cluster.image_store.sessions == {} and sf_cluster.image_store.file(CAB) is None


def test_an_empty_chunk_or_file_is_refused_before_any_call(sf_client, sf_emulator):
    with pytest.raises(ValueError):
        sf_client.upload_file_chunk(CAB, SESSION, 0, b"", 10)
    with pytest.raises(ValueError):
        upload_file(sf_client, io.BytesIO(b""), content_path=CAB, file_size=0, session_id=SESSION, chunk_bytes=CHUNK)
    assert sf_emulator.requests == []
    assert issubclass(ImageStoreUploadError, FabricError)
