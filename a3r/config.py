"""Typed workspace configuration: the host inventory and the scheduler's timing and retry policy.

One file per workspace, `<workspace>/a3r.yaml`:

    hosts:                       # optional; default: one local host with 1 slot (a3r research, demo and
                                 # plan create one 1-thread slot per core instead: `local_host`)
      - {name: local, kind: local, slots: 4}
      - name: gpu-a
        kind: ssh
        address: researcher@10.0.0.7
        port: 22
        identity_file: ~/.ssh/id_ed25519
        python: /opt/a3r/.venv/bin/python      # a3r must be installed there
        workdir: /scratch/a3r                  # run dirs live here on the host
        slots: [{name: gpu0, gpus: "0"}, {name: gpu1, gpus: "1"}]
      # two CPU runs side by side on a 2-core host, one thread each (not two each: four threads on two
      # cores make every parallel op wait for a descheduled thread)
      # - {name: local, kind: local, slots: [{name: "0", threads: 1}, {name: "1", threads: 1}]}
    scheduler:
      heartbeat_s: 10

Inventory and scheduler settings are validated at load with messages that say what to change.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from a3r.exceptions import ConfigError

__all__ = [
    "CONFIG_FILE",
    "HostSpec",
    "SchedulerConfig",
    "SlotSpec",
    "WorkspaceConfig",
    "host_cores",
    "host_has_gpu",
    "local_host",
]

CONFIG_FILE = "a3r.yaml"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SlotSpec(_Frozen):
    """One place a run can execute; one run per slot at a time."""

    name: str = Field(description="Slot name, unique on its host (e.g. 'gpu0').")
    gpus: str | None = Field(
        None, description="CUDA_VISIBLE_DEVICES for runs in this slot (e.g. '0' or '0,1')."
    )
    threads: int | None = Field(
        None,
        ge=1,
        description="CPU threads for runs in this slot (OMP_NUM_THREADS and MKL_NUM_THREADS, which torch's "
        "intra-op pool follows); default: the libraries' own, all cores. Slots sharing a CPU host should "
        "split its cores between them.",
    )

    def job_env(self) -> dict[str, str]:
        """The environment a run in this slot gets on top of the worker's."""
        env = {"CUDA_VISIBLE_DEVICES": self.gpus} if self.gpus is not None else {}
        if self.threads is not None:
            env.update(OMP_NUM_THREADS=str(self.threads), MKL_NUM_THREADS=str(self.threads))
        return env

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"slot name {v!r} must be letters, digits, _ . - (no spaces)")
        return v


def _slots(v: object) -> object:
    """`slots: 4` means four anonymous slots named 0..3; a list gives named (GPU) slots."""
    if isinstance(v, int) and not isinstance(v, bool):
        if v < 1:
            raise ValueError(f"slots must be >= 1, got {v}")
        return [{"name": str(i)} for i in range(v)]
    if isinstance(v, list):
        return [{"name": s} if isinstance(s, str) else s for s in v]
    return v


