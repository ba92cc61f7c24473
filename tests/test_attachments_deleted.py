"""A deleted message's files (issue 17, item 1): once the message that carried a file is deleted,
the file is read only by those who still read the message's text in its edit history — its
author and the project's owners — and refused to every other member, people and agents alike
(404 ``attachment_deleted``)."""

from __future__ import annotations

from typing import Any

from room.actions import message_edits
from tests.support.inproc import App, owner_user


def _headers(app: App, cookie: str | None = None, token: str | None = None) -> dict[str, str]:
    if token is not None:
        return {"Authorization": f"Bearer {token}"}
    assert cookie is not None
    return {
        "Origin": app.settings.origin,
        "Cookie": f"room_session={cookie}",
        "X-CSRF-Token": app.csrf[cookie],
    }


def _send_file(app: App, cookie: str, project_id: int, content: bytes) -> tuple[str, int]:
    """Upload ``content`` and send it in a message; (its url, the message id)."""
    response = app.client.post(
        f"/api/projects/{project_id}/attachments?name=secret.txt",
        content=content,
        headers=_headers(app, cookie),
    )
    assert response.status_code == 201, response.text
    attachment: dict[str, Any] = response.json()["attachment"]
    status, sent = app.request(
        "POST",
        f"/api/projects/{project_id}/messages",
        {"body": "", "attachments": [attachment["id"]]},
        cookie=cookie,
    )
    assert status == 201, sent
    return str(attachment["url"]), int(sent["message_id"])


def _read(app: App, url: str, **who: str) -> tuple[int, str]:
    response = app.client.get(url, headers=_headers(app, **who))
    if response.status_code == 200:
        return 200, response.text
    return response.status_code, str(response.json()["error"]["code"])


def test_a_deleted_messages_file_is_read_only_by_its_author_and_the_owners(app: App) -> None:
    owner = owner_user(app)
    person, cookie = app.new_user("mei", "梅")
    project_id, members, token = app.project_with("附件删除", owner, person)
    who = {
        "owner": {"cookie": app.owner_cookie},
        "mei": {"cookie": cookie},
        "lead": {"token": token},
    }

    # Mei's file: everyone reads it while the message stands.
    url, message_id = _send_file(app, cookie, project_id, "梅的文件".encode())
    assert all(_read(app, url, **w)[0] == 200 for w in who.values())
    app.call(message_edits.delete_message, app.core, members["mei"], message_id)
    assert _read(app, url, **who["mei"]) == (200, "梅的文件")  # its author
    assert _read(app, url, **who["owner"]) == (200, "梅的文件")  # an owner
    assert _read(app, url, **who["lead"]) == (404, "attachment_deleted")  # any other member

    # The owner's file, deleted by the owner: the other person no longer reads it.
    url, message_id = _send_file(app, app.owner_cookie, project_id, b"owner only now")
    assert _read(app, url, **who["mei"])[0] == 200
    app.call(message_edits.delete_message, app.core, members["owner"], message_id)
    assert _read(app, url, **who["mei"]) == (404, "attachment_deleted")
    assert _read(app, url, **who["owner"]) == (200, "owner only now")
