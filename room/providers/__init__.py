"""Model providers: one module per wire protocol, an httpx transport injected into each.

Public surface (everything else in the submodules is internal)::

    from room.providers import ChatMessage, ChatRequest, ProviderRegistry, default_configs

    registry = ProviderRegistry(default_configs(os.environ), env=os.environ)
    provider, model = registry.resolve("openai/gpt-4o-mini")
    result = await provider.chat(ChatRequest(model=model, messages=(...,)))

Failures raise the ``ProviderError`` subclasses of :mod:`room.errors`.
"""

from room.providers.base import (
    STOP_END_TURN,
    STOP_MAX_TOKENS,
    STOP_TOOL_USE,
    CallMeter,
    ChatMessage,
    ChatRequest,
    ChatResult,
    Provider,
    ToolCall,
    ToolSpec,
    Usage,
)
from room.providers.echo import ECHO_LABEL
from room.providers.registry import (
    ProviderConfig,
    ProviderRegistry,
    ProviderStatus,
    default_configs,
)

__all__ = [
    "ECHO_LABEL",
    "STOP_END_TURN",
    "STOP_MAX_TOKENS",
    "STOP_TOOL_USE",
    "CallMeter",
    "ChatMessage",
    "ChatRequest",
    "ChatResult",
    "Provider",
    "ProviderConfig",
    "ProviderRegistry",
    "ProviderStatus",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "default_configs",
]
