"""Chat messages as the CPU engines hand them to llama.cpp: roles mapped, system text kept.

Gemma has no system role. llama-cpp-python's `gemma` chat format silently drops `system`
messages, and llama.cpp's built-in `gemma` template glues several of them together with no
separator and loses one that no user turn follows. Gemma's own chat template puts the system
text at the head of the first user turn; `fold_system` does the same before either engine sees
the messages, so a system prompt (a counselor's persona, a judge's role) always reaches the
model, in the same words whichever engine serves it.
"""

from __future__ import annotations

from typing import Any

from serving.protocol import ChatCompletionRequest

__all__ = ["DROPS_SYSTEM", "fold_system", "request_messages"]

# Chat formats (llama-cpp-python's names, which are also llama.cpp's built-in template names)
# whose prompt has no place for a system message.
DROPS_SYSTEM = frozenset({"gemma"})


def fold_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """System messages joined (blank line between) and put before the first user message's
    text, as Gemma's chat template does; a request with no user message gets one."""
    system = "\n\n".join(str(m["content"]) for m in messages if m["role"] == "system" and m.get("content"))
    rest = [dict(m) for m in messages if m["role"] != "system"]
    if not system:
        return rest
    for m in rest:
        if m["role"] == "user":
            m["content"] = f"{system}\n\n{m['content'] or ''}"
            return rest
    return [{"role": "user", "content": system}, *rest]


def request_messages(req: ChatCompletionRequest, chat_format: str | None) -> list[dict[str, Any]]:
    """The request's messages for llama.cpp: OpenAI's `developer` role is a system message, and
    formats without a system role get it folded into the first user turn."""
    messages = [{"role": "system" if m.role == "developer" else m.role, "content": m.content}
                for m in req.messages]
    return fold_system(messages) if chat_format in DROPS_SYSTEM else messages
