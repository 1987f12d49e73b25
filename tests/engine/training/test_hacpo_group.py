"""A HACPO collaboration group of two real servers with different tokenizers (tiny: SmolLM2's BPE,
tiny-bytes: one token per byte): samples cross over as text, both learners step on own + shared samples,
the spec's diagnostics are reported, and a server SIGKILLed mid-exchange loses and duplicates nothing."""

from __future__ import annotations

import errno
import os
import signal
import threading

import pytest
import torch
from tests_support import ADMIN_TOKEN, free_port, serve_process

from engine.client import SwarmClient, SwarmHTTPError
from engine.client.exchange import exchange_samples
from engine.config import SwarmConfig
from engine.pool.journal import PoolJournal

PROMPTS = {"p0": "What is 2 + 3?", "p1": "What is 7 + 1?"}
# Per agent, per prompt: G = 2 rewards. a's p0 group is uniform on its own but not jointly with b's.
REWARDS = {"a": {"p0": [0.0, 0.0], "p1": [1.0, 0.0]}, "b": {"p0": [1.0, 1.0], "p1": [0.0, 1.0]}}


def _cfg(agent: str, model: str, run_dir=None, **hacpo) -> SwarmConfig:
    return SwarmConfig(
        model={"name": model},
        run_dir=run_dir,
        collaboration={"agent": agent, "hacpo": hacpo},
        pool={"policy": "any_client_agrees", "batch_size": 2, "group_size": 2},
        training={"lr": 1e-2, "mini_batch_size": 4, "micro_batch_size": 2},
    )


def _play(c: SwarmClient, agent: str) -> None:
    for task, rewards in REWARDS[agent].items():
        for r in rewards:
            with c.episode(task) as ep:
                ep.openai(max_retries=0).chat.completions.create(
                    model=ep.model, messages=[{"role": "user", "content": PROMPTS[task]}], max_tokens=6
                )
                assert ep.end(r).accepted


def _weights(srv) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for p in srv.server.backend.trainer.params])


@pytest.mark.slow
def test_two_tokenizers_both_learners_step_on_shared_samples(live_server):
    a = live_server(_cfg("a", "tiny"))  # the paper's HACPO: cross samples outside [lo, 1] give no gradient
    b = live_server(_cfg("b", "tiny-bytes", cross_clip=False))  # ablation "no clipping": every cross sample counts
    with a.client("a") as ca, b.client("b") as cb:
        _play(ca, "a")
        _play(cb, "b")
        report = exchange_samples({"a": ca, "b": cb})
        assert report["a"]["exported"] == 4 and report["a"]["imported"] == 4 and report["b"]["imported"] == 4
        sample = ca.export_samples()[0]
        assert sample["source"] == "a" and sample["length"] >= 1 and sample["mean_logprob"] <= 0
        assert ca.status()["pool"]["episodes"] == 8  # own + cross, waiting for the client's go
        before = {"a": _weights(a), "b": _weights(b)}
        ca.agree()
        cb.agree()
        ma = ca.wait_for_step(1, timeout=120)["last_metrics"]
        mb = cb.wait_for_step(1, timeout=120)["last_metrics"]
    for m in (ma, mb):
        assert m["own_samples"] == 4 and m["cross_samples"] == 4
        assert m["optimizer_steps"] + m["optimizer_steps_skipped"] == 2  # m0 own, m1 cross
        assert m["P/a"] == pytest.approx(0.25) and m["P/b"] == pytest.approx(0.75)  # acc of each agent's step
        assert m["zero_var_frac_joint"] == 0.0
        for key in ("cross_s_mean", "cross_s_min", "cross_s_max", "cross_lo", "retok_len_ratio", "omega_mean", "own_clip_frac/m0"):
            assert key in m
    assert ma["zero_var_frac_own"] == 0.5  # a's p0 is uniform on its own
    assert ma["omega_mean"] == pytest.approx(3.0) and mb["omega_mean"] == pytest.approx(1 / 3)  # P_src / P_k
    # the same text is many more byte tokens (on b) than BPE tokens (on a)
    assert ma["retok_len_ratio"] < mb["retok_len_ratio"] and mb["retok_len_ratio"] > 1
    assert ma["cross_lo"] == pytest.approx(0.825)  # 1 - delta + 1 * delta_step at m = 1
    # Untrained models put ~1/V on each token: per-token log-probs differ by log(49152/259) between the
    # two vocabularies, so s = exp(lp_a - lp_b) ~ 0.005 sits below lo and HACPO discards every cross
    # sample (the spec's warning about very different tokenizers): a's cross mini-batch has no gradient and
    # takes no optimizer step (AdamW's momentum would otherwise move the weights anyway).
    assert ma["cross_s_max"] < ma["cross_lo"] and ma["cross_below_lo_frac"] == 1.0
    assert ma["cross_in_band_frac"] == 0.0 and ma["optimizer_steps_skipped"] == 1 and "grad_norm/m1" not in ma
    assert mb["optimizer_steps_skipped"] == 0 and mb["grad_norm/m1"] > 0  # without the clip, b's cross mini-batch (a's samples) trains b
    assert ma["grad_norm/m0"] > 0 and mb["grad_norm/m0"] > 0
    assert not torch.equal(before["a"], _weights(a)) and not torch.equal(before["b"], _weights(b))


