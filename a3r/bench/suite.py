"""The benchmark suite file: which training jobs to run per commit and which numbers they yield.

A suite (YAML, validated by pydantic with messages that name the field) lists benchmarks. A benchmark is
either a `train` job (a built-in task trained by `swarm train` for a few steps: task, model, config,
steps, seeds) or a `throughput` probe (a swarm server answering concurrent chat calls). Each benchmark
names the metrics it yields; a metric has a kind (how it is computed from the run's logged series, see
`a3r.bench.metrics`), a unit, a direction (higher or lower is better) and a minimum effect: a change
smaller than that is never called a regression, however significant.

    name: default
    alpha: 0.05
    benchmarks:
      - name: arithmetic
        kind: train
        task: arithmetic
        model: smollm2-135m
        steps: 4
        seeds: [0, 1, 2]
        config: {eval_size: 32, swarm: {pool: {batch_size: 4, group_size: 4}}}
        metrics:
          - {kind: final_reward, k: 2, min_effect: 0.15}
          - {kind: seconds_per_step, min_effect: 0.3, relative: true}

What this module does not do: run anything, or know how a commit's engine parses `config` (a train
job's `config` is checked against this checkout's `engine.jobs.TrainJob`, the best early warning of a
typo; an old commit may still reject it, which shows up as a failed run).
"""

from __future__ import annotations

import hashlib
import json
import re
from enum import Enum
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from a3r.exceptions import ConfigError

__all__ = [
    "DEFAULT_SUITE",
    "Benchmark",
    "BenchKind",
    "Direction",
    "MetricKind",
    "MetricSpec",
    "ProbeConfig",
    "StatTest",
    "Suite",
    "load_suite",
]

SUITES_DIR = Path(__file__).with_name("suites")
DEFAULT_SUITE = SUITES_DIR / "default.yaml"
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")


class BenchKind(str, Enum):
    """What a benchmark runs."""

    TRAIN = "train"  # `swarm train` of a built-in task for `steps` steps
    THROUGHPUT = "throughput"  # a swarm server answering concurrent eval episodes (no training)


class Direction(str, Enum):
    """Which way is better for a metric."""

    HIGHER = "higher"
    LOWER = "lower"


class StatTest(str, Enum):
    """The significance test over seeds (the minimum effect is required on top of it)."""

    WELCH = "welch"  # Welch t interval of the difference excludes 0 on the worse side
    MANN_WHITNEY = "mann_whitney"  # one-sided Mann-Whitney U p-value <= alpha


class MetricKind(str, Enum):
    """How a number is computed from one run (formulas in `a3r.bench.metrics`)."""

    FINAL_REWARD = "final_reward"  # mean training reward of the last k steps
    REWARD_AUC = "reward_auc"  # mean training reward over all steps (area under the curve / steps)
    HELDOUT_ACCURACY = "heldout_accuracy"  # greedy accuracy on the held-out set after training
    SECONDS_PER_STEP = "seconds_per_step"  # median wall seconds between consecutive training steps
    TRAINED_TOKENS_PER_SECOND = "trained_tokens_per_second"  # tokens trained per wall second of a step
    PEAK_MEMORY_MB = "peak_memory_mb"  # peak resident memory of the job's largest process
    CALLS_PER_SECOND = "calls_per_second"  # throughput probe: chat calls answered per second
    GENERATED_TOKENS_PER_SECOND = "generated_tokens_per_second"  # throughput probe: completion tokens/s
    LATENCY_P50_MS = "latency_p50_ms"  # throughput probe: median chat-call latency


