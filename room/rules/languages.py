"""Which of the two interface languages (``zh`` or ``en``) a person reads, from what they chose
or, failing that, from their browser's preference list (``Accept-Language`` on the server,
``navigator.languages`` in web/i18n.js, the same rule):

* an explicit choice (``zh`` / ``en``, or a tag starting with either) wins;
* else the first tag in preference order that is Chinese or English (``q=0`` means "not this");
* a list naming neither (``fr, de``) reads English; no list at all reads Chinese, the default.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

Language = Literal["zh", "en"]
DEFAULT: Language = "zh"
MAX_HEADER_CHARS = 1000  # a longer header is read only this far


def language_of(tag: str | None) -> Language | None:
    """``zh`` for a Chinese tag (``zh``, ``zh-CN``, ``zh-Hant-TW``), ``en`` for an English one,
    else None."""
    base = (tag or "").strip().lower().replace("_", "-").split("-", 1)[0]
    if base == "zh":
        return "zh"
    if base == "en":
        return "en"
    return None


def preferred(header: str | None) -> list[str]:
    """The tags of an ``Accept-Language`` header, most preferred first (stable among equal
    weights), without those weighted 0 or malformed."""
    weighted: list[tuple[float, int, str]] = []
    text = header or ""
    parts = text[:MAX_HEADER_CHARS].split(",")
    if len(text) > MAX_HEADER_CHARS:
        parts = parts[:-1]  # not a tag cut in half
    for index, part in enumerate(parts):
        tag, _, params = part.strip().partition(";")
        tag = tag.strip()
        if not tag:
            continue
        weight = 1.0
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key.strip().lower() == "q":
                try:
                    weight = float(value)
                except ValueError:
                    weight = -1.0
        if 0 < weight <= 1:
            weighted.append((-weight, index, tag))
    return [tag for _, _, tag in sorted(weighted)]


def pick_language(accept_language: str | None, chosen: str | None = None) -> Language:
    """The language to show: `chosen` if it names one, else the first Chinese or English tag of
    `accept_language`, else English when the list names other languages only, else Chinese."""
    explicit = language_of(chosen)
    if explicit is not None:
        return explicit
    tags = preferred(accept_language)
    for tag in tags:
        found = language_of(tag)
        if found is not None:
            return found
    return "en" if tags else DEFAULT


def locale_language(env: Mapping[str, str]) -> Language:
    """The language of a shell's locale (``LC_ALL``, else ``LC_MESSAGES``, else ``LANG``, the
    POSIX order): Chinese for ``zh_*`` and for no locale, ``C`` or ``POSIX`` (the default),
    English for any other — as a browser naming neither language reads English. ``./scripts/serve``
    sets the server's ``lang`` from it."""
    value = next((env[k] for k in ("LC_ALL", "LC_MESSAGES", "LANG") if env.get(k)), "")
    base = value.split(".", 1)[0].split("@", 1)[0]
    if base in ("", "C", "POSIX"):
        return DEFAULT
    return language_of(base) or "en"
