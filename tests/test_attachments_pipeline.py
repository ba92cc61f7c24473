"""The upload pipeline (room.actions.attachments._stream): the body is received into a ring of
buffers while one thread writes and another hashes the chunks received before, each in order.
Many chunks in flight at once still give the body's bytes and SHA-256; a write that fails (a full
disk) stops the upload with that error, and nothing is written after it."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from room.actions import attachments
from room.errors import PayloadTooLargeError
from room.infra import blobs

BUFFER = attachments.BUFFER_BYTES


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Body:
    """A request body handed out in pieces of ``piece`` bytes (fewer than a buffer holds)."""

    def __init__(self, content: bytes, piece: int) -> None:
        self.content, self.piece, self.at = content, piece, 0
        self.reads = 0

    async def __call__(self, view: memoryview) -> int:
        self.reads += 1
        n = min(len(view), self.piece, len(self.content) - self.at)
        view[:n] = self.content[self.at : self.at + n]
        self.at += n
        return n


def too_large() -> PayloadTooLargeError:
    return PayloadTooLargeError("over the quota")


@pytest.mark.anyio
async def test_many_chunks_in_flight_are_written_and_hashed_in_order(tmp_path: Path) -> None:
    # Chunks of every size, more of them than buffers: each buffer is reused several times.
    content = os.urandom(attachments.BUFFERS * 3 * BUFFER + 12345)
    part = blobs.Upload(tmp_path)
    await attachments._stream(part, Body(content, BUFFER), len(content), len(content), too_large)
    sha256 = part.finish()
    assert sha256 == hashlib.sha256(content).hexdigest()
    assert part.size == len(content) and part.path.read_bytes() == content


@pytest.mark.anyio
async def test_a_failed_write_stops_the_upload_with_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    content = os.urandom(attachments.BUFFERS * 4 * BUFFER)
    part = blobs.Upload(tmp_path)
    real_write = os.write
    writes = 0

    def full_disk(fd: int, data: Any) -> int:
        nonlocal writes
        if fd != part.fd:
            return real_write(fd, data)
        writes += 1
        if writes == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full_disk)
    body = Body(content, BUFFER)
    with pytest.raises(OSError) as caught:
        await attachments._stream(part, body, len(content), len(content), too_large)
    assert caught.value.errno == errno.ENOSPC
    # Stopped within a ring of buffers of the failure, not at the end of the body.
    assert body.at <= (attachments.BUFFERS + 2) * BUFFER < len(content)
    # Chunks queued behind the failed write were refused, not written after a gap.
    assert writes == 2 and part.size == BUFFER
    assert os.fstat(part.fd).st_size == BUFFER
    part.discard()
