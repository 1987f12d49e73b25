"""The experiment blueprint: what one stage of a campaign asks the execution plane to run.

A blueprint is frozen, validated at construction with messages that say what to fix, and has a stable
content hash (sha256 of sorted-key canonical JSON), so identical blueprints hash identically and adding
the same blueprint twice to a stage is a no-op. Each seed becomes one run.

`engine_config` is the engine's typed config (`engine.config.SwarmConfig`) serialised as plain data; the
job receives it as `config.yaml`. A3R deliberately does not import or validate the engine config here:
the execution plane runs any launch command, and the engine validates its own config when it starts.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from a3r.exceptions import BlueprintError

__all__ = ["DEFAULT_LAUNCH_COMMAND", "Blueprint", "Budget", "canonical_json"]

DEFAULT_LAUNCH_COMMAND = 'swarm train --config config.yaml --run-dir "$A3R_RUN_DIR"'
_METRIC_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_./:-]*$")


def canonical_json(data: Any) -> str:
    """Sorted-key, whitespace-free JSON; NaN/inf rejected because they have no canonical form."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


class Budget(BaseModel):
    """Resources one run may use. The job reads `steps` from its config; the worker enforces wall time."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    steps: int = Field(gt=0, description="Training steps the job should run (passed as A3R_BUDGET_STEPS).")
    wall_time_s: float = Field(
        gt=0, description="Hard wall-clock limit per attempt; the worker kills the job and records timed_out."
    )


class Blueprint(BaseModel):
    """One experiment design. Every field is part of the content hash."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    purpose: str = Field(min_length=1, description="Why this experiment exists (one or two sentences).")
    hypothesis: str = Field(min_length=1, description="What we expect and what would refute it.")
    engine_config: dict[str, Any] = Field(
        default_factory=dict, description="Engine config as data; written to config.yaml. Treat as read-only."
    )
    task: str = Field(min_length=1, description="The training task (e.g. a built-in engine task name).")
    seeds: list[int] = Field(min_length=1, description="One run per seed, in this order.")
    budget: Budget
    metrics: list[str] = Field(min_length=1, description="Metric names the job logs; the first is primary.")
    success_criteria: str = Field(min_length=1, description="How the caller decides the hypothesis held.")
    launch_command: str = Field(
        DEFAULT_LAUNCH_COMMAND, min_length=1, description="Shell command run in the run dir by run.sh."
    )
    name: str = Field("", description="Optional short label for tables; defaults to '<task>-<hash8>'.")
    seed_path: str | None = Field(
        None,
        description="Optional dotted key in engine_config (e.g. 'model.seed') set to each run's seed in "
        "config.yaml. The seed is always exported as A3R_SEED.",
    )

    @field_validator("seeds")
    @classmethod
    def _unique_seeds(cls, seeds: list[int]) -> list[int]:
        dupes = sorted({s for s in seeds if seeds.count(s) > 1})
        if dupes:
            raise ValueError(f"seeds must be unique (one run per seed); repeated: {dupes}")
        return seeds

    @field_validator("metrics")
    @classmethod
    def _valid_metrics(cls, metrics: list[str]) -> list[str]:
        for m in metrics:
            if not _METRIC_NAME.match(m) or m == "step":
                raise ValueError(
                    f"metric name {m!r} is invalid: use letters, digits, _ . / : - (not starting with a digit), "
                    "and not 'step', which is the x axis of every metric line"
                )
        if len(set(metrics)) != len(metrics):
            raise ValueError(f"metric names must be unique, got {metrics}")
        return metrics

    @field_validator("engine_config")
    @classmethod
    def _plain_data(cls, cfg: dict[str, Any]) -> dict[str, Any]:
        try:
            canonical_json(cfg)
        except (TypeError, ValueError) as e:
            raise ValueError(f"engine_config must be plain JSON data without NaN/inf: {e}") from None
        return cfg

    @model_validator(mode="after")
    def _seed_path_exists(self) -> Blueprint:
        if self.seed_path is not None:
            node: Any = self.engine_config
            for part in self.seed_path.split("."):
                if not isinstance(node, dict) or part not in node:
                    raise ValueError(
                        f"seed_path {self.seed_path!r} is not a key of engine_config; set it to an existing "
                        "dotted key (e.g. 'model.seed') or leave it unset and read A3R_SEED"
                    )
                node = node[part]
        return self

    # -- identity -----------------------------------------------------------------------------------------
    @property
    def primary_metric(self) -> str:
        return self.metrics[0]

    def content_hash(self) -> str:
        """sha256 hex of the canonical JSON of every field; equal blueprints give equal hashes."""
        return hashlib.sha256(canonical_json(self.model_dump(mode="json")).encode()).hexdigest()

    @property
    def label(self) -> str:
        return self.name or f"{self.task}-{self.content_hash()[:8]}"

    # -- (de)serialisation --------------------------------------------------------------------------------
    @classmethod
    def parse(cls, data: Any, *, source: str = "blueprint") -> Blueprint:
        """Validate plain data, turning pydantic's errors into one `BlueprintError` listing every problem."""
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}" for err in e.errors()
            )
            raise BlueprintError(f"{source} is invalid: {problems}") from None

    @classmethod
    def from_yaml(cls, path: str | Path) -> Blueprint:
        """Read one blueprint from a YAML (or JSON) file."""
        try:
            data = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as e:
            raise BlueprintError(f"cannot read blueprint {path}: {e}") from e
        return cls.parse(data, source=str(path))

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)

    def effective_config(self, seed: int, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        """engine_config deep-merged with rule-fix/caller overrides, with `seed_path` set to `seed`."""
        cfg = deep_merge(self.engine_config, overrides or {})
        if self.seed_path:
            node = cfg
            *parents, leaf = self.seed_path.split(".")
            for part in parents:
                node = node[part]
            node[leaf] = seed
        return cfg


def deep_merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """A new dict: `base` with `overrides` applied recursively (dicts merge, everything else replaces)."""
    out = json.loads(json.dumps(base))  # deep copy that also guarantees plain data
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out
