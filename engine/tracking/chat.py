r"""Render OpenAI chat requests to token ids with the model's own chat template, cut into blocks.

`render_prompt(tokenizer, messages, tools)` returns the exact ids the model is fed (the template rendered
with `add_generation_prompt=True`, tokenized ONCE with `add_special_tokens=False`, as
`apply_chat_template(tokenize=True)` does) and a list of `Block`s that partitions those ids in order.
Nothing here knows any model's special tokens: boundaries come from rendering the template itself.

How blocks are found. Everything is located in `full` (the whole conversation rendered once) by
re-rendering variants of the conversation with the same template, so it works for any template that
renders messages in order, including ones whose history depends on later turns (Qwen3 drops reasoning
before the last user query and renders a *last* assistant turn differently from the same turn in history):
1. Content spans. Fast path: ONE render with every message's content replaced by its own sentinel; when
   `full` is exactly that render's glue with the original contents in place of the sentinels, every
   span is known. Otherwise, per message: render the full conversation with only that content replaced
   by a sentinel; if the renders differ exactly by sentinel <-> one span of `full`, that span is where
   the content is rendered (trimmed, stripped of reasoning, whatever the template does to it); and the
   ends of `render(messages[:i+1])` that are prefixes of `full` bound and validate the spans (they are
   never cuts; a message that cannot be located otherwise becomes its whole delimited region).
2. Assistant body: starts where the generation prompt ends, i.e. where the model's sampled reply started
   when the turn was generated. The generation-prompt text G is taken from the template (full render
   minus the render without generation prompt). The body starts right after G when G immediately
   precedes the content; else at `len(render(messages[:i], add_generation_prompt=True))` when that is a
   prefix of `full` (e.g. Qwen3 turns rendered with their reasoning before the content); else after G
   as its only occurrence between the previous body and the next one (e.g. a tool-call-only turn whose
   history changed). G itself is an ENV block. The body ends right after the first end-of-turn token
   (default `tokenizer.eos_token_id`; pass `end_of_turn_ids`, e.g. the inference engine's stop ids) -
   the token the model sampled to stop - else at the content end. Glue after it (ChatML's "\n") is ENV.
3. Blocks = bodies (author of the message) and the ENV glue between them, cut additionally at each
   assistant header start and at the final generation prompt. Text that cannot be attributed stays ENV
   (one ENV block for a template that defeats every probe).
So SmolLM2 (ChatML) renders `[user u, assistant a, user v]` as
`ENV(<|im_start|>system\n...<|im_end|>\n<|im_start|>user\n) USER(u) ENV(<|im_end|>\n)
ENV(<|im_start|>assistant\n) LLM(a<|im_end|>) ENV(\n<|im_start|>user\n) USER(v) ENV(<|im_end|>\n)
ENV(<|im_start|>assistant\n)`, and the call that sampled `a` recorded `ENV(...) USER(u) ENV(<|im_end|>\n)
ENV(<|im_start|>assistant\n) LLM(a<|im_end|>)`: the same blocks, so timeline merging can compare them
block by block (engine.tracking.merging). Checked beyond the tests, ad hoc, with the Qwen2.5 and Qwen3
chat templates (native tools, reasoning): multi-turn tool episodes collapse to one timeline.

Tokens are assigned to blocks by their start character offset (`return_offsets_mapping`); a token that
straddles a boundary belongs to the block where it starts, and block texts are cut at token starts, so
both `concat(block.token_ids) == token_ids` and `concat(block.text) == text` hold exactly. Authors:
system and tool messages -> ENV, user -> USER, assistant -> LLM (trainable=False, no logprobs: a
re-rendering of an earlier reply, never its sampled ids), template glue -> ENV.

Tools:
- Templates whose source mentions `tools` get `tools` and `tool_calls` (arguments decoded to objects,
  the Hugging Face convention) passed through to `apply_chat_template`.
- Other templates (SmolLM2): the tool list and an instruction to answer with
  `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` are appended to the system message (or
  form a new one); assistant `tool_calls` are rendered back as exactly that canonical text (see
  `format_tool_calls`); tool results keep role "tool" when the template renders that role, else become
  user messages wrapped in `<tool_response>...</tool_response>` (probed by rendering, not guessed).
- `parse_tool_calls(text)` turns `<tool_call>{json}</tool_call>` blocks (for both kinds of template:
  whitespace inside the tags is ignored, as in Qwen/Hermes output) into OpenAI tool calls.

Not implemented: slow (offset-less) tokenizers (`ConfigError`), non-`<tool_call>` native formats in
`parse_tool_calls` (Llama 3.1 bare JSON, Mistral `[TOOL_CALLS]`), `reasoning_content` pass-through,
multimodal parts. Like `apply_chat_template` itself, special-token strings inside message content are
tokenized as special tokens.
"""

