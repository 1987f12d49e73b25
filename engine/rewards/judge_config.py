"""The one typed config of the LLM-judge reward: where the judge is, what it grades against, how its answer
is read, and what happens when it does not answer.

Two kinds of endpoint, exactly one per config:
- `base_url`: any OpenAI-compatible chat endpoint (a provider, vLLM, ...); its key is read from the
  environment variable named by `api_key_env`, so a config file never holds a secret;
- `swarm_url`: a swarm server (a second `swarm serve`, or even the trainable one). Each judge call opens an
  *eval* episode there and aborts it after the answer: eval episodes never enter training, so the judge's
  tokens are never trained on. Its admin token is read from `admin_token_env`.
"""

from __future__ import annotations

import os
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine.errors import ConfigError

__all__ = ["DEFAULT_EXAMPLES", "DEFAULT_RUBRIC", "Fallback", "JudgeConfig", "JudgeExample", "ParseMode"]

DEFAULT_RUBRIC = (
    "A good reply is one sentence that states the main point of the text, adds nothing the text does not "
    "say, and leaves out minor details."
)


class JudgeExample(BaseModel):
    """One graded exchange shown to the judge before the real one (few-shot): it teaches the answer format.

    `grade` is a fraction of the scale (0 the worst score, 1 the best), so the same examples serve any
    scale_min..scale_max. Small judges need these: SmolLM2-135M, asked zero-shot, restated the rubric or
    wrote a summary itself on all 48 calls of docs/benchmarks/judge_probes.md and never gave a score.
    Examples show the format; they do not make a weak judge discriminate (the probes measure that)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rubric: str = Field(..., min_length=1)
    prompt: str = Field(..., min_length=1)
    reply: str = Field(..., min_length=1)
    grade: float = Field(..., ge=0.0, le=1.0, description="0: the scale's worst score, 1: its best.")


# A text unlike the built-in summary task's (engine.tasks.summary), one good and one unrelated reply, so
# that the examples show both ends of the scale without grading any text the judge is later asked about.
_EXAMPLE_TEXT = ("Summarise in one sentence: A bus company added a night route to the airport so that early "
                 "travellers can reach their flights. Tickets cost the same as by day. The first bus was full.")
DEFAULT_EXAMPLES = (
    JudgeExample(rubric=DEFAULT_RUBRIC, prompt=_EXAMPLE_TEXT,
                 reply="The bus company added a night route to the airport for early travellers.", grade=8 / 9),
    JudgeExample(rubric=DEFAULT_RUBRIC, prompt=_EXAMPLE_TEXT,
                 reply="The mayor opened a new swimming pool in the park.", grade=1 / 9),
)


class ParseMode(str, Enum):
    """How strictly the judge's answer is read (engine.rewards.judge_score.parse_score)."""

    LABELLED = "labelled"  # only "Score: N" counts
    LENIENT = "lenient"  # also "N/MAX" and an answer that is a bare number


class Fallback(str, Enum):
    """What a reply gets when the judge cannot grade it (timeouts, errors, unparseable answers after retries)."""

    EXCLUDE = "exclude"  # the episode is aborted: it never trains (engine.rewards.judge.JudgeUnavailable)
    DEFAULT = "default"  # the reply gets `default_score`, flagged as a fallback in the verdict