class HostSpec(_Frozen):
    """One inventory host: the local machine (libtmux) or an ssh host (tmux run remotely)."""

    name: str = Field(description="Unique host name used in tables, attempts and CLI output.")
    kind: Literal["local", "ssh"] = "local"
    slots: list[SlotSpec] = Field(default_factory=lambda: [SlotSpec(name="0")])
    address: str | None = Field(None, description="ssh: [user@]host.")
    port: int = Field(22, ge=1, le=65535, description="ssh: port.")
    identity_file: str | None = Field(None, description="ssh: private key file (BatchMode: no passwords).")
    known_hosts_file: str | None = Field(
        None, description="ssh: known_hosts to use; default ~/.ssh/known_hosts. New keys are accepted once."
    )
    python: str | None = Field(None, description="Python with a3r installed on the host; default: this one.")
    workdir: str | None = Field(None, description="ssh: absolute directory for run dirs on the host.")
    connect_timeout_s: float = Field(5.0, gt=0, description="ssh: give up connecting after this long.")

    _normalise_slots = field_validator("slots", mode="before")(classmethod(lambda cls, v: _slots(v)))

    @field_validator("address")
    @classmethod
    def _address(cls, v: str | None) -> str | None:
        # The address becomes an ssh argument: "-oProxyCommand=..." would be read as an option and run
        # a local command, so an address may not start with '-' (nor hold whitespace, never a host).
        if v is not None and (v.startswith("-") or any(c.isspace() for c in v)):
            raise ValueError(
                f"address {v!r} must be [user@]host: no leading '-' (ssh would read it as an option) "
                "and no whitespace"
            )
        return v

    @model_validator(mode="after")
    def _check(self) -> HostSpec:
        if not _NAME.match(self.name):
            raise ValueError(f"host name {self.name!r} must be letters, digits, _ . - (no spaces)")
        names = [s.name for s in self.slots]
        if len(set(names)) != len(names) or not names:
            raise ValueError(f"host {self.name}: slot names must be unique and non-empty, got {names}")
        if self.kind == "ssh":
            if not self.address:
                raise ValueError(f"ssh host {self.name} needs `address: [user@]host`")
            if not self.workdir or not self.workdir.startswith("/"):
                raise ValueError(f"ssh host {self.name} needs an absolute `workdir` for its run dirs")
        return self


class SchedulerConfig(_Frozen):
    """Timing and retry policy of the scheduler/monitor. Detection happens within ~2 heartbeats."""

    heartbeat_s: float = Field(
        10.0, gt=0, description="How often workers heartbeat. Lower detects faster, writes more."
    )
    stale_after_s: float | None = Field(
        None, gt=0, description="Heartbeat silence that marks an attempt stale; default 2 x heartbeat_s."
    )
    tick_s: float | None = Field(None, gt=0, description="Monitor loop period; default heartbeat_s / 4.")
    start_grace_s: float = Field(
        30.0,
        gt=0,
        description="How long a dispatched attempt may take to start its worker before it is stale.",
    )
    max_infra_retries: int = Field(
        3, ge=0, description="Retries of infrastructure failures per run (from checkpoint)."
    )
    max_fix_retries: int = Field(2, ge=0, description="Retries with a rule fix (OOM, NaN) per run.")
    backoff_base_s: float = Field(
        5.0, ge=0, description="First retry delay; doubles per infrastructure retry."
    )
    backoff_max_s: float = Field(300.0, ge=0, description="Cap on the retry delay.")
    kill_grace_s: float = Field(
        5.0, ge=0, description="SIGTERM -> SIGKILL delay when the worker stops a job."
    )
    log_tail_lines: int = Field(
        40, ge=1, description="Log lines kept with a failed attempt (classification, caller)."
    )
    session_linger_s: float = Field(
        60.0,
        ge=0,
        description="Keep a finished attempt's tmux session this long for `a3r attach`, then reap it.",
    )
    lease_ttl_s: float | None = Field(
        None, gt=0, description="Monitor lease expiry; default 3 x heartbeat_s."
    )

    @property
    def stale_after(self) -> float:
        return self.stale_after_s or 2 * self.heartbeat_s

    @property
    def tick(self) -> float:
        return self.tick_s or self.heartbeat_s / 4

    @property
    def lease_ttl(self) -> float:
        return self.lease_ttl_s or max(3 * self.heartbeat_s, 3 * self.tick)

    @model_validator(mode="after")
    def _check(self) -> SchedulerConfig:
        if self.stale_after <= self.heartbeat_s:
            raise ValueError(
                f"stale_after_s ({self.stale_after}) must exceed heartbeat_s ({self.heartbeat_s}), or every "
                "attempt would look stale between two heartbeats"
            )
        return self