def test_exchange_errors_are_clear(live_server):
    plain = live_server()
    with plain.client() as c:
        with pytest.raises(SwarmHTTPError) as e:
            c.import_samples([])
        assert e.value.status == 400 and "collaboration" in e.value.reason
    srv = live_server(_cfg("a", "tiny"))
    own = {"source": "a", "episode_id": "e1", "task_id": "t", "messages": [{"role": "user", "content": "x"}],
           "text": "1", "reward": 1.0, "length": 1, "mean_logprob": -1.0}
    with srv.client() as c:
        with pytest.raises(SwarmHTTPError) as e:
            c.import_samples([own])
        assert e.value.status == 400 and "own agent" in e.value.reason
        with pytest.raises(SwarmHTTPError) as e:
            c.import_samples([{**own, "source": "b", "mean_logprob": 0.5}])
        assert e.value.status == 422 and "mean_logprob" in e.value.reason
        empty = c.import_samples([{**own, "source": "b", "text": ""}])
        assert empty["dropped_empty"] == 1 and empty["imported"] == 0


def test_an_import_that_cannot_be_journaled_is_a_503_and_its_retry_imports(live_server, tmp_path, monkeypatch):
    """Imported samples are answered only once durable: a failed journal write withdraws them (503, the
    exchange retries) instead of reporting samples that a restart would not have."""
    srv = live_server(_cfg("a", "tiny", run_dir=str(tmp_path / "a")))
    peer = {"source": "b", "episode_id": "e1", "task_id": "p0", "messages": [{"role": "user", "content": PROMPTS["p0"]}],
            "text": "5", "reward": 1.0, "length": 1, "mean_logprob": -1.0}
    real = PoolJournal._append_line

    def disk_full(self, line: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with srv.client() as c:
        monkeypatch.setattr(PoolJournal, "_append_line", disk_full)
        with pytest.raises(SwarmHTTPError) as e:
            c.import_samples([peer])
        assert e.value.status == 503 and "could not journal 1 of 1 imported samples" in e.value.reason
        assert len(srv.server.pool) == 0
        monkeypatch.setattr(PoolJournal, "_append_line", real)
        assert c.import_samples([peer])["imported"] == 1
        assert c.import_samples([peer])["duplicates"] == 1
    assert sum('"add"' in line for line in (tmp_path / "a" / "pool.journal.jsonl").read_text().splitlines()) == 1


@pytest.mark.slow
def test_sigkill_mid_exchange_loses_and_duplicates_nothing(live_server, tmp_path):
    a = live_server(_cfg("a", "tiny"))
    run_dir, port = tmp_path / "b", free_port()
    proc = serve_process(run_dir, port)
    try:
        with a.client("a") as ca, SwarmClient(f"http://127.0.0.1:{port}", ADMIN_TOKEN, client_id="b") as cb:
            cb.configure(_cfg("b", "tiny-bytes", run_dir=str(run_dir)))
            cb.start(wait=True, timeout=120)
            _play(ca, "a")
            _play(cb, "b")
            # half an exchange: a has b's samples; b dies before receiving a's
            assert ca.import_samples(cb.export_samples())["imported"] == 4
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            report: dict = {}
            worker = threading.Thread(target=lambda: report.update(exchange_samples({"a": ca, "b": cb})))
            worker.start()  # the client retries b until it is back
            proc = serve_process(run_dir, port, "--start")
            worker.join(timeout=180)
            assert not worker.is_alive()
            assert report["a"] == {"exported": 4, "imported": 0, "duplicates": 4, "dropped_empty": 0, "truncated": 0}
            assert report["b"]["exported"] == 4 and report["b"]["imported"] == 4  # b's own came back from its journal
            assert exchange_samples({"a": ca, "b": cb})["b"]["duplicates"] == 4  # a retry adds nothing
            for c in (ca, cb):
                c.agree()
            for c in (ca, cb):
                m = c.wait_for_step(1, timeout=120)["last_metrics"]
                assert m["own_samples"] == 4 and m["cross_samples"] == 4
    finally:
        if proc.poll() is None:
            proc.kill()