from __future__ import annotations

import json
import re
import secrets
from bisect import bisect_left
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from jinja2.exceptions import TemplateError

from engine.errors import BadRequest, ConfigError
from engine.tracking.messages import validate_messages, validate_tools
from engine.types import Author, Block

__all__ = [
    "RenderedPrompt",
    "render_prompt",
    "parse_tool_calls",
    "format_tool_calls",
    "tool_instructions",
    "template_supports_tools",
    "TOOL_CALL_OPEN",
    "TOOL_CALL_CLOSE",
]

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
_TOOL_CALL_RE = re.compile(re.escape(TOOL_CALL_OPEN) + r"(.*?)" + re.escape(TOOL_CALL_CLOSE), re.DOTALL)
_SENTINEL = "@@swarm-content-probe-5e1f@@"
_AUTHOR_OF_ROLE = {"system": Author.ENV, "tool": Author.ENV, "user": Author.USER, "assistant": Author.LLM}


@dataclass(slots=True)
class RenderedPrompt:
    """A prompt ready for generation and for tracking.

    `token_ids` are fed to the model; `blocks` partition them (and `text`) in order. `end_of_turn` maps
    the ids that end an assistant turn to their text: the tracker appends that text to a sampled reply
    that ended with one, so sampled and re-rendered blocks compare equal as text.
    """

    token_ids: list[int]
    blocks: list[Block]
    text: str
    end_of_turn: dict[int, str] = field(default_factory=dict)
    native_tools: bool = False


# ----------------------------------------------------------------------------------------------------
# tool calls as text


def format_tool_calls(content: str, tool_calls: Sequence[dict[str, Any]]) -> str:
    """The canonical text of an assistant turn with tool calls (inverse of `parse_tool_calls`).

    `content`, a newline, then one `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` per line
    (json.dumps defaults: ", " and ": " separators, key order as given). A model reply in exactly this
    form round-trips byte for byte through parse -> client -> render; any other spacing still parses
    but is re-rendered canonically (so it will not merge, see engine.tracking.merging).
    """
    lines = []
    for call in tool_calls:
        fn = call["function"]
        args = fn["arguments"]
        if isinstance(args, str):
            args = json.loads(args) if args.strip() else {}
        lines.append(
            TOOL_CALL_OPEN
            + json.dumps({"name": fn["name"], "arguments": args}, ensure_ascii=False)
            + TOOL_CALL_CLOSE
        )
    calls = "\n".join(lines)
    if not calls:
        return content
    return f"{content}\n{calls}" if content else calls


def _decode_call(raw: str) -> tuple[str, dict[str, Any]] | None:
    try:
        obj = json.loads(raw.strip())
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    args = obj.get("arguments", {})
    if isinstance(args, str):  # some models double-encode
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return None
    if not isinstance(args, dict):
        return None
    return obj["name"], args


