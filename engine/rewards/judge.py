"""The LLM-judge reward: a model behind an OpenAI-compatible endpoint grades a reply against a rubric.

    judge = LLMJudge(JudgeConfig(swarm_url="http://127.0.0.1:10087", model="smollm2-135m"))
    reward = judge.score(prompt, reply).reward  # in [0, 1]

What it guarantees:
- the judge's calls never train: it holds its own client to its own endpoint and never sees the policy
  episode's key; on a swarm server each call is an eval episode, aborted after the answer;
- a grade is read by `parse_score`, which refuses what it cannot read; a refused answer, a timeout or an
  HTTP error is retried `retries` times, then the fallback applies: `exclude` raises JudgeUnavailable
  (an episode runner aborts the episode, so it never trains) or `default` gives `default_score`, marked
  as a fallback in the verdict. Never a silent 0;
- a wrong key or model name (401/403/404/400) is a JudgeMisconfigured error at once, not a fallback: a
  judge that can never answer must stop the run, not turn every reward into the default;
- grades are cached (engine.rewards.judge_cache), so a repeated reply is not re-judged.

What it does not do: judge quality. A small judge (SmolLM2-135M) is a weak grader; run the
reward-hacking probes (vibe.judge_probes) before training against it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from engine.errors import ConfigError, SwarmError
from engine.rewards.judge_cache import JudgeCache, grade_key
from engine.rewards.judge_config import Fallback, JudgeConfig
from engine.rewards.judge_score import ScoreUnparseable, judge_messages, normalise, parse_score

__all__ = ["JUDGE_TASK_ID", "ChatFn", "JudgeMisconfigured", "JudgeUnavailable", "JudgeVerdict", "LLMJudge", "openai_chat",
           "swarm_chat"]

# The task id of the judge's eval episodes on a swarm server (visible in its status and logs).
JUDGE_TASK_ID = "llm-judge"

# messages -> the judge's answer text
ChatFn = Callable[[list[dict[str, str]]], str]


class JudgeUnavailable(SwarmError, RuntimeError):
    """The judge could not grade a reply (fallback=exclude): the episode must not train."""


class JudgeMisconfigured(ConfigError):
    """The judge endpoint refuses the request itself (key, model name, body): retrying cannot help."""


@dataclass(frozen=True)
class JudgeVerdict:
    reward: float  # in [0, 1]
    score: float | None  # on the judge's scale; None for a fallback
    cached: bool = False
    fallback: bool = False
    error: str | None = None  # the last failure, for a fallback


def openai_chat(cfg: JudgeConfig) -> ChatFn:
    """The judge's call to an OpenAI-compatible endpoint (cfg.base_url)."""
    import openai

    client = openai.OpenAI(base_url=cfg.base_url, api_key=cfg.secret(), timeout=cfg.timeout_s, max_retries=0)

    def chat(messages: list[dict[str, str]]) -> str:
        out = client.chat.completions.create(model=cfg.model, messages=messages, max_tokens=cfg.max_tokens,
                                             temperature=cfg.temperature)
        return out.choices[0].message.content or ""

    return chat


def swarm_chat(cfg: JudgeConfig) -> ChatFn:
    """The judge's call to a swarm server (cfg.swarm_url), as an eval episode aborted after the answer."""
    from engine.client import SwarmClient

    client = SwarmClient(cfg.swarm_url, admin_token=cfg.secret(), client_id="llm-judge", timeout=cfg.timeout_s)

    def chat(messages: list[dict[str, str]]) -> str:
        # an eval episode never enters the pool; leaving the block without end() aborts it
        with client.begin_episode(JUDGE_TASK_ID, is_eval=True, wait=cfg.timeout_s) as ep:
            out = ep.openai(max_retries=0, timeout=cfg.timeout_s).chat.completions.create(
                model=ep.model, messages=messages, max_tokens=cfg.max_tokens, temperature=cfg.temperature)
            return out.choices[0].message.content or ""

    return chat


def _misconfigured(e: Exception) -> bool:
    import openai

    return isinstance(e, (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError,
                          openai.BadRequestError)) or getattr(e, "status", None) in (400, 401, 403, 404)


class LLMJudge:
    """Grades replies against `cfg.rubric`. Thread-safe: episode runners share one judge across threads.

    `chat` replaces the endpoint client (a test seam); by default it is built from `cfg`."""

    def __init__(self, cfg: JudgeConfig, chat: ChatFn | None = None, cache: JudgeCache | None = None) -> None:
        self.cfg = cfg
        self._chat = chat or (openai_chat(cfg) if cfg.base_url is not None else swarm_chat(cfg))
        self.cache = cache if cache is not None else JudgeCache(cfg.cache_path)
        self._lock = threading.Lock()
        self.counts = {"graded": 0, "cache_hits": 0, "calls": 0, "fallbacks": 0, "excluded": 0}

    def _count(self, name: str) -> None:
        with self._lock:
            self.counts[name] += 1

    def score(self, prompt: str, reply: str) -> JudgeVerdict:
        """The judge's grade of `reply` to `prompt`; JudgeUnavailable when it cannot grade and fallback=exclude."""
        cfg = self.cfg
        messages = judge_messages(cfg, prompt, reply)
        key = grade_key(messages, cfg.model, (cfg.scale_min, cfg.scale_max))
        if (hit := self.cache.get(key)) is not None:
            self._count("cache_hits")
            return JudgeVerdict(normalise(hit, cfg), hit, cached=True)
        error = ""
        for _ in range(cfg.retries + 1):
            self._count("calls")
            try:
                score = parse_score(self._chat(messages), cfg)
            except ScoreUnparseable as e:
                error = str(e)
                continue
            except Exception as e:  # noqa: BLE001 - classified below: misconfiguration stops, the rest is retried
                if _misconfigured(e):
                    raise JudgeMisconfigured(f"the judge endpoint refused the request ({type(e).__name__}: {e}); "
                                             "check its URL, key and model name") from e
                if not _transient(e):
                    raise
                error = f"{type(e).__name__}: {e}"
                continue
            self.cache.put(key, score)
            self._count("graded")
            return JudgeVerdict(normalise(score, cfg), score)
        return self._fall_back(error)

    def grade(self, prompt: str, reply: str) -> float | None:
        """The judge's own reward for `reply`, or None when it gave none (excluded, or only the fallback
        score): what a probe of the judge compares, where a fallback score would pass for a grade."""
        try:
            v = self.score(prompt, reply)
        except JudgeUnavailable:
            return None
        return None if v.fallback else v.reward

    def _fall_back(self, error: str) -> JudgeVerdict:
        why = f"the judge gave no usable grade in {self.cfg.retries + 1} attempt(s); last: {error}"
        if self.cfg.fallback is Fallback.EXCLUDE:
            self._count("excluded")
            raise JudgeUnavailable(why + " (fallback=exclude: the episode is dropped)")
        self._count("fallbacks")
        assert self.cfg.default_score is not None  # the config validates this
        return JudgeVerdict(self.cfg.default_score, None, fallback=True, error=why)


def _transient(e: Exception) -> bool:
    """Errors a later attempt may not meet: timeouts, dropped connections, 5xx, a busy swarm server."""
    import openai

    return isinstance(e, (openai.APIError, httpx.HTTPError, SwarmError, TimeoutError, OSError))

