"""benchmarks/client_imports.py runs end to end (one repeat against a worktree of HEAD), so the script the lead
reruns for the client's import time cannot rot unnoticed. Checks structure, never speed."""

from __future__ import annotations

import json

from tests_support import load_benchmark

ci = load_benchmark("client_imports")


def test_smoke_times_every_entry_in_both_trees(tmp_path):
    out = tmp_path / "client_imports"
    result = ci.main(["--old", "HEAD", "--repeats", "1", "--out", str(out)])
    assert json.loads(out.with_suffix(".json").read_text())["old"] == "HEAD"
    assert all(entry in out.with_suffix(".md").read_text() for entry in ci.ENTRIES)
    assert set(result["seconds"]) == set(ci.ENTRIES)
    for entry, trees in result["seconds"].items():
        assert len(trees["old"]) == len(trees["new"]) == 1, entry
        assert trees["old"][0] > 0 and trees["new"][0] > 0, entry
        assert result["new_over_old"][entry]["n"] == 1
