"""Wire formats of the server's HTTP API (pydantic models; they also generate the OpenAPI schema)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engine.training.exchange import SharedSample


class ChatCompletionRequest(BaseModel):
    """The subset of OpenAI's chat completions request the server honours; unknown fields are ignored."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    messages: list[dict[str, Any]] = Field(..., min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    n: int = Field(1, ge=1, le=64)
    stop: str | list[str] | None = None
    temperature: float = Field(1.0, ge=0.0, le=5.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    seed: int | None = None


class BeginEpisodeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task_id: str = Field(..., min_length=1, max_length=512, description="Episodes of one task form a group.")
    client_id: str = Field("default", min_length=1, max_length=128)
    is_eval: bool = Field(False, description="Eval episodes are served and tracked but never enter training.")
    metadata: dict[str, Any] = Field(default_factory=dict)
    index: int | None = Field(
        None,
        ge=0,
        le=2**31 - 1,
        description="This episode's number among the client's episodes of the same task (0..N-1 for a GRPO "
        "group). With the run seed and the task id it seeds the episode's sampling, so the same episode samples "
        "the same replies in every run whatever the arrival order; without it sampling is seeded per call.",
    )


class BeginEpisodeResponse(BaseModel):
    episode_id: str
    base_url: str
    api_key: str
    model: str


class EndEpisodeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reward: float = Field(..., allow_inf_nan=False)
    metadata: dict[str, Any] = Field(default_factory=dict)


class EndEpisodeResponse(BaseModel):
    episode_id: str
    accepted: bool = Field(..., description="True when the episode entered the training pool (durably, with a run dir).")
    reason: str = ""


GROUP_ID_PATTERN = r"^[A-Za-z0-9._:-]{8,128}$"


class PrepareEpisodeRequest(BaseModel):
    """Phase one of an episode group's commit: the reward, and the group the episode waits in."""

    model_config = ConfigDict(extra="forbid")

    group_id: str = Field(
        ..., pattern=GROUP_ID_PATTERN, description="Chosen by the client, unguessable, the same on every server."
    )
    reward: float = Field(..., allow_inf_nan=False)
    metadata: dict[str, Any] = Field(default_factory=dict)


class PrepareEpisodeResponse(BaseModel):
    episode_id: str
    group_id: str
    prepared: bool = True


class GroupMember(BaseModel):
    episode_id: str
    accepted: bool = Field(..., description="True when the episode entered the pool at commit.")
    reason: str = ""


class GroupResponse(BaseModel):
    group_id: str
    state: Literal["unknown", "prepared", "committed", "aborted"]
    members: list[GroupMember] = Field(default_factory=list, description="Filled once committed.")


class ExchangeBatch(BaseModel):
    """Samples of a collaboration group in tokenizer-neutral form (engine.training.exchange)."""

    model_config = ConfigDict(extra="forbid")

    agent: str | None = Field(None, description="The exporting server's agent (in exports).")
    samples: list[SharedSample] = Field(default_factory=list, max_length=65536)


class ClientSignal(BaseModel):
    model_config = ConfigDict(extra="forbid")

    client_id: str = Field(..., min_length=1, max_length=128)


class StatusResponse(BaseModel):
    state: Literal["OFFLINE", "BOOTING", "ROLLING", "ROLLING_POST", "WEIGHT_SYNCING"]
    model: str | None
    global_step: int
    episodes_live: int
    episodes_live_eval: int
    episode_counts: dict[str, int]
    pool: dict[str, Any]
    clients: dict[str, dict[str, Any]]
    last_metrics: dict[str, float] | None
    groups_in_doubt: list[str] = Field(default_factory=list, description="Prepared groups awaiting commit/abort.")
    history: dict[str, int] = Field(
        default_factory=dict,
        description="Re-sent assistant turns since start: replaced (fed as the sampled ids), identical "
        "(already equal), closed (cut by max_tokens: the sampled ids, then the template's end of turn), "
        "fallback (no sampled reply with that text: the template's ids).",
    )
    error: str | None
    config: dict[str, Any] | None
