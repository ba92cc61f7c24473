"""Request bodies checked against the official SDKs' request types (test dependencies only).

``openai`` and ``anthropic`` describe their request bodies as TypedDicts
(``CompletionCreateParamsStreaming``, ``MessageCreateParamsStreaming``). A body the providers
build must validate against them strictly: no key the type does not have, at any depth; no value
of another type (no ``"5"`` for an int); and no part that only fits one of the *answer* models
the SDKs also accept in a request (``anthropic`` lets a response ``TextBlock`` be sent back, and
that pydantic model takes any extra key), so a block with a stray key cannot slip through.

Pydantic validates an ``Iterable[...]`` lazily; :func:`request_problem` walks the whole result
so that every message and block is really checked.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import Any, Literal

import pydantic
from anthropic.types.message_create_params import MessageCreateParamsStreaming
from openai.types.chat.completion_create_params import CompletionCreateParamsStreaming

Protocol = Literal["openai", "anthropic"]

_TYPES: dict[Protocol, Any] = {
    "openai": CompletionCreateParamsStreaming,
    "anthropic": MessageCreateParamsStreaming,
}


@cache
def _adapter(protocol: Protocol) -> pydantic.TypeAdapter[Any]:
    # A TypedDict takes the config of what contains it (it has none of its own): the tuple
    # carries ``extra="forbid"`` and strict types down to every nested TypedDict.
    container: Any = tuple[_TYPES[protocol]]  # type: ignore[valid-type]
    return pydantic.TypeAdapter(container, config=pydantic.ConfigDict(extra="forbid", strict=True))


def _where(path: list[str | int]) -> str:
    return ".".join(str(p) for p in path) or "body"


def _first(exc: pydantic.ValidationError) -> str:
    errors = exc.errors()
    # In a union every member's mismatch is listed; a wrong literal (the union's tag) is the
    # least telling of them.
    first = next((e for e in errors if e["type"] != "literal_error"), errors[0])
    where = ".".join(str(p) for p in first["loc"])
    return f"{where}: {first['msg']} ({first['type']})"


def _walk(value: Any, path: list[str | int]) -> None:
    if isinstance(value, pydantic.BaseModel):
        raise ValueError(f"{_where(path)}: fits only the answer type {type(value).__name__}")
    if isinstance(value, dict):
        for key, item in value.items():
            _walk(item, [*path, key])
    elif isinstance(value, list | tuple | Iterator) or type(value).__name__ == "ValidatorIterator":
        items = iter(value)
        index = 0
        while True:
            try:  # a lazy ValidatorIterator validates each item as it is taken
                item = next(items)
            except StopIteration:
                return
            except pydantic.ValidationError as exc:
                raise ValueError(f"{_where([*path, index])}: {_first(exc)}") from None
            _walk(item, [*path, index])
            index += 1


def request_problem(protocol: Protocol, body: Any) -> str | None:
    """Why ``body`` is not a valid streaming request of ``protocol`` per its SDK, or ``None``."""
    try:
        (validated,) = _adapter(protocol).validate_python((body,))
        _walk(validated, [])
    except pydantic.ValidationError as exc:
        return f"not a {_TYPES[protocol].__name__}: {_first(exc)}"
    except ValueError as exc:
        return f"not a {_TYPES[protocol].__name__}: {exc}"
    return None
