"""The same single-turn chat call through different client stacks, for `benchmarks/framework_curves.py`.

A swarm episode is an OpenAI-compatible endpoint (base URL + API key); what calls it is the user's code.
Each stack here sends one user message and returns the reply's text:

- `openai`: the OpenAI Python SDK (`client.chat.completions.create`), what the built-in tasks use;
- `httpx`: a raw HTTP POST of the chat-completions JSON body, no SDK;
- `langchain`: LangChain's `ChatOpenAI.invoke`;
- `langgraph`: a compiled LangGraph `StateGraph` (one model node over `MessagesState`) invoked on the message.

`StackArithmetic` is the built-in arithmetic task (same items, same reward) whose agent is one of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from engine.tasks.arithmetic import Arithmetic
from engine.tasks.base import Item

# Generous: a loaded 2-core machine batches many episodes; the server's own deadlines end stuck episodes.
HTTP_TIMEOUT_S = 600.0


def _openai(llm: Any, model: str, prompt: str, sampling: dict[str, Any]) -> str:
    out = llm.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}], **sampling)
    return out.choices[0].message.content or ""


def _httpx(llm: Any, model: str, prompt: str, sampling: dict[str, Any]) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], **sampling}
    r = httpx.post(
        str(llm.base_url).rstrip("/") + "/chat/completions", json=body,
        headers={"Authorization": f"Bearer {llm.api_key}"}, timeout=HTTP_TIMEOUT_S,
    )
    r.raise_for_status()
    return r.json()["choices"][0]["message"]["content"] or ""


def _chat_model(llm: Any, model: str, sampling: dict[str, Any]):
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        base_url=str(llm.base_url), api_key=llm.api_key, model=model, max_retries=0, timeout=HTTP_TIMEOUT_S,
        temperature=sampling.get("temperature"), max_tokens=sampling.get("max_tokens"),
    )


def _langchain(llm: Any, model: str, prompt: str, sampling: dict[str, Any]) -> str:
    return str(_chat_model(llm, model, sampling).invoke([("user", prompt)]).content)


def _langgraph(llm: Any, model: str, prompt: str, sampling: dict[str, Any]) -> str:
    from langgraph.graph import END, START, MessagesState, StateGraph

    chat = _chat_model(llm, model, sampling)
    graph = StateGraph(MessagesState)
    graph.add_node("agent", lambda state: {"messages": [chat.invoke(state["messages"])]})
    graph.add_edge(START, "agent")
    graph.add_edge("agent", END)
    final = graph.compile().invoke({"messages": [("user", prompt)]})
    return str(final["messages"][-1].content)


STACKS: dict[str, Callable[[Any, str, str, dict[str, Any]], str]] = {
    "openai": _openai,
    "httpx": _httpx,
    "langchain": _langchain,
    "langgraph": _langgraph,
}


class StackArithmetic(Arithmetic):
    """`arithmetic` (items, name and reward unchanged) played through the client stack `stack`.

    `run` gets the episode's OpenAI SDK client, as every built-in task does; the other stacks use only its
    base URL and API key, so each stack talks to the episode's endpoint by itself."""

    def __init__(self, stack: str) -> None:
        if stack not in STACKS:
            raise ValueError(f"unknown client stack {stack!r}; stacks: {', '.join(STACKS)}")
        super().__init__()
        self.stack = stack

    def run(self, llm: Any, model: str, item: Item, sampling: dict[str, Any]) -> float:
        return self.reward(STACKS[self.stack](llm, model, item.prompt, sampling), item)
