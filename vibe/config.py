"""`vibe.yaml`: the typed job config of a client folder (one per folder, frozen, validated on load)."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from engine.config import SwarmConfig
from engine.rewards.judge_config import JudgeConfig
from vibe.exceptions import LayoutError
from vibe.reward_probes import ProbeLimits


class CheckConfig(BaseModel):
    """How big `vibe check` makes its probes and its dry run (small: it runs on the tiny model)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tasks: int = Field(2, ge=1, description="N: tasks in the dry run (also the batch size of its training step).")
    episodes: int = Field(2, ge=2, description="K: episodes per task in the dry run (a group needs at least 2).")
    timeout_s: float = Field(120.0, gt=0, description="Wall-clock limit of each sandboxed subprocess.")
    memory_mb: int = Field(
        8192, ge=256, description="Address-space limit of each sandboxed subprocess (torch alone maps ~2 GB)."
    )


class VibeJob(BaseModel):
    """A vibe client's job: the swarm server config plus what the client side does."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, description="Short name; tmux sessions and run folders are named after it.")
    description: str = Field("", description="The task in one paragraph (the prompt it was made from).")
    swarm: SwarmConfig = Field(
        SwarmConfig.model_validate({"model": {"name": "smollm2-135m"}}),
        description="Server config for `vibe train` (the check always uses the tiny model).",
    )
    temperature: float = Field(1.0, ge=0, description="Sampling temperature of training episodes.")
    max_tokens: int = Field(48, ge=1, description="Reply budget per LLM call.")
    concurrency: int = Field(8, ge=1, description="Episodes in flight at once.")
    episode_timeout_s: float = Field(
        300.0, gt=0, description="Wall-clock limit of one play of a task (`vibe train`; the dry run uses at most "
        "three quarters of check.timeout_s): a play past it is given up and named."
    )
    reward_min: float = Field(0.0, description="Lowest reward an episode can get (sum of components).")
    reward_max: float = Field(1.0, description="Highest reward an episode can get.")
    gold_min: float = Field(
        0.9, description="The reference response (`gold`) of every probed task must score at least this."
    )
    anti_gold_max: float = Field(
        0.2, description="Empty, garbage, prompt-echo and decoy responses must score at most this."
    )
    flat_steps: int = Field(
        3, ge=1, description="`vibe train` flags training whose every group had equal rewards this many steps running."
    )
    second_server_roles: list[str] = Field(
        default_factory=list,
        description="Roles (client.py ROLES) whose episodes go to a second server with the same swarm config: "
        "adversarial training, each side its own model. Empty: every role shares the first server's model.",
    )
    judge: JudgeConfig | None = Field(
        None,
        description="An LLM judge for reward.py (vibe.judge_client.grade): its endpoint (base_url or swarm_url), "
        "model, rubric and fallback. Its key stays in the environment variable the config names, read on the "
        "trusted side only; sandboxed client code reaches the judge through vibe.judge_link, never the key.",
    )
    check: CheckConfig = CheckConfig()

    @model_validator(mode="after")
    def _ranges(self) -> VibeJob:
        if self.reward_max <= self.reward_min:
            raise ValueError(f"reward_max ({self.reward_max}) must exceed reward_min ({self.reward_min})")
        if not (self.reward_min <= self.anti_gold_max < self.gold_min <= self.reward_max):
            raise ValueError(
                "need reward_min <= anti_gold_max < gold_min <= reward_max so the probes can tell good "
                f"responses from bad (got {self.reward_min}, {self.anti_gold_max}, {self.gold_min}, {self.reward_max})"
            )
        return self

    def probe_limits(self) -> ProbeLimits:
        return ProbeLimits(reward_min=self.reward_min, reward_max=self.reward_max, gold_min=self.gold_min,
                           anti_gold_max=self.anti_gold_max)

    @property
    def sampling(self) -> dict[str, float | int]:
        return {"temperature": self.temperature, "max_tokens": self.max_tokens}

    @classmethod
    def load(cls, path: str | Path) -> VibeJob:
        """Read and validate a vibe.yaml; any problem becomes a LayoutError naming the file."""
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
            return cls.model_validate(data)
        except (OSError, yaml.YAMLError, ValidationError, ValueError) as e:
            raise LayoutError(f"{path}: {e}") from e

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json", exclude_defaults=False), sort_keys=False)
