"""Team settings of a training job and their one mapping to each agent's server config.

A team is two or more agents, each its own model on its own swarm server (non-shared parameters):
- `independent`: a multi-role task (e.g. solve_check) whose roles are the agents; every workflow run is an
  episode group committed on every server or none; each server trains on its own samples only.
- `hacpo`, `naive`, `gspo`, `gspox2`: every agent solves the same prompts of a single-agent task (a
  collaboration group, specs/hacpo.md). hacpo and naive exchange samples between servers; gspo samples G
  responses per prompt and agent, gspox2 2G, and neither exchanges (the spec's baselines, same loss path).
"""

from __future__ import annotations

import re
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from engine.algorithms.config import HacpoConfig
from engine.config import CollabMethod, ModelConfig, SwarmConfig
from engine.errors import ConfigError

_AGENT = re.compile(r"[a-z][a-z0-9_-]{0,31}")


class TeamMethod(str, Enum):
    INDEPENDENT = "independent"
    HACPO = "hacpo"
    NAIVE = "naive"
    GSPO = "gspo"
    GSPOX2 = "gspox2"

    @property
    def collab(self) -> CollabMethod | None:
        """The servers' collaboration method; None for independent (multi-role) teams."""
        return None if self is TeamMethod.INDEPENDENT else CollabMethod(self.value)


class SyncMode(str, Enum):
    LOCKSTEP = "lockstep"  # every server takes step t before any episode of step t+1 starts
    FREE = "free"  # servers step whenever their pools fire; the client never waits between steps


class AgentSpec(BaseModel):
    """What differs between the agents of a team; everything else comes from the job's `swarm`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: ModelConfig = Field(..., description="This agent's model (built-in name, HF dir or .gguf).")
    lr: float | None = Field(None, gt=0, description="This agent's learning rate (default: swarm.training.lr).")


class TeamConfig(BaseModel):
    """Several models training together (see the module docstring for the methods)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agents: dict[str, AgentSpec] = Field(..., description="Agent name -> its model; names are roles for independent teams.")
    method: TeamMethod = Field(TeamMethod.INDEPENDENT, description="independent, hacpo, naive, gspo or gspox2.")
    sync: SyncMode = Field(
        SyncMode.LOCKSTEP,
        description="lockstep: servers step together (needed by the exchange methods); free: each steps on its own.",
    )
    hacpo: HacpoConfig = Field(default_factory=HacpoConfig, description="HACPO coefficients and ablation flags.")

    @field_validator("agents")
    @classmethod
    def _names(cls, agents: dict[str, AgentSpec]) -> dict[str, AgentSpec]:
        if len(agents) < 2:
            raise ConfigError(f"a team needs at least two agents, got {list(agents)}; use a plain job for one model")
        bad = [n for n in agents if not _AGENT.fullmatch(n)]
        if bad:
            raise ConfigError(f"agent names {bad} must be lower-case words ([a-z][a-z0-9_-]*, at most 32 chars)")
        return agents

    @model_validator(mode="after")
    def _check(self) -> TeamConfig:
        if self.method is not TeamMethod.INDEPENDENT and self.sync is SyncMode.FREE:
            raise ConfigError(
                f"method {self.method.value!r} trains every learner on the same step's samples; set sync: lockstep"
            )
        return self

    @property
    def group_multiplier(self) -> int:
        """Responses per prompt and agent, in units of pool.group_size G: GSPOx2 samples 2G."""
        return 2 if self.method is TeamMethod.GSPOX2 else 1


def agent_config(swarm: SwarmConfig, team: TeamConfig, name: str, run_dir: str | None) -> SwarmConfig:
    """The one mapping from (job swarm config, team, agent) to that agent's server config."""
    spec = team.agents[name]
    data = swarm.model_dump(mode="json")
    data["model"] = spec.model.model_dump(mode="json")
    data["run_dir"] = run_dir
    if spec.lr is not None:
        data["training"]["lr"] = spec.lr
    collab = team.method.collab
    if collab is not None:
        data["collaboration"] = {"agent": name, "method": collab.value, "hacpo": team.hacpo.model_dump(mode="json", exclude_unset=True)}
        data["pool"]["policy"] = "any_client_agrees"  # the client triggers a step once its samples are in
        data["pool"]["group_size"] = swarm.pool.group_size * team.group_multiplier
    return SwarmConfig.model_validate(data)
