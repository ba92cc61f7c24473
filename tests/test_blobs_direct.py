"""room.infra.blobs.Upload's direct writes: whole 4 KB blocks from page-aligned memory go to the
disk with O_DIRECT where the file system takes it; anything else — a chunk at an odd address, a tail
that is not whole blocks — turns the file to ordinary writes for the rest, and the stored bytes and
their SHA-256 are the chunks' either way. A discarded upload refuses later writes."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import pytest

from room.infra import blobs

MB = 1024 * 1024


def test_aligned_odd_and_tail_chunks_are_stored_as_given(tmp_path: Path) -> None:
    aligned = blobs.aligned_buffer(4 * MB)
    aligned.write(os.urandom(4 * MB))
    odd_source = os.urandom(8192 + 1)
    chunks: list[bytes | memoryview] = [
        memoryview(aligned),  # direct, where offered
        memoryview(odd_source)[1:],  # whole blocks at an address one byte off
        os.urandom(100),  # a tail
    ]
    upload = blobs.Upload(tmp_path)
    for chunk in chunks:
        upload.write(chunk)
    assert not upload.direct  # turned to ordinary writes by the odd chunk or the tail
    sha256 = upload.finish()
    whole = b"".join(bytes(c) for c in chunks)
    assert sha256 == hashlib.sha256(whole).hexdigest()
    assert upload.size == len(whole) and upload.path.read_bytes() == whole
    assert bytes(upload.head) == whole[: blobs.DETECT_HEAD_BYTES]
    assert upload.commit(sha256).read_bytes() == whole


def test_a_discarded_upload_takes_no_more_writes(tmp_path: Path) -> None:
    upload = blobs.Upload(tmp_path)
    upload.write(b"first")
    upload.discard()
    assert not upload.path.exists()
    with pytest.raises(OSError) as caught:
        upload.store(b"late")
    assert caught.value.errno == errno.EBADF