def parse_tool_calls(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """Split a model reply into (content, OpenAI tool_calls).

    Every `<tool_call>...</tool_call>` whose inside is a JSON object with a string `name` and an object
    `arguments` (a JSON-encoded object string is accepted too) becomes
    `{"id": "call_<24 hex>", "type": "function", "function": {"name", "arguments": <JSON string>}}` and is
    removed from the content; malformed or unterminated blocks stay in the content verbatim. With no
    valid call the text is returned unchanged (not stripped). With calls, the remaining content is
    stripped and is None when empty (the OpenAI convention).
    """
    calls: list[dict[str, Any]] = []
    kept: list[str] = []
    pos = 0
    for m in _TOOL_CALL_RE.finditer(text):
        decoded = _decode_call(m.group(1))
        if decoded is None:
            continue
        kept.append(text[pos : m.start()])
        pos = m.end()
        name, args = decoded
        calls.append(
            {
                "id": "call_" + secrets.token_hex(12),
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
            }
        )
    if not calls:
        return text, []
    kept.append(text[pos:])
    content = "".join(kept).strip()
    return (content or None), calls


def tool_instructions(tools: Sequence[dict[str, Any]], *, results_as: str = "tool") -> str:
    """The system-prompt text that describes `tools` to a model whose template has no tool support."""
    result_line = (
        'Each result comes back in a message with role "tool".'
        if results_as == "tool"
        else "Each result comes back in a user message wrapped in <tool_response></tool_response>."
    )
    return "\n".join(
        [
            "# Tools",
            "",
            "You may call one or more functions to help with the user's request. The functions are described "
            "by these JSON schemas:",
            "<tools>",
            *(json.dumps(t, ensure_ascii=False) for t in tools),
            "</tools>",
            "",
            "To call a function, answer with one line per call in exactly this format:",
            TOOL_CALL_OPEN
            + '{"name": "<function name>", "arguments": {<arguments as a JSON object>}}'
            + TOOL_CALL_CLOSE,
            result_line,
        ]
    )


# ----------------------------------------------------------------------------------------------------
# template access


def _template_source(tokenizer: Any) -> str:
    tpl = getattr(tokenizer, "chat_template", None)
    if isinstance(tpl, dict):  # named templates (e.g. "default", "tool_use")
        return "\n".join(str(v) for v in tpl.values())
    if not tpl:
        raise ConfigError(
            "the tokenizer has no chat_template; a chat model (or an explicit template) is required"
        )
    return str(tpl)


def template_supports_tools(tokenizer: Any) -> bool:
    """True when the chat template's source mentions `tools` (it renders tool schemas natively)."""
    return "tools" in _template_source(tokenizer)


class _Renderer:
    """apply_chat_template(tokenize=False) with template errors turned into None (or BadRequest)."""

    def __init__(self, tokenizer: Any, tools: list[dict[str, Any]] | None):
        self.tokenizer = tokenizer
        self.tools = tools

    def try_render(self, messages: list[dict[str, Any]], gen: bool) -> str | None:
        try:
            return self.render(messages, gen)
        except BadRequest:
            return None

    def render(self, messages: list[dict[str, Any]], gen: bool) -> str:
        kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": gen}
        if self.tools is not None:
            kwargs["tools"] = self.tools
        try:
            out = self.tokenizer.apply_chat_template(messages, **kwargs)
        except (TemplateError, TypeError, ValueError, KeyError, IndexError) as e:
            raise BadRequest(f"the model's chat template rejected the conversation: {e}") from e
        if not isinstance(out, str):
            raise ConfigError(
                f"apply_chat_template(tokenize=False) returned {type(out).__name__}, expected str"
            )
        return out


def _tool_role_renders(renderer: _Renderer) -> bool:
    """Whether the template renders a role "tool" message (rather than raising or dropping it)."""
    probe = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
        {"role": "tool", "content": _SENTINEL},
    ]
    out = renderer.try_render(probe, False)
    return out is not None and _SENTINEL in out


