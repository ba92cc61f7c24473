"""The provider registry: defaults from the environment, resolution, availability, echo."""

from __future__ import annotations

import json
from typing import Any

import pytest

from room.errors import BadRequestError, NotFoundError, ProviderAuthError, ProviderRequestError
from room.providers import (
    ECHO_LABEL,
    ChatMessage,
    ChatRequest,
    ProviderConfig,
    ProviderRegistry,
    ProviderStatus,
    ToolSpec,
    Usage,
    default_configs,
)
from tests.support.llm_servers import (
    AnthropicServer,
    OpenAIServer,
    RecordedSleeps,
    closed_port_url,
    error,
    openai_text,
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def registry(
    configs: list[ProviderConfig], env: dict[str, str] | None = None, **kw: Any
) -> ProviderRegistry:
    return ProviderRegistry(configs, env=env or {}, sleep=RecordedSleeps(), **kw)


def by_name(statuses: list[ProviderStatus]) -> dict[str, ProviderStatus]:
    return {s.name: s for s in statuses}


# -- default_configs ------------------------------------------------------------------------


def test_no_keys_means_only_the_offline_echo() -> None:
    configs = default_configs({})
    assert [(c.name, c.kind) for c in configs] == [("builtin", "echo")]


def test_environment_adds_each_provider_it_names() -> None:
    env = {
        "OPENAI_API_KEY": "sk-o",
        "ANTHROPIC_API_KEY": "sk-a",
        "DEEPSEEK_API_KEY": "sk-d",
        "OLLAMA_BASE_URL": "http://localhost:11434",
    }
    configs = {c.name: c for c in default_configs(env)}
    assert list(configs) == ["builtin", "openai", "anthropic", "deepseek", "ollama"]
    assert configs["openai"].api_key_env == "OPENAI_API_KEY"
    assert configs["openai"].api_key is None  # keys stay in the environment
    assert configs["deepseek"].base_url == "https://api.deepseek.com/v1"
    assert configs["ollama"].base_url == "http://localhost:11434/v1"
    assert configs["ollama"].key_required is False


def test_openai_base_url_alone_is_a_keyless_compatible_server() -> None:
    (config,) = default_configs({"OPENAI_BASE_URL": "http://127.0.0.1:8080/v1"})[1:]
    assert (config.name, config.base_url, config.key_required) == (
        "openai",
        "http://127.0.0.1:8080/v1",
        False,
    )


# -- resolution -----------------------------------------------------------------------------


def test_model_ids_resolve_by_the_part_before_the_first_slash() -> None:
    reg = registry(default_configs({"OPENAI_API_KEY": "sk"}))
    provider, model = reg.resolve("openai/org/model:latest")
    assert (provider.name, model) == ("openai", "org/model:latest")
    assert reg.get("builtin/echo").offline is True
    assert reg.names() == ["builtin", "openai"]
    with pytest.raises(NotFoundError):
        reg.get("mistral")
    with pytest.raises(BadRequestError):
        reg.resolve("gpt-4o")


def test_duplicate_names_are_refused() -> None:
    config = ProviderConfig(name="builtin", kind="echo")
    with pytest.raises(ValueError, match="unique"):
        registry([config, config])


# -- availability ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_missing_key_is_listed_unavailable_and_chat_fails_without_network() -> None:
    config = ProviderConfig(
        name="deepseek", kind="openai", base_url=closed_port_url() + "/v1", api_key_env="DS_KEY"
    )
    reg = registry([config])
    try:
        (status,) = await reg.status()
        with pytest.raises(ProviderAuthError) as caught:
            await reg.get("deepseek").chat(ChatRequest(model="x", messages=()))
    finally:
        await reg.aclose()
    assert (status.available, status.reason) == (False, "missing_key")
    assert status.detail is not None and "DS_KEY" in status.detail
    assert caught.value.details == {
        "provider": "deepseek",
        "status": None,
        "attempts": 0,
        "reason": "missing_key",
    }


@pytest.mark.anyio
async def test_available_providers_list_their_catalogues() -> None:
    with (
        OpenAIServer(models=["gpt-b", "gpt-a"], api_key="sk-o") as oai,
        AnthropicServer(models=["claude-x"], api_key="sk-a") as ant,
    ):
        reg = registry(
            [
                *default_configs({}),
                ProviderConfig(
                    name="local", kind="openai", base_url=oai.base_url, api_key_env="K1"
                ),
                ProviderConfig(
                    name="claude", kind="anthropic", base_url=ant.base_url, api_key_env="K2"
                ),
            ],
            env={"K1": "sk-o", "K2": "sk-a"},
        )
        try:
            statuses = by_name(await reg.status())
        finally:
            await reg.aclose()
    assert statuses["local"] == ProviderStatus(
        name="local",
        kind="openai",
        available=True,
        reason=None,
        detail=None,
        models=["gpt-a", "gpt-b"],
        offline=False,
        label="local",
    )
    assert (statuses["claude"].available, statuses["claude"].models) == (True, ["claude-x"])
    builtin = statuses["builtin"]
    assert (builtin.available, builtin.offline, builtin.models) == (True, True, ["echo"])
    assert "离线" in builtin.label
    json.dumps([s.to_dict() for s in statuses.values()])  # the providers endpoint sends this


@pytest.mark.anyio
async def test_refused_key_is_auth_refused() -> None:
    with OpenAIServer(api_key="sk-right") as srv:
        reg = registry(
            [
                ProviderConfig(
                    name="openai", kind="openai", base_url=srv.base_url, api_key="sk-bad-1"
                )
            ]
        )
        try:
            (status,) = await reg.status()
        finally:
            await reg.aclose()
    assert (status.available, status.reason) == (False, "auth_refused")
    assert status.detail is not None and "sk-bad-1" not in status.detail


@pytest.mark.anyio
async def test_unreadable_catalogues_are_reported_without_retrying() -> None:
    with OpenAIServer(models=error(500, "boom")) as srv:
        reg = registry(
            [
                ProviderConfig(
                    name="down",
                    kind="openai",
                    base_url=closed_port_url() + "/v1",
                    key_required=False,
                ),
                ProviderConfig(
                    name="broken", kind="openai", base_url=srv.base_url, key_required=False
                ),
            ]
        )
        try:
            statuses = by_name(await reg.status())
        finally:
            await reg.aclose()
        assert len(srv.requests) == 1
    assert (statuses["down"].available, statuses["down"].reason) == (False, "catalogue_unreadable")
    assert (statuses["broken"].available, statuses["broken"].reason) == (
        False,
        "catalogue_unreadable",
    )
    assert statuses["broken"].detail is not None and "boom" in statuses["broken"].detail


@pytest.mark.anyio
async def test_a_server_without_catalogue_uses_its_declared_models() -> None:
    with OpenAIServer(models=error(404, "not found")) as srv:
        reg = registry(
            [
                ProviderConfig(
                    name="llamacpp",
                    kind="openai",
                    base_url=srv.base_url,
                    key_required=False,
                    models=["qwen2.5-7b"],
                ),
                ProviderConfig(
                    name="bare", kind="openai", base_url=srv.base_url, key_required=False
                ),
            ]
        )
        try:
            statuses = by_name(await reg.status())
        finally:
            await reg.aclose()
    assert (statuses["llamacpp"].available, statuses["llamacpp"].models) == (True, ["qwen2.5-7b"])
    assert (statuses["bare"].available, statuses["bare"].reason) == (False, "catalogue_unreadable")


@pytest.mark.anyio
async def test_status_is_cached_for_its_ttl_unless_refreshed() -> None:
    clock = Clock()
    with OpenAIServer(models=["m"]) as srv:
        reg = registry(
            [
                ProviderConfig(
                    name="local", kind="openai", base_url=srv.base_url, key_required=False
                )
            ],
            clock=clock,
            status_ttl_secs=30,
        )
        try:
            await reg.status()
            clock.now += 29
            await reg.status()
            assert len(srv.requests) == 1
            await reg.status(refresh=True)
            assert len(srv.requests) == 2
            clock.now += 31
            await reg.status()
            assert len(srv.requests) == 3
        finally:
            await reg.aclose()


@pytest.mark.anyio
async def test_chat_through_the_registry_records_the_observed_route() -> None:
    with OpenAIServer(
        [openai_text("hi", model="served-model", prompt_tokens=9, completion_tokens=3)]
    ) as srv:
        reg = registry(
            [ProviderConfig(name="local", kind="openai", base_url=srv.base_url, key_required=False)]
        )
        try:
            provider, model = reg.resolve("local/requested-model")
            result = await provider.chat(
                ChatRequest(model=model, messages=(ChatMessage("user", "hi"),))
            )
        finally:
            await reg.aclose()
        assert srv.chat_requests[0]["model"] == "requested-model"
        assert "authorization" not in srv.requests[0].headers
    assert (result.provider, result.model, result.usage) == ("local", "served-model", Usage(9, 3))


# -- builtin echo ---------------------------------------------------------------------------

ECHO_TOOLS = (ToolSpec("room_send", "Post a message.", {"type": "object"}),)


@pytest.mark.anyio
async def test_echo_acknowledges_the_last_user_message_offline() -> None:
    reg = registry(default_configs({}))
    provider, model = reg.resolve("builtin/echo")
    request = ChatRequest(
        model=model,
        messages=(
            ChatMessage("system", "You are helpful."),
            ChatMessage("user", "旧消息", name="bob"),
            ChatMessage("assistant", "收到"),
            ChatMessage("user", "帮我\n看看  这个 bug @coder", name="alice"),
        ),
        tools=ECHO_TOOLS,
    )
    result = await provider.chat(request)
    again = await provider.chat(request)
    await reg.aclose()
    assert result.text == (
        "收到 alice 的消息：\n> 帮我 看看 这个 bug @coder\n\n（builtin/echo 离线回显，未调用任何模型）"
    )
    assert ECHO_LABEL in result.text
    assert again == result  # deterministic
    assert result.tool_calls == ()
    assert (result.provider, result.model, result.usage) == ("builtin", "echo", Usage(0, 0))
    assert await provider.catalogue() == ["echo"]


@pytest.mark.anyio
async def test_echo_truncates_long_messages() -> None:
    provider = registry(default_configs({})).get("builtin")
    result = await provider.chat(
        ChatRequest(model="echo", messages=(ChatMessage("user", "长" * 500),))
    )
    quote = result.text.splitlines()[1]
    assert result.text.startswith("收到你的消息：")
    assert quote == "> " + "长" * 79 + "…"


@pytest.mark.anyio
async def test_echo_refuses_unknown_models() -> None:
    provider = registry(default_configs({})).get("builtin")
    with pytest.raises(ProviderRequestError, match="unknown model"):
        await provider.chat(ChatRequest(model="gpt-4o", messages=(ChatMessage("user", "hi"),)))