def host_cores() -> int:
    """CPU cores this process may run on (its affinity mask: a container's cpuset, not the machine's)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no sched_getaffinity (macOS)
        return max(1, os.cpu_count() or 1)


def host_has_gpu(dev: Path = Path("/dev")) -> bool:
    """Whether this machine has an NVIDIA (or ROCm) GPU device node, without importing torch."""
    return (dev / "kfd").exists() or any(dev.glob("nvidia[0-9]*"))


# Memory one CPU slot's run may take: a SmolLM2-135M training server holds fp32 weights, gradients and
# AdamW state (about 2.2 GB) plus activations and the evaluation's KV. Default slots never exceed the
# host's memory at this much per slot, so a many-core host with little memory does not start runs it
# cannot hold.
SLOT_MEMORY_GIB = 4.0


def host_memory_gib() -> float:
    """Physical memory of this machine in GiB (a container's limit is not read: a conservative cap)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (AttributeError, ValueError, OSError):
        return float("inf")


def local_host(
    slots: int | None = None, *, cores: int | None = None, gpu: bool | None = None, memory_gib: float | None = None
) -> HostSpec:
    """The local host a new campaign workspace gets (`a3r research`, `a3r demo`, `a3r plan`).

    By default (`slots` None) a CPU host gets one slot of 1 thread per core: on the 2-core container two
    concurrent 1-thread runs did 1.27x (1.17-1.28) the runs per hour of one 2-thread run at the default run
    shape (24.86 against 21.16 runs/h, docs/benchmarks/run_cost.md, "Latest"). A GPU host keeps one slot
    (its runs are on the GPU; CPU slots would only queue on it). `slots` = N overrides: N slots sharing the
    cores (max(1, cores // N) threads each, so N slots never oversubscribe them). The default is capped at
    one slot per `SLOT_MEMORY_GIB` of memory; only the 2-core container was measured, so on a many-core
    host the default is a reasonable start, not a measured optimum."""
    cores = host_cores() if cores is None else cores
    if slots is None:
        if host_has_gpu() if gpu is None else gpu:
            return HostSpec(name="local")
        memory = host_memory_gib() if memory_gib is None else memory_gib
        slots = max(1, min(cores, int(memory // SLOT_MEMORY_GIB)))
        threads = max(1, cores // slots)
    else:
        threads = max(1, cores // slots)
    return HostSpec(name="local", slots=[SlotSpec(name=str(i), threads=threads) for i in range(slots)])


class WorkspaceConfig(_Frozen):
    """Everything in `a3r.yaml`."""

    hosts: Annotated[list[HostSpec], Field(min_length=1)] = Field(
        default_factory=lambda: [HostSpec(name="local")]
    )
    scheduler: SchedulerConfig = SchedulerConfig()
    tmux_socket: str | None = Field(
        None, description="tmux socket name for this campaign; default 'a3r-' + a hash of the workspace path."
    )

    @model_validator(mode="after")
    def _unique_hosts(self) -> WorkspaceConfig:
        names = [h.name for h in self.hosts]
        if len(set(names)) != len(names):
            raise ValueError(f"host names must be unique, got {names}")
        return self

    @classmethod
    def load(cls, path: str | Path) -> WorkspaceConfig:
        """Read `a3r.yaml` (a missing file gives the defaults: one local host, one slot)."""
        path = Path(path)
        if not path.exists():
            return cls()
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"cannot read {path}: {e}") from e
        return cls.parse(data, source=str(path))

    @classmethod
    def parse(cls, data: object, *, source: str = "a3r.yaml") -> WorkspaceConfig:
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}" for err in e.errors()
            )
            raise ConfigError(f"{source} is invalid: {problems}") from None

    def save(self, path: str | Path) -> None:
        Path(path).write_text(
            yaml.safe_dump(self.model_dump(mode="json", exclude_defaults=True), sort_keys=False)
        )

    @property
    def slots(self) -> int:
        """Slots across every host: how many runs go at once."""
        return sum(len(h.slots) for h in self.hosts)

    @property
    def slot_threads(self) -> int | None:
        """The thread count every slot sets, or None when they differ or one sets none (the cost model
        then prices a run as owning its host)."""
        threads = {s.threads for h in self.hosts for s in h.slots}
        return threads.pop() if len(threads) == 1 else None

    def host(self, name: str) -> HostSpec:
        for h in self.hosts:
            if h.name == name:
                return h
        raise ConfigError(f"no host {name!r} in the inventory; known: {[h.name for h in self.hosts]}")
