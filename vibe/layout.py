"""The client package layout contract: the one place that says what a vibe client folder contains.

A client folder (written by `vibe new`, or by hand) holds:

    vibe.yaml        the job config (`vibe.config.VibeJob`): the swarm server config plus what the client
                     side does (sampling, reward range, probe thresholds, check sizes)
    client.py        `run(llm, model, task, sampling) -> dict[str, float]`: play one episode through
                     `llm` (an `openai.OpenAI` client bound to the episode) and return the named reward
                     components; the episode's reward is their sum. A multi-agent client whose roles
                     share the model also sets `ROLES = ["role", ...]`: then `llm` is {role: client},
                     one episode per role, and `run` returns {role: {component: value}} (vibe.play)
    reward.py        `score(task, response) -> dict[str, float]`: the reward of one final response to a
                     task, by component (client.py calls it; the probes call it directly)
    make_data.py     `generate(seed) -> {"train": [task, ...], "test": [task, ...]}`: the mock dataset
                     generator; `python make_data.py` writes the two files below
    data/train.jsonl one task per line (JSON object)
    data/test.jsonl  held-out tasks, never trained on
    README.md        what the task is and how it is rewarded

A task is a JSON object with at least `id` (non-empty, unique across train and test), `prompt` (the text
the agent starts from) and `gold` (a reference final response that must score high). Optional `decoys`:
a list of responses that must score low (for games, another player's words). Any other fields are the
client's own.

`vibe check` writes its reports to `.vibe/` inside the folder; the repair loop keeps its rounds there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vibe.exceptions import LayoutError

__all__ = [
    "CLIENT_FILE",
    "CONFIG_FILE",
    "DATA_FILES",
    "GENERATOR_FILE",
    "README_FILE",
    "REQUIRED_FILES",
    "REQUIRED_FUNCTIONS",
    "REWARD_FILE",
    "TASK_FIELDS",
    "ClientDir",
]

CONFIG_FILE = "vibe.yaml"
CLIENT_FILE = "client.py"
REWARD_FILE = "reward.py"
GENERATOR_FILE = "make_data.py"
README_FILE = "README.md"
TRAIN_FILE = "data/train.jsonl"
TEST_FILE = "data/test.jsonl"
DATA_FILES = (TRAIN_FILE, TEST_FILE)
REQUIRED_FILES = (CONFIG_FILE, CLIENT_FILE, REWARD_FILE, GENERATOR_FILE, README_FILE, *DATA_FILES)
# module file -> (function name, its parameters in order)
REQUIRED_FUNCTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    CLIENT_FILE: ("run", ("llm", "model", "task", "sampling")),
    REWARD_FILE: ("score", ("task", "response")),
    GENERATOR_FILE: ("generate", ("seed",)),
}
TASK_FIELDS = ("id", "prompt", "gold")
STATE_DIR = ".vibe"


@dataclass(frozen=True)
class ClientDir:
    """A client folder on disk, with the paths the contract names."""

    root: Path

    @classmethod
    def open(cls, path: str | Path) -> ClientDir:
        root = Path(path).resolve()
        if not root.is_dir():
            raise LayoutError(f"{path} is not a directory; create a client with `vibe new \"<task>\" --out {path}`")
        return cls(root)

    def path(self, name: str) -> Path:
        return self.root / name

    def missing(self) -> list[str]:
        """Required files that are absent."""
        return [f for f in REQUIRED_FILES if not (self.root / f).is_file()]

    @property
    def state_dir(self) -> Path:
        d = self.root / STATE_DIR
        d.mkdir(exist_ok=True)
        return d

    def source_files(self) -> dict[str, str]:
        """Every text file of the client (what an LLM writes and a repair round may change), by relative path."""
        out = {}
        for p in sorted(self.root.rglob("*")):
            rel = p.relative_to(self.root).as_posix()
            if p.is_file() and not rel.startswith((STATE_DIR + "/", "__pycache__/")) and "/__pycache__/" not in rel:
                try:
                    out[rel] = p.read_text()
                except UnicodeDecodeError:
                    continue
        return out
