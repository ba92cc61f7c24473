"""The email digest's text (pure): a person's unread mentions, in their language (zh or en).

No I/O and no clock: the items and the server's public URL come in as arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MAX_ITEMS = 20  # mentions listed in one digest; the rest are counted
EXCERPT_CHARS = 200

TEXTS = {
    "zh": {
        "subject": "Project Room：你有 {n} 条未读的提及",
        "hello": "{name}，你好：",
        "intro": "你离开期间，有人在项目里提到了你：",
        "more": "……还有 {n} 条，请在网页中查看。",
        "open": "打开：{url}",
        "footer": "这封邮件由 Project Room 自动发送；在网页中读过这些消息后不会再次提醒。",
    },
    "en": {
        "subject": "Project Room: {n} unread mention(s)",
        "hello": "Hello {name},",
        "intro": "While you were away, people mentioned you in your projects:",
        "more": "…and {n} more; open the page to read them.",
        "open": "Open: {url}",
        "footer": "Sent by Project Room; messages you read in the page are not mailed again.",
    },
}


@dataclass(frozen=True, slots=True)
class Mention:
    project_id: int
    project_name: str
    message_id: int
    author: str
    text: str  # plain words (room.rules.render.plain_text)
    at: str  # ISO time


def render_digest(
    lang: str, name: str, mentions: Sequence[Mention], base_url: str
) -> tuple[str, str]:
    """The digest's subject and plain-text body; ``lang`` other than en reads Chinese."""
    texts = TEXTS["en" if lang == "en" else "zh"]
    shown = mentions[:MAX_ITEMS]
    lines = [texts["hello"].format(name=name), "", texts["intro"], ""]
    for m in shown:
        text = m.text if len(m.text) <= EXCERPT_CHARS else m.text[: EXCERPT_CHARS - 1] + "…"
        lines.append(f"[{m.project_name}] {m.author} · {m.at[:16].replace('T', ' ')} UTC")
        lines.append(f"  {text}")
        lines.append(
            "  " + texts["open"].format(url=f"{base_url}/#/p/{m.project_id}/m/{m.message_id}")
        )
        lines.append("")
    if len(mentions) > len(shown):
        lines += [texts["more"].format(n=len(mentions) - len(shown)), ""]
    lines.append(texts["footer"])
    return texts["subject"].format(n=len(mentions)), "\n".join(lines) + "\n"