def _template_messages(
    msgs: list[dict[str, Any]], tools: list[dict[str, Any]] | None, native: bool, renderer: _Renderer
) -> tuple[list[dict[str, Any]], list[Author]]:
    """The messages handed to the template and each one's block author.

    Native templates get the messages as validated (tool_calls with decoded arguments); others get
    prompted tools (module docstring).
    """
    out: list[dict[str, Any]] = []
    authors = [_AUTHOR_OF_ROLE[m["role"]] for m in msgs]
    if native:
        for m in msgs:
            m = dict(m)
            if m["role"] == "assistant" and not m["tool_calls"]:
                del m["tool_calls"]
            if m["role"] == "tool" and m.get("tool_call_id") is None:
                m.pop("tool_call_id", None)
            out.append(m)
        return out, authors
    tool_role = _tool_role_renders(renderer) if tools or any(m["role"] == "tool" for m in msgs) else True
    for m in msgs:
        if m["role"] == "assistant":
            out.append({"role": "assistant", "content": format_tool_calls(m["content"], m["tool_calls"])})
        elif m["role"] == "tool" and not tool_role:
            out.append({"role": "user", "content": f"<tool_response>\n{m['content']}\n</tool_response>"})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    if tools:
        text = tool_instructions(tools, results_as="tool" if tool_role else "user")
        if out[0]["role"] == "system":
            out[0] = {
                "role": "system",
                "content": f"{out[0]['content']}\n\n{text}" if out[0]["content"] else text,
            }
        else:
            out.insert(0, {"role": "system", "content": text})
            authors.insert(0, Author.ENV)
    return out, authors


# ----------------------------------------------------------------------------------------------------
# spans and blocks


@dataclass(slots=True)
class _Span:
    start: int
    end: int
    author: Author