# kind -> (unit, direction, kinds of benchmark that can yield it)
_KIND_INFO: dict[MetricKind, tuple[str, Direction, frozenset[BenchKind]]] = {
    MetricKind.FINAL_REWARD: ("reward", Direction.HIGHER, frozenset({BenchKind.TRAIN})),
    MetricKind.REWARD_AUC: ("reward", Direction.HIGHER, frozenset({BenchKind.TRAIN})),
    MetricKind.HELDOUT_ACCURACY: ("accuracy", Direction.HIGHER, frozenset({BenchKind.TRAIN})),
    MetricKind.SECONDS_PER_STEP: ("s", Direction.LOWER, frozenset({BenchKind.TRAIN})),
    MetricKind.TRAINED_TOKENS_PER_SECOND: ("tok/s", Direction.HIGHER, frozenset({BenchKind.TRAIN})),
    MetricKind.PEAK_MEMORY_MB: ("MB", Direction.LOWER, frozenset(BenchKind)),
    MetricKind.CALLS_PER_SECOND: ("calls/s", Direction.HIGHER, frozenset({BenchKind.THROUGHPUT})),
    MetricKind.GENERATED_TOKENS_PER_SECOND: ("tok/s", Direction.HIGHER, frozenset({BenchKind.THROUGHPUT})),
    MetricKind.LATENCY_P50_MS: ("ms", Direction.LOWER, frozenset({BenchKind.THROUGHPUT})),
}


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MetricSpec(_Frozen):
    """One number a benchmark yields per run, and what change of it matters."""

    kind: MetricKind = Field(description="How the number is computed from the run (see MetricKind).")
    name: str = Field("", description="Column name; defaults to the kind.")
    unit: str = Field("", description="Unit for tables; defaults to the kind's unit.")
    direction: Direction | None = Field(None, description="Which way is better; defaults to the kind's.")
    min_effect: float = Field(
        gt=0,
        description="Smallest change that matters, in the metric's unit (or as a fraction of the baseline "
        "mean when `relative`). Changes below it are never regressions: seeds can make tiny changes "
        "significant, and a 1% slower step is not worth a page.",
    )
    relative: bool = Field(False, description="min_effect is a fraction of the baseline mean (timings).")
    k: int = Field(3, ge=1, description="final_reward: how many last steps are averaged (smoothing).")
    resolution: float = Field(
        0.0,
        ge=0,
        description="Known measurement granularity used as a floor on each side's sd (e.g. 1/m for an "
        "accuracy on m items), so identical seeds do not claim infinite precision.",
    )

    @model_validator(mode="after")
    def _defaults(self) -> MetricSpec:
        unit, direction, _ = _KIND_INFO[self.kind]
        object.__setattr__(self, "name", self.name or self.kind.value)
        object.__setattr__(self, "unit", self.unit or unit)
        object.__setattr__(self, "direction", self.direction or direction)
        if not _NAME.match(self.name):
            raise ValueError(
                f"metric name {self.name!r}: use letters, digits, _ and -, starting with a letter"
            )
        return self


class ProbeConfig(_Frozen):
    """A throughput probe: E concurrent eval episodes of `calls` chat calls each (no training)."""

    episodes: int = Field(
        16, ge=1, le=512, description="Episodes in flight at once (the server batches them)."
    )
    calls: int = Field(4, ge=1, le=64, description="Sequential chat calls per episode.")
    max_tokens: int = Field(8, ge=1, le=1024, description="Completion budget per call.")
    warmup_calls: int = Field(
        2, ge=0, description="Calls made and discarded before timing (first-call costs)."
    )


