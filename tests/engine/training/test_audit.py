"""The training-history audit (issue 26): a clean history passes; each planted defect is caught by name."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tests_support import swarm_train, tiny_train_job

from engine.training.audit import audit_history, audit_run_dir

G = 2  # group size


def _add(seq: int, step: int, pos: int) -> dict:
    return {"op": "add", "episode": {"seq": seq, "episode_id": f"e{seq}", "task_id": f"s{step}:{pos}:item{step}{pos}"}}


def _clean(steps: int = 3) -> tuple[list[dict], list[dict]]:
    """`steps` steps of 1 task x G episodes, each batch marked trained once; metrics 1..steps, two evals."""
    journal, metrics, seq = [], [{"step": 0, "eval_accuracy": 0.1, "eval_items": 8}], 0
    for s in range(steps):
        batch = []
        for _ in range(G):
            journal.append(_add(seq, s, 0))
            batch.append(seq)
            seq += 1
        journal.append({"op": "trained", "seqs": batch})
        metrics.append({"step": float(s + 1), "pg_loss": 0.5})
    metrics.append({"step": steps, "eval_accuracy": 0.3, "eval_items": 8})
    return journal, metrics


def test_a_clean_history_holds():
    journal, metrics = _clean()
    report = audit_history(journal, metrics, group_size=G, eval_items=8)
    assert report.ok, report.violations
    assert report.checked == {"trained_episodes": 6, "trained_prompt_steps": 3, "training_steps": 3, "evaluations": 2}


def test_a_steps_prompts_trained_twice_and_the_next_never_are_caught():
    """Issue 26 defect 1 as the journal shows it: step 1's prompts replayed and trained, then run again
    (new episodes), step 2's never."""
    journal, metrics = _clean()
    journal = [r for r in journal if not (r["op"] == "add" and r["episode"]["task_id"].startswith("s2:"))]
    journal = [r for r in journal if r != {"op": "trained", "seqs": [4, 5]}]
    journal += [_add(10, 1, 0), _add(11, 1, 0), {"op": "trained", "seqs": [10, 11]}]
    report = audit_history(journal, metrics, group_size=G, eval_items=8)
    assert any("'s1:0:item10' trained 4 episodes, two groups of 2 or more" in v and "step 1's prompts trained twice" in v for v in report.violations)
    journal += [_add(12, 3, 0), _add(13, 3, 0), {"op": "trained", "seqs": [12, 13]}]
    report = audit_history(journal, metrics, group_size=G, eval_items=8)
    assert "step 2's prompts were never trained (steps 0..3 trained around it)" in report.violations


def test_one_extra_episode_in_a_group_is_not_a_step_trained_twice():
    """A retried episode whose first end was accepted adds one to its group: legitimate, not flagged."""
    journal, metrics = _clean()
    journal += [_add(20, 1, 0), {"op": "trained", "seqs": [20]}]
    assert audit_history(journal, metrics, group_size=G, eval_items=8).ok


def test_a_seq_marked_trained_twice_is_caught():
    journal, metrics = _clean()
    journal.append({"op": "trained", "seqs": [0]})
    assert "episode seq 0 was marked trained 2 times" in audit_history(journal, metrics, group_size=G).violations


@pytest.mark.parametrize("planted, words", [
    ({"step": 3, "eval_accuracy": 0.2, "eval_items": 3}, "3 eval_accuracy rows for step 3"),  # a second final row
    ({"step": 2, "eval_accuracy": 0.2}, "the eval_accuracy row of step 2 does not count its items"),  # pre-fix rows
    ({"step": 2, "eval_accuracy": 0.2, "eval_items": 5}, "scored 5 of 8 items"),  # cut short
    ({"step": 2.0, "pg_loss": 0.4}, "training step 2 has 2 metric rows"),
    ({"step": 5.0, "pg_loss": 0.4}, "training steps [4] have no metric row"),
])
def test_metric_defects_are_caught(planted, words):
    journal, metrics = _clean()
    metrics.append(planted)
    if "eval_items" in planted and planted["eval_items"] == 3:  # two extra rows at step 3
        metrics.append(planted)
    report = audit_history(journal, metrics, group_size=G, eval_items=8)
    assert any(words in v for v in report.violations), report.violations