class _Splitter:
    """Finds the labelled body span of each message inside `full` and the cut points between blocks."""

    def __init__(
        self,
        full: str,
        msgs: list[dict[str, Any]],
        authors: list[Author],
        renderer: _Renderer,
        starts: list[int],
        ends: list[int],
        ids: list[int],
        eot: Collection[int],
    ):
        self.full, self.msgs, self.authors, self.renderer = full, msgs, authors, renderer
        self.starts, self.ends, self.ids, self.eot = starts, ends, ids, eot
        self.gen_prompt = ""
        self._prefixes: dict[int, str | None] = {}

    def _prefix(self, i: int) -> str | None:
        """render(messages[:i]) without generation prompt, memoised."""
        if i not in self._prefixes:
            self._prefixes[i] = self.renderer.try_render(self.msgs[:i], False) if i > 0 else None
        return self._prefixes[i]

    def spans(self) -> list[_Span]:
        full, n = self.full, len(self.msgs)
        without = self._prefix(n)
        stable = without is not None and full.startswith(without)
        self.gen_prompt = full[len(without) :] if stable else ""
        fast = self._content_spans_at_once()
        if fast is not None:  # every content rendered verbatim: no per-message probing needed
            contents: list[tuple[int, int] | None] = list(fast)
            bounds: list[int | None] = [None] * (n - 1) + [len(without) if stable else None]
        else:
            bounds = self._message_ends()
            contents = [self._content_span(i) for i in range(n)]
        labels: list[_Span] = []
        cuts = {0, len(full)}
        for i in range(n):
            lo = max([0, *(e for e in bounds[:i] if e is not None)])
            if labels:
                lo = max(lo, labels[-1].end)
            later = [c[0] for c in contents[i + 1 :] if c is not None]
            hi = min([len(full), *(e for e in bounds[i:] if e is not None), *later])
            label, header = self._label(i, lo, hi, bounds, contents[i])
            if label is not None and lo <= label.start < label.end <= hi:
                labels.append(label)
                cuts.update((label.start, label.end))
                if header is not None and lo <= header <= label.start:
                    cuts.add(header)
        if bounds and bounds[-1] is not None and (not labels or bounds[-1] >= labels[-1].end):
            cuts.add(bounds[-1])  # the generation prompt
        out: list[_Span] = []
        k = 0
        ordered = sorted(cuts)
        for a, b in zip(ordered, ordered[1:], strict=False):
            while k < len(labels) and labels[k].end <= a:
                k += 1
            inside = k < len(labels) and labels[k].start <= a and b <= labels[k].end
            out.append(_Span(a, b, labels[k].author if inside else Author.ENV))
        return out

    def _message_ends(self) -> list[int | None]:
        """End of message i = length of the rendered prefix messages[:i+1], when that is a prefix of full."""
        out: list[int | None] = []
        last = 0
        for i in range(len(self.msgs)):
            prefix = self._prefix(i + 1)
            if prefix is None or len(prefix) <= last or not self.full.startswith(prefix):
                out.append(None)  # the template renders this prefix differently (or refuses it)
            else:
                out.append(len(prefix))
                last = len(prefix)
        return out

    def _content_spans_at_once(self) -> list[tuple[int, int]] | None:
        """All content spans from ONE render with every content replaced by its own sentinel, when `full`
        is exactly that render's glue with the original contents in place of the sentinels."""
        marks = [f"@@swarm-probe-{i}-5e1f@@" for i in range(len(self.msgs))]
        probe = self.renderer.try_render(
            [{**m, "content": k} for m, k in zip(self.msgs, marks, strict=True)], True
        )
        if probe is None or any(probe.count(k) != 1 for k in marks):
            return None
        at = [probe.index(k) for k in marks]
        if any(b <= a for a, b in zip(at, at[1:], strict=False)):
            return None
        glue = [probe[: at[0]]] + [probe[a + len(k) : b] for a, k, b in zip(at, marks, at[1:], strict=False)]
        out: list[tuple[int, int]] = []
        pos = 0
        for g, m in zip(glue, self.msgs, strict=True):
            content = m["content"]
            if not self.full.startswith(g, pos) or not self.full.startswith(content, pos + len(g)):
                return None
            pos += len(g)
            out.append((pos, pos + len(content)))
            pos += len(content)
        return out if self.full[pos:] == probe[at[-1] + len(marks[-1]) :] else None

    def _content_span(self, i: int) -> tuple[int, int] | None:
        """Where message i's content is rendered in full: re-render everything with that content replaced
        by a sentinel; the only difference must be the sentinel itself (robust to content transformations
        such as trimming or dropped reasoning, and to templates whose prefixes are unstable)."""
        probe_msgs = list(self.msgs)
        probe_msgs[i] = {**self.msgs[i], "content": _SENTINEL}
        probe = self.renderer.try_render(probe_msgs, True)
        if probe is None or probe.count(_SENTINEL) != 1:
            return None
        k = probe.index(_SENTINEL)
        tail = probe[k + len(_SENTINEL) :]
        end = len(self.full) - len(tail)
        if end < k or self.full[:k] != probe[:k] or self.full[end:] != tail:
            return None
        return k, end

    def _label(
        self, i: int, lo: int, hi: int, bounds: list[int | None], content: tuple[int, int] | None
    ) -> tuple[_Span | None, int | None]:
        """Message i's body span and, for an assistant turn, where its header (the generation prompt) starts."""
        author = self.authors[i]
        start = 0 if i == 0 else bounds[i - 1]
        region = _Span(start, bounds[i], author) if start is not None and bounds[i] is not None else None
        if content is not None and not (lo <= content[0] <= content[1] <= hi):
            content = None
        if self.msgs[i]["role"] != "assistant":
            if content is not None:
                return _Span(content[0], content[1], author), None
            return region, None  # content not locatable: the whole delimited region, or nothing
        # assistant: the body starts where the generation prompt ends (where the sampled reply started):
        # the generation-prompt text right before the content (no render needed), else the end of
        # render(messages[:i], add_generation_prompt=True) when that is a prefix of full, else the generation
        # prompt text as the only occurrence between the previous body and the next one
        body_start = header = None
        g = self.gen_prompt
        if (
            g
            and content is not None
            and content[0] - len(g) >= lo
            and self.full.startswith(g, content[0] - len(g))
        ):
            body_start, header = content[0], content[0] - len(g)
        if body_start is None and i > 0:
            without = self._prefix(i)
            gen = self.renderer.try_render(self.msgs[:i], True)
            if (
                without is not None
                and gen is not None
                and gen.startswith(without)
                and self.full.startswith(gen)
            ):
                if lo <= len(gen) <= hi:
                    body_start, header = len(gen), len(without)
        if body_start is None and g and content is None:
            at = self.full.find(g, lo, hi)
            if at >= 0 and self.full.find(g, at + 1, hi) < 0:
                body_start, header = at + len(g), at
        if body_start is None and content is not None:
            body_start = content[0]
        if body_start is None:
            return region, None
        # ... and ends right after the first end-of-turn token (the one the model sampled to stop)
        for t in range(bisect_left(self.starts, body_start), len(self.ids)):
            if self.starts[t] >= hi:
                break
            if self.ids[t] in self.eot:
                return _Span(body_start, min(self.ends[t], hi), author), header
        if content is not None and content[1] > body_start:
            return _Span(body_start, content[1], author), header
        if bounds[i] is not None and bounds[i] > body_start:
            return _Span(body_start, bounds[i], author), header
        return None, None


