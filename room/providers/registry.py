"""Configured providers, resolved by name, and their availability.

:func:`default_configs` derives the providers from the environment:

==============  =======================================  ==========================================
provider        listed when                              settings
==============  =======================================  ==========================================
``builtin``     always                                   offline echo, model ``builtin/echo``
``openai``      ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL``  ``OPENAI_BASE_URL`` (default OpenAI);
                                                         a base URL without a key means a keyless
                                                         local server (vLLM, llama.cpp)
``anthropic``   ``ANTHROPIC_API_KEY``                    ``ANTHROPIC_BASE_URL``
``deepseek``    ``DEEPSEEK_API_KEY``                     ``DEEPSEEK_BASE_URL``
``ollama``      ``OLLAMA_BASE_URL``                      no key; ``/v1`` is appended to a bare host
==============  =======================================  ==========================================

Keys are read from the environment mapping when needed (``api_key_env``), never copied into the
config. An explicitly configured provider without its key is listed as unavailable
(``missing_key``), never hidden; its ``chat`` raises :class:`~room.errors.ProviderAuthError`
without touching the network.

:meth:`ProviderRegistry.status` checks every provider's catalogue at once (no retries, at most
``CATALOGUE_TIMEOUT_SECS`` each) and caches the result for ``status_ttl_secs``. Reasons:
``missing_key``, ``auth_refused`` (401/403) and ``catalogue_unreadable`` (no connection, 5xx,
timeout, unreadable answer). A server that answers but offers no catalogue (some llama.cpp builds
answer 404) is available with its declared ``models``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import anyio
import httpx
import pydantic
from pydantic import SecretStr

from room.errors import (
    BadRequestError,
    NotFoundError,
    ProviderAuthError,
    ProviderError,
    ProviderRequestError,
)
from room.providers.anthropic import DEFAULT_ANTHROPIC_BASE_URL, AnthropicProvider
from room.providers.base import (
    CONNECT_TIMEOUT_SECS,
    FIRST_BYTE_TIMEOUT_SECS,
    IDLE_TIMEOUT_SECS,
    MAX_RETRIES,
    Provider,
)
from room.providers.echo import ECHO_MODEL, EchoProvider
from room.providers.openai import DEFAULT_OPENAI_BASE_URL, OpenAIProvider

STATUS_TTL_SECS = 30.0
DEFAULT_DEEPSEEK_BASE_URL = "https://api.deepseek.com/v1"
ECHO_PROVIDER_LABEL = "离线回显 builtin/echo（不调用模型）"

StatusReason = Literal["missing_key", "auth_refused", "catalogue_unreadable"]


class ProviderConfig(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    name: str = pydantic.Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    kind: Literal["openai", "anthropic", "echo"]
    base_url: str | None = pydantic.Field(default=None, pattern=r"^https?://")
    api_key: SecretStr | None = None
    api_key_env: str | None = None
    key_required: bool = True  # local OpenAI-compatible servers (Ollama, llama.cpp) need none
    models: list[str] = []  # used when the server offers no catalogue
    # Seconds of silence allowed between two chunks of an answer (there is no total timeout).
    idle_timeout_secs: float = pydantic.Field(default=IDLE_TIMEOUT_SECS, gt=0)
    # Seconds to wait for an answer's first byte once the request was sent; past it the call
    # fails (provider_timeout) and is not sent again.
    first_byte_timeout_secs: float = pydantic.Field(default=FIRST_BYTE_TIMEOUT_SECS, gt=0)
    connect_timeout_secs: float = pydantic.Field(default=CONNECT_TIMEOUT_SECS, gt=0)
    max_retries: int = pydantic.Field(default=MAX_RETRIES, ge=0, le=10)
    label: str | None = None


@dataclass(frozen=True, slots=True)
class ProviderStatus:
    name: str
    kind: str
    available: bool
    reason: StatusReason | None
    detail: str | None
    models: list[str] = field(default_factory=list)
    offline: bool = False
    label: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _with_v1(url: str) -> str:
    url = url.rstrip("/")
    return url if httpx.URL(url).path not in ("", "/") else url + "/v1"


def default_configs(
    env: Mapping[str, str],
    *,
    idle_timeout_secs: float = IDLE_TIMEOUT_SECS,
    first_byte_timeout_secs: float = FIRST_BYTE_TIMEOUT_SECS,
    connect_timeout_secs: float = CONNECT_TIMEOUT_SECS,
    max_retries: int = MAX_RETRIES,
) -> list[ProviderConfig]:
    """The providers the environment asks for; ``builtin`` always comes first. The timeouts and
    retries (the server's ``provider_*`` settings) apply to every HTTP provider."""
    configs = [ProviderConfig(name="builtin", kind="echo", label=ECHO_PROVIDER_LABEL)]
    policy = {
        "idle_timeout_secs": idle_timeout_secs,
        "first_byte_timeout_secs": first_byte_timeout_secs,
        "connect_timeout_secs": connect_timeout_secs,
        "max_retries": max_retries,
    }
    openai_url = env.get("OPENAI_BASE_URL", "").strip()
    if env.get("OPENAI_API_KEY", "").strip() or openai_url:
        configs.append(
            ProviderConfig(
                name="openai",
                kind="openai",
                base_url=openai_url or None,
                api_key_env="OPENAI_API_KEY",
                key_required=not openai_url,
                label="OpenAI" if not openai_url else "OpenAI-compatible",
                **policy,
            )
        )
    if env.get("ANTHROPIC_API_KEY", "").strip():
        configs.append(
            ProviderConfig(
                name="anthropic",
                kind="anthropic",
                base_url=env.get("ANTHROPIC_BASE_URL", "").strip() or None,
                api_key_env="ANTHROPIC_API_KEY",
                label="Anthropic",
                **policy,
            )
        )
    if env.get("DEEPSEEK_API_KEY", "").strip():
        configs.append(
            ProviderConfig(
                name="deepseek",
                kind="openai",
                base_url=env.get("DEEPSEEK_BASE_URL", "").strip() or DEFAULT_DEEPSEEK_BASE_URL,
                api_key_env="DEEPSEEK_API_KEY",
                label="DeepSeek",
                **policy,
            )
        )
    ollama_url = env.get("OLLAMA_BASE_URL", "").strip()
    if ollama_url:
        configs.append(
            ProviderConfig(
                name="ollama",
                kind="openai",
                base_url=_with_v1(ollama_url),
                key_required=False,
                label="Ollama (local)",
                **policy,
            )
        )
    return configs


def _api_key(config: ProviderConfig, env: Mapping[str, str]) -> str | None:
    if config.api_key is not None:
        key = config.api_key.get_secret_value().strip()
    elif config.api_key_env:
        key = env.get(config.api_key_env, "").strip()
    else:
        key = ""
    return key or None


def build_provider(
    config: ProviderConfig,
    *,
    env: Mapping[str, str],
    transport: httpx.AsyncBaseTransport | None = None,
    sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    rng: random.Random | None = None,
) -> Provider:
    if config.kind == "echo":
        return EchoProvider(name=config.name)
    cls = OpenAIProvider if config.kind == "openai" else AnthropicProvider
    default_url = DEFAULT_OPENAI_BASE_URL if config.kind == "openai" else DEFAULT_ANTHROPIC_BASE_URL
    return cls(
        name=config.name,
        api_key=_api_key(config, env),
        base_url=config.base_url or default_url,
        key_required=config.key_required,
        key_env=config.api_key_env,
        idle_timeout_secs=config.idle_timeout_secs,
        first_byte_timeout_secs=config.first_byte_timeout_secs,
        connect_timeout_secs=config.connect_timeout_secs,
        max_retries=config.max_retries,
        transport=transport,
        sleep=sleep,
        rng=rng,
    )


class ProviderRegistry:
    def __init__(
        self,
        configs: Sequence[ProviderConfig],
        *,
        env: Mapping[str, str],
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        clock: Callable[[], float] = time.monotonic,
        status_ttl_secs: float = STATUS_TTL_SECS,
        rng: random.Random | None = None,
    ) -> None:
        self._configs = {c.name: c for c in configs}
        if len(self._configs) != len(configs):
            raise ValueError("provider names must be unique")
        self._keys = {c.name: _api_key(c, env) for c in configs}
        self._providers = {
            c.name: build_provider(c, env=env, transport=transport, sleep=sleep, rng=rng)
            for c in configs
        }
        self._clock = clock
        self._ttl = status_ttl_secs
        self._lock = anyio.Lock()
        self._cached: list[ProviderStatus] | None = None
        self._cached_at = 0.0

    def names(self) -> list[str]:
        return list(self._providers)

    def get(self, name: str) -> Provider:
        """The provider called ``name``; a model id ``provider/model`` resolves by its prefix."""
        key = name.split("/", 1)[0]
        try:
            return self._providers[key]
        except KeyError:
            raise NotFoundError(f"no provider named {key!r}", provider=key) from None

    def resolve(self, model_id: str) -> tuple[Provider, str]:
        """``"openai/gpt-4o-mini"`` → (the ``openai`` provider, ``"gpt-4o-mini"``)."""
        prefix, slash, model = model_id.partition("/")
        if not slash or not prefix or not model:
            raise BadRequestError(
                f"model ids look like provider/model, not {model_id!r}", model=model_id
            )
        return self.get(prefix), model

    async def status(self, *, refresh: bool = False) -> list[ProviderStatus]:
        async with self._lock:
            fresh = self._cached is not None and self._clock() - self._cached_at < self._ttl
            if refresh or not fresh or self._cached is None:
                self._cached = await self._check_all()
                self._cached_at = self._clock()
            return list(self._cached)

    async def aclose(self) -> None:
        for provider in self._providers.values():
            await provider.aclose()

    async def _check_all(self) -> list[ProviderStatus]:
        results: dict[str, ProviderStatus] = {}

        async def check(name: str) -> None:
            results[name] = await self._check(self._configs[name])

        async with anyio.create_task_group() as tg:
            for name in self._configs:
                tg.start_soon(check, name)
        return [results[name] for name in self._configs]

    async def _check(self, config: ProviderConfig) -> ProviderStatus:
        provider = self._providers[config.name]
        label = config.label or config.name

        def status(
            reason: StatusReason | None, detail: str | None, models: list[str]
        ) -> ProviderStatus:
            return ProviderStatus(
                name=config.name,
                kind=config.kind,
                available=reason is None,
                reason=reason,
                detail=detail,
                models=models,
                offline=provider.offline,
                label=label,
            )

        if config.kind == "echo":
            return status(None, "offline echo; no model is called", [ECHO_MODEL])
        if config.key_required and self._keys[config.name] is None:
            hint = f"set {config.api_key_env}" if config.api_key_env else "configure api_key"
            return status("missing_key", f"no API key ({hint})", list(config.models))
        try:
            models = await provider.catalogue()
        except ProviderAuthError as exc:
            return status("auth_refused", exc.message, list(config.models))
        except ProviderRequestError as exc:
            if config.models:
                detail = f"no catalogue offered ({exc.message}); using the declared models"
                return status(None, detail, list(config.models))
            return status("catalogue_unreadable", exc.message, [])
        except ProviderError as exc:
            return status("catalogue_unreadable", exc.message, list(config.models))
        return status(None, None, models or list(config.models))
