"""Fixtures for vibe tests: client folders made from the offline templates, edited per test."""

from __future__ import annotations

import pytest

from vibe.data_writer import write_data
from vibe.layout import ClientDir
from vibe.sandbox import sandbox_unavailable
from vibe.templates import Family, copy_template


def require_sandbox() -> None:
    """Skip, saying why, where client code cannot run: vibe runs it only in its bwrap sandbox."""
    why = sandbox_unavailable()
    if why:
        pytest.skip(f"needs the vibe sandbox: {why}")


@pytest.fixture
def sandboxed():
    """For tests that run client code without the fixtures below."""
    require_sandbox()


@pytest.fixture
def qa_client(tmp_path):
    """A fresh copy of the qa template with its data written; tests edit its files to break it."""
    require_sandbox()
    root = tmp_path / "client"
    copy_template(Family.QA, root)
    write_data(ClientDir.open(root))
    return root


@pytest.fixture
def spy_client():
    """Factory: spy_client(root, adversarial) -> the game template at `root`, its games made the smallest
    (3 players, 1 round: 6 short calls), the spies on a second server when `adversarial`."""

    def make(root, adversarial: bool):
        require_sandbox()
        copy_template(Family.GAME, root)
        # smaller games through make_data.py itself, so data/ stays what it generates (else data_stale)
        (root / "make_data.py").write_text((root / "make_data.py").read_text() + (
            "\n_generate = generate\n\n\ndef generate(seed):\n"
            "    small = {'players': 3, 'spies': 1, 'rounds': 1}\n"
            "    return {split: [t | small if split == 'train' else t for t in tasks]\n"
            "            for split, tasks in _generate(seed).items()}\n"))
        write_data(ClientDir.open(root))
        text = (root / "vibe.yaml").read_text().replace("max_tokens: 24", "max_tokens: 6")
        (root / "vibe.yaml").write_text(text + ("second_server_roles: [spy]\n" if adversarial else ""))
        return root

    return make
