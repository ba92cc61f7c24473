"""A removal of content racing an upload of the same content (docs/cluster.md, "Attachments").

Content is stored once, whoever uploads it. When the last row naming it goes (a discarded
upload, a purge, the sweep of old drafts) its file goes too — while another upload of the same
bytes, which found the file already at its address, has not committed its row yet. On a shared
folder the two may run on two nodes. The removal takes the file aside and asks the database
again; the upload, once its row is committed, makes sure the file is there and puts it back
from its own copy if not: whichever looks last finds the other's work. Here the upload is held
between putting its file in place and committing its row while the removal runs."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from room.actions import attachments as attachment_actions
from room.infra import blobs
from room.infra.bodies import BodyInto
from tests.support.inproc import running_app
from tests.test_attachments_limits import owner_of

CONTENT = b"the same bytes, uploaded twice\n" * 40


def body_of(content: bytes) -> BodyInto:
    sent = False

    async def fill(view: memoryview) -> int:
        nonlocal sent
        if sent:
            return 0
        view[: len(content)] = content
        sent = True
        return len(content)

    return fill


def test_content_removed_while_an_upload_of_it_commits_is_put_back(
    tmp_path: Path, monkeypatch: Any
) -> None:
    held, go = threading.Event(), threading.Event()
    real_finish = attachment_actions._finish

    def finish_then_wait(*args: Any) -> Any:
        done = real_finish(*args)
        held.set()  # in place (the same content was there already), row not yet committed
        assert go.wait(30)
        return done

    with running_app(tmp_path / "data") as app:
        core, member = app.core, owner_of(app)
        root = core.settings.attachments_root

        async def race() -> tuple[dict[str, Any], bool]:
            first = await attachment_actions.upload(
                core, member, name="a.txt", declared=len(CONTENT), body=body_of(CONTENT)
            )
            monkeypatch.setattr(attachment_actions, "_finish", finish_then_wait)
            second = asyncio.create_task(
                attachment_actions.upload(
                    core, member, name="b.txt", declared=len(CONTENT), body=body_of(CONTENT)
                )
            )
            await asyncio.to_thread(held.wait, 30)
            # The first upload is discarded: no row names the content now, so its file goes.
            await attachment_actions.discard(core, member, int(first["id"]))
            gone = not any(root.glob("??/*"))
            go.set()
            return await second, gone

        stored, gone_meanwhile = app.call(race)
        assert gone_meanwhile  # the removal did run in between, and took the file
        files = [p for p in root.glob("??/*")]
        assert [p.read_bytes() for p in files] == [CONTENT]  # put back by the upload
        assert list((root / "tmp").iterdir()) == []  # no copy, nothing retired left behind
        row = app.call(attachment_actions.readable, core, member, int(stored["id"]))
        assert blobs.holds(root, str(row["sha256"]), len(CONTENT))