def test_swarm_audit_prints_the_verdict_and_exits_by_it(tmp_path):
    journal, metrics = _clean()
    (tmp_path / "swarm_config.yaml").write_text("pool: {group_size: 2}\n")
    (tmp_path / "pool.journal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in journal))
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics))
    cmd = [sys.executable, "-m", "engine.cli", "audit", str(tmp_path), "--eval-items", "8"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "history holds" in out.stdout, out.stderr
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 3, "eval_accuracy": 0.9, "eval_items": 2}) + "\n")
    out = subprocess.run(cmd + ["--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and json.loads(out.stdout)["ok"] is False
    out = subprocess.run([sys.executable, "-m", "engine.cli", "audit", str(tmp_path / "nope")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "Traceback" not in out.stderr and "swarm_config.yaml" in out.stderr


def _stepped(journal: list[dict]) -> list[dict]:
    """The journal a time-basis run writes before any checkpoint: each step recorded, none durable."""
    out, step = [], 0
    for r in journal:
        if r["op"] == "trained":
            step += 1
            out.append({"op": "stepped", "step": step, "seqs": r["seqs"]})
        else:
            out.append(r)
    return out


def test_steps_no_checkpoint_holds_yet_are_audited():
    """Under time-based checkpoints nothing is marked trained until a write: the per-step records are
    what the audit checks, and a step's prompts trained twice (defect 1) shows there too."""
    journal, metrics = _clean()
    report = audit_history(_stepped(journal), metrics, group_size=G, eval_items=8)
    assert report.ok, report.violations
    assert report.checked["trained_prompt_steps"] == 3 and report.checked["trained_steps_journaled"] == 3
    replayed = _stepped(journal) + [_add(10, 1, 0), _add(11, 1, 0), {"op": "stepped", "step": 4, "seqs": [10, 11]}]
    report = audit_history(replayed, metrics, group_size=G, eval_items=8)
    assert any("step 1's prompts trained twice" in v for v in report.violations), report.violations


def test_a_step_retrained_after_a_restart_is_not_flagged_but_a_seq_in_two_steps_is():
    journal, metrics = _clean()
    stepped = _stepped(journal)
    # a restart from step 1's checkpoint trains steps 2 and 3 again, on the same replayed episodes
    rolled_back = stepped + [{"op": "stepped", "step": 2, "seqs": [2, 3]}, {"op": "stepped", "step": 3, "seqs": [4, 5]}]
    assert audit_history(rolled_back, metrics, group_size=G, eval_items=8).ok
    twice = stepped + [{"op": "stepped", "step": 4, "seqs": [2]}]
    assert "episode seq 2 trained in 2 steps" in audit_history(twice, metrics, group_size=G).violations
    gap = [r for r in stepped if r.get("step") != 2]
    assert "server steps [2] have no trained batch" in audit_history(gap, metrics, group_size=G).violations


@pytest.mark.slow
def test_a_time_basis_run_is_audited_step_by_step(tmp_path):
    """A real `swarm train` whose only checkpoint policy is an hour's time basis and no final write: no
    batch is ever marked durably trained, yet the audit sees both steps."""
    job = tiny_train_job(steps=2, eval_size=2, keep_final_checkpoint=False, training={"checkpoint_every_s": 3600})
    run_dir = swarm_train(tmp_path, job, timeout=300)
    ops = [json.loads(line)["op"] for line in (run_dir / "pool.journal.jsonl").read_text().splitlines()]
    assert "trained" not in ops, "a checkpoint was written: the time basis should have skipped both steps"
    report = audit_run_dir(run_dir, eval_items=2)
    assert report.ok, report.violations
    assert report.checked["trained_steps_journaled"] == 2 and report.checked["trained_prompt_steps"] == 2
    assert report.checked["trained_episodes"] == 8  # 2 steps x 2 tasks x 2 episodes