class JudgeConfig(BaseModel):
    """Everything the LLM-judge reward needs. Frozen and serialisable, like every engine config."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # -- endpoint (exactly one) --
    base_url: str | None = Field(None, description="An OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1.")
    api_key_env: str = Field("SWARM_JUDGE_API_KEY", description="Environment variable holding base_url's key.")
    swarm_url: str | None = Field(
        None, description="A swarm server, e.g. http://127.0.0.1:10087: judge calls run as eval episodes there.")
    admin_token_env: str = Field("SWARM_JUDGE_ADMIN_TOKEN", description="Environment variable holding swarm_url's admin token.")
    model: str = Field(..., min_length=1, description="The judge model's name as its endpoint knows it.")
    # -- grading --
    rubric: str = Field(DEFAULT_RUBRIC, min_length=1, description="What a good reply is; shown to the judge verbatim.")
    scale_min: int = Field(1, description="The lowest score the judge may give (reward 0).")
    scale_max: int = Field(10, description="The highest score the judge may give (reward 1).")
    parse: ParseMode = Field(ParseMode.LENIENT, description="How strictly the judge's answer is read.")
    examples: tuple[JudgeExample, ...] = Field(
        DEFAULT_EXAMPLES, description="Graded exchanges shown before the real one (few-shot), each its own rubric; "
        "() asks zero-shot. The defaults grade a text unlike the built-in summaries.")
    max_tokens: int = Field(64, ge=1, description="The judge's answer budget; a score needs few tokens.")
    temperature: float = Field(0.0, ge=0.0, description="0: the same reply gets the same grade (and caching is exact).")
    # -- failure behaviour --
    timeout_s: float = Field(30.0, gt=0, description="One judge call's limit; a slow judge must not stall rollouts.")
    retries: int = Field(2, ge=0, description="Extra attempts after a timeout, an HTTP error or an unparseable answer.")
    fallback: Fallback = Field(Fallback.EXCLUDE, description="What an ungradable reply gets; never a silent 0.")
    default_score: float | None = Field(
        None, ge=0.0, le=1.0, description="The reward under fallback=default (on the 0..1 reward scale).")
    # -- cache --
    cache_path: str | None = Field(
        None, description="A SQLite file of past grades, shared across runs; None keeps them in memory.")

    @model_validator(mode="after")
    def _check(self) -> JudgeConfig:
        if (self.base_url is None) == (self.swarm_url is None):
            raise ValueError("give exactly one judge endpoint: base_url (OpenAI-compatible) or swarm_url (a swarm server)")
        if self.scale_min >= self.scale_max:
            raise ValueError(f"scale_min ({self.scale_min}) must be below scale_max ({self.scale_max})")
        if self.fallback is Fallback.DEFAULT and self.default_score is None:
            raise ValueError("fallback=default needs default_score (0..1); or use fallback=exclude to drop the episode")
        if self.fallback is Fallback.EXCLUDE and self.default_score is not None:
            raise ValueError("default_score is only used with fallback=default; drop it or set fallback: default")
        return self

    def secret(self) -> str:
        """The key (base_url) or admin token (swarm_url) from the environment; a ConfigError naming the variable."""
        name = self.api_key_env if self.base_url is not None else self.admin_token_env
        value = os.environ.get(name, "")
        if not value:
            raise ConfigError(f"the judge endpoint needs a key: set the environment variable {name}")
        return value

    @classmethod
    def from_env(cls, prefix: str = "SWARM_JUDGE_") -> JudgeConfig:
        """A config from PREFIX_BASE_URL or PREFIX_SWARM_URL, PREFIX_MODEL and optionally PREFIX_RUBRIC,
        PREFIX_FALLBACK, PREFIX_DEFAULT_SCORE, PREFIX_CACHE (the built-in `judged_summary` task reads these)."""
        env = {k.removeprefix(prefix).lower(): v for k, v in os.environ.items() if k.startswith(prefix)}
        if not (env.get("base_url") or env.get("swarm_url")) or not env.get("model"):
            raise ConfigError(
                f"no judge configured: set {prefix}BASE_URL (an OpenAI-compatible endpoint, key in {prefix}API_KEY) "
                f"or {prefix}SWARM_URL (a swarm server, admin token in {prefix}ADMIN_TOKEN), and {prefix}MODEL")
        fields = {"base_url": env.get("base_url") or None, "swarm_url": env.get("swarm_url") or None,
                  "model": env["model"], "api_key_env": f"{prefix}API_KEY", "admin_token_env": f"{prefix}ADMIN_TOKEN"}
        for name, key in (("rubric", "rubric"), ("fallback", "fallback"), ("default_score", "default_score"),
                          ("cache_path", "cache")):
            if env.get(key):
                fields[name] = env[key]
        try:
            return cls(**fields)
        except ValueError as e:
            raise ConfigError(f"judge settings in {prefix}*: {e}") from e