def _blocks(full: str, ids: list[int], starts: list[int], spans: list[_Span]) -> list[Block]:
    """Assign tokens to spans by start offset; block text is cut at token starts (exact partition)."""
    groups: list[tuple[int, list[int]]] = []  # (span index, token positions)
    k = 0
    for t, st in enumerate(starts):
        while k < len(spans) - 1 and st >= spans[k].end:
            k += 1
        if groups and groups[-1][0] == k:
            groups[-1][1].append(t)
        else:
            groups.append((k, [t]))
    blocks: list[Block] = []
    for g, (k, pos) in enumerate(groups):
        cut0 = 0 if g == 0 else starts[pos[0]]
        cut1 = len(full) if g == len(groups) - 1 else starts[groups[g + 1][1][0]]
        blocks.append(Block(spans[k].author, full[cut0:cut1], [ids[t] for t in pos]))
    return blocks


def render_prompt(
    tokenizer: Any,
    messages: Any,
    tools: Any = None,
    *,
    end_of_turn_ids: Collection[int] | None = None,
) -> RenderedPrompt:
    """Validate, render with the model's chat template and cut into blocks (see module docstring).

    Raises `BadRequest` for invalid messages/tools or a conversation the template rejects, and
    `ConfigError` for a tokenizer without a chat template or offsets.
    """
    msgs = validate_messages(messages)
    tool_specs = validate_tools(tools)
    native = template_supports_tools(tokenizer)
    renderer = _Renderer(tokenizer, tool_specs if native else None)
    tmsgs, authors = _template_messages(msgs, tool_specs, native, renderer)
    full = renderer.render(tmsgs, True)
    try:
        enc = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
    except NotImplementedError as e:
        raise ConfigError("render_prompt needs a fast tokenizer (return_offsets_mapping)") from e
    ids = list(enc["input_ids"])
    starts, ends, last = [], [], 0
    for st, en in enc["offset_mapping"]:
        last = max(last, int(st))  # keep starts monotone (byte-fallback pieces may share a char)
        starts.append(last)
        ends.append(max(last, int(en)))
    if end_of_turn_ids is None:
        eos = getattr(tokenizer, "eos_token_id", None)
        end_of_turn_ids = [] if eos is None else [eos]
    eot = {int(t): tokenizer.decode([int(t)], skip_special_tokens=False) for t in end_of_turn_ids}
    spans = _Splitter(full, tmsgs, authors, renderer, starts, ends, ids, eot).spans()
    blocks = _blocks(full, ids, starts, spans)
    return RenderedPrompt(token_ids=ids, blocks=blocks, text=full, end_of_turn=eot, native_tools=native)
