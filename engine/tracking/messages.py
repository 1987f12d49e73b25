"""Validation and normalisation of OpenAI chat requests (`messages`, `tools`) before rendering.

Implemented:
- Roles `system`, `developer` (mapped to `system`), `user`, `assistant`, `tool`. Any other role, or a
  message that is not an object, is rejected with `BadRequest` naming the offending field
  (`messages[2].role`), so the HTTP layer can answer 400 with that reason.
- Content as a string, as a list of text parts (`[{"type": "text", "text": ...}]`, joined with "\n" as
  vLLM does), or null for an assistant message (rendered as ""). Non-text parts (images, audio, files,
  refusals) are rejected: no model served by this engine takes them.
- Assistant `tool_calls`: a list of `{"id", "type": "function", "function": {"name", "arguments"}}`;
  `arguments` must encode a JSON object (a string, as OpenAI sends it, or an already-decoded object).
  Tool messages: content required, `tool_call_id` optional but must be a string when present.
- `tools`: a list of `{"type": "function", "function": {"name", "description"?, "parameters"?}}`.

Output is a list of plain dicts with exactly the keys the renderer uses (`role`, `content`, `tool_calls`,
`tool_call_id`, `name`); unknown extra keys of a message (e.g. `reasoning_content`) are dropped.

Not implemented: the deprecated `function_call` / `functions` fields, `name`-based multi-speaker
rendering beyond passing `name` through, multimodal content.
"""

from __future__ import annotations

import json
from typing import Any

from engine.errors import BadRequest

ROLES = ("system", "developer", "user", "assistant", "tool")

__all__ = ["ROLES", "validate_messages", "validate_tools", "tool_call_arguments"]


def _content_text(content: Any, where: str, *, nullable: bool) -> str:
    if content is None:
        if nullable:
            return ""
        raise BadRequest(f"{where}.content is required for this role (got null)")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for k, part in enumerate(content):
            pw = f"{where}.content[{k}]"
            if not isinstance(part, dict):
                raise BadRequest(f"{pw} must be an object like {{'type': 'text', 'text': '...'}}")
            kind = part.get("type")
            if kind != "text":
                raise BadRequest(
                    f"{pw}.type is {kind!r}; only 'text' content parts are supported by this engine"
                )
            if not isinstance(part.get("text"), str):
                raise BadRequest(f"{pw}.text must be a string")
            texts.append(part["text"])
        return "\n".join(texts)
    raise BadRequest(
        f"{where}.content must be a string, a list of text parts or null; got {type(content).__name__}"
    )


def tool_call_arguments(arguments: Any, where: str) -> dict[str, Any]:
    """Decode a tool call's `arguments` (JSON string or object) into a dict, or raise `BadRequest`."""
    if isinstance(arguments, dict):
        return arguments
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as e:
            raise BadRequest(
                f"{where} is not valid JSON ({e.msg} at char {e.pos}); send the arguments string back as the server returned it"
            ) from e
        if isinstance(value, dict):
            return value
        raise BadRequest(f"{where} must encode a JSON object, got {type(value).__name__}")
    raise BadRequest(f"{where} must be a JSON object encoded as a string; got {type(arguments).__name__}")


def _tool_calls(raw: Any, where: str) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise BadRequest(f"{where}.tool_calls must be a list")
    out: list[dict[str, Any]] = []
    for j, call in enumerate(raw):
        cw = f"{where}.tool_calls[{j}]"
        if not isinstance(call, dict):
            raise BadRequest(f"{cw} must be an object")
        if call.get("type", "function") != "function":
            raise BadRequest(f"{cw}.type is {call.get('type')!r}; only 'function' tool calls are supported")
        fn = call.get("function")
        if not isinstance(fn, dict):
            raise BadRequest(f"{cw}.function must be an object with 'name' and 'arguments'")
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise BadRequest(f"{cw}.function.name must be a non-empty string")
        args = tool_call_arguments(fn.get("arguments", "{}"), f"{cw}.function.arguments")
        call_id = call.get("id", "")
        if not isinstance(call_id, str):
            raise BadRequest(f"{cw}.id must be a string")
        out.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": args}})
    return out


def validate_messages(messages: Any) -> list[dict[str, Any]]:
    """Check an OpenAI `messages` array and return normalised copies (see module docstring).

    Tool call `arguments` come back decoded (dicts): both renderers need objects, not strings.
    """
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list")
    out: list[dict[str, Any]] = []
    for i, msg in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(msg, dict):
            raise BadRequest(f"{where} must be an object with 'role' and 'content'")
        role = msg.get("role")
        if role not in ROLES:
            raise BadRequest(f"{where}.role is {role!r}; expected one of {', '.join(ROLES)}")
        if role == "developer":
            role = "system"
        name = msg.get("name")
        if name is not None and not isinstance(name, str):
            raise BadRequest(f"{where}.name must be a string")
        norm: dict[str, Any] = {"role": role}
        if role == "assistant":
            norm["tool_calls"] = _tool_calls(msg.get("tool_calls"), where)
            norm["content"] = _content_text(msg.get("content"), where, nullable=True)
        else:
            if msg.get("tool_calls"):
                raise BadRequest(f"{where}: only assistant messages may carry tool_calls")
            norm["content"] = _content_text(msg.get("content"), where, nullable=False)
        if role == "tool":
            call_id = msg.get("tool_call_id")
            if call_id is not None and not isinstance(call_id, str):
                raise BadRequest(f"{where}.tool_call_id must be a string")
            norm["tool_call_id"] = call_id
        if name is not None:
            norm["name"] = name
        out.append(norm)
    return out


def validate_tools(tools: Any) -> list[dict[str, Any]] | None:
    """Check an OpenAI `tools` array; returns None for no tools (None or [])."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise BadRequest("tools must be a list of {'type': 'function', 'function': {...}} objects")
    if not tools:
        return None
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise BadRequest(f"{where} must be an object with type 'function'")
        fn = tool.get("function")
        if not isinstance(fn, dict):
            raise BadRequest(f"{where}.function must be an object with at least 'name'")
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise BadRequest(f"{where}.function.name must be a non-empty string")
        if name in seen:
            raise BadRequest(f"{where}.function.name {name!r} is defined twice")
        seen.add(name)
        desc = fn.get("description", "")
        if desc is not None and not isinstance(desc, str):
            raise BadRequest(f"{where}.function.description must be a string")
        params = fn.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict):
            raise BadRequest(f"{where}.function.parameters must be a JSON schema object")
        spec: dict[str, Any] = {"name": name, "description": desc or "", "parameters": params}
        out.append({"type": "function", "function": spec})
    return out