class Benchmark(_Frozen):
    """One training job (or throughput probe) run per seed on every commit."""

    name: str = Field(description="Unique within the suite; used in tables, run names and file names.")
    kind: BenchKind = BenchKind.TRAIN
    task: str = Field(
        "arithmetic", description="train: a built-in engine task (arithmetic, countdown, calculator)."
    )
    model: str = Field("tiny", description="Model name as the engine takes it (tiny, smollm2-135m, a path).")
    steps: int = Field(2, ge=1, description="train: optimizer steps (swarm.training.max_steps).")
    seeds: list[int] = Field(
        [0, 1, 2], min_length=1, description="One run per seed; at least 2 for any test."
    )
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="train: further TrainJob fields (eval_size, max_tokens, swarm: {...}); task, model, "
        "steps and seed come from the fields above.",
    )
    probe: ProbeConfig = ProbeConfig()
    wall_time_s: float = Field(600.0, gt=0, description="Hard limit per attempt (the worker kills the job).")
    metrics: list[MetricSpec] = Field(min_length=1)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"benchmark name {v!r}: use letters, digits, _ and -, starting with a letter")
        return v

    @field_validator("seeds")
    @classmethod
    def _unique(cls, seeds: list[int]) -> list[int]:
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds must be unique, got {seeds}")
        return seeds

    @model_validator(mode="after")
    def _check(self) -> Benchmark:
        names = [m.name for m in self.metrics]
        if len(set(names)) != len(names):
            raise ValueError(f"metric names must be unique within a benchmark, got {names}")
        for m in self.metrics:
            allowed = _KIND_INFO[m.kind][2]
            if self.kind not in allowed:
                raise ValueError(
                    f"metric {m.name!r} ({m.kind.value}) cannot come from a {self.kind.value} benchmark; "
                    f"it needs one of: {', '.join(sorted(k.value for k in allowed))}"
                )
        if self.kind is BenchKind.TRAIN:
            reserved = {"task", "seed"} & set(self.config)
            if reserved:
                raise ValueError(f"config must not set {sorted(reserved)}: use the benchmark's own fields")
            _check_train_job(self.train_job(self.seeds[0]))
        return self

    def train_job(self, seed: int) -> dict[str, Any]:
        """The TrainJob data of one run: `config` with task, model, steps and seed filled in.

        Benchmarks never resume, so checkpoints are off: a retried attempt starts from scratch and only
        the attempt that succeeds is measured. Only fields every engine version has are set, so older
        commits can be measured too."""
        from a3r.blueprints.schema import deep_merge

        fixed = {
            "task": self.task,
            "seed": seed,
            "swarm": {
                "model": {"name": self.model, "seed": seed},
                "training": {"max_steps": self.steps, "checkpoint_every": 0},
            },
        }
        return deep_merge(self.config, fixed)


def _check_train_job(data: dict[str, Any]) -> None:
    try:
        from engine.jobs import TrainJob
    except ImportError:  # a3r without the engine installed: the job validates itself when it runs
        return
    try:
        TrainJob.model_validate(data)
    except (ValidationError, ValueError) as e:
        raise ValueError(f"config is not a valid engine TrainJob: {e}") from None


class Suite(_Frozen):
    """A named list of benchmarks and the statistics used to compare commits."""

    name: str = Field(description="Suite name: results are grouped by it in the store.")
    description: str = ""
    alpha: float = Field(0.05, gt=0, lt=0.5, description="False-alarm rate of each test (per metric).")
    test: StatTest = Field(StatTest.WELCH, description="Significance test over seeds.")
    confirm_reruns: int = Field(
        1,
        ge=0,
        le=3,
        description="A suspected regression is rerun (fresh seeds) this many times; every rerun must agree.",
    )
    benchmarks: list[Benchmark] = Field(min_length=1)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"suite name {v!r}: use letters, digits, _ and -, starting with a letter")
        return v

    @model_validator(mode="after")
    def _unique(self) -> Suite:
        names = [b.name for b in self.benchmarks]
        if len(set(names)) != len(names):
            raise ValueError(f"benchmark names must be unique, got {names}")
        return self

    def benchmark(self, name: str) -> Benchmark:
        for b in self.benchmarks:
            if b.name == name:
                return b
        raise ConfigError(
            f"suite {self.name} has no benchmark {name!r}; it has {[b.name for b in self.benchmarks]}"
        )

    def metric(self, benchmark: str, metric: str) -> MetricSpec:
        for m in self.benchmark(benchmark).metrics:
            if m.name == metric:
                return m
        raise ConfigError(f"benchmark {benchmark} has no metric {metric!r}")

    def content_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()


def load_suite(path: str | Path | None = None) -> Suite:
    """Read and validate a suite file (the default suite when `path` is None); one ConfigError lists
    every problem with its location."""
    path = Path(path) if path is not None else DEFAULT_SUITE
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"cannot read suite {path}: {e}") from e
    try:
        return Suite.model_validate(data)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}" for err in e.errors()
        )
        raise ConfigError(f"suite {path} is invalid: {problems}") from None
