"""The old policy's log-probs in the ratio (`training.old_logprobs`, engine.backends.torch.trainer).

The trainer's ratio compares its forward with the log-probs recorded at sampling time. In float32 on the
torch backend the two agree to ~1e-5 nats a token; in bfloat16 (or from vLLM's kernels) they differ by
~0.04, and a GSPO sequence clip of 3e-3 then reads most samples as off-policy. Here that gap is planted:
every recorded log-prob is the model's own plus 0.02. Recorded values are then clipped as off-policy;
recomputed ones give every sequence a ratio of exactly 1 before the first update, and the step reports
the planted gap.
"""

from __future__ import annotations

import math

import pytest
import torch

from engine.backends.torch.trainer import OldLogprobGap, TorchTrainer
from engine.config import OldLogprobs, SwarmConfig
from engine.models import load_model
from engine.training.algo_config import recomputes_old_logprobs
from engine.training.batch import Collated
from engine.types import Author, Block, EpisodeResult, Timeline

PLANTED = 0.02  # nats a token added to every recorded log-prob


@pytest.mark.parametrize(
    "mode, dtype, backend, recomputes",
    [
        ("auto", "float32", "torch", False),  # the recorded values are exact here
        ("auto", "bfloat16", "torch", True),
        ("auto", "float16", "torch", True),
        ("auto", "float32", "vllm", True),  # vLLM's kernels are not the trainer's
        ("sampled", "bfloat16", "torch", False),
        ("recomputed", "float32", "torch", True),
    ],
)
def test_auto_recomputes_where_sampling_and_training_kernels_differ(mode, dtype, backend, recomputes):
    cfg = SwarmConfig(model={"dtype": dtype}, backend=backend, training={"old_logprobs": mode})
    assert cfg.training.old_logprobs is OldLogprobs(mode)
    assert recomputes_old_logprobs(cfg) is recomputes


def test_adopting_recomputed_log_probs_by_hand():
    old = torch.tensor([[9.0, -1.0, -2.0, 0.0], [9.0, -0.5, 0.0, 0.0]])  # column 0: before `start`
    mask = torch.tensor([[0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0]])
    c = Collated(torch.zeros(2, 5, dtype=torch.long), torch.ones(2, 5, dtype=torch.long), torch.zeros(2, 4, dtype=torch.long),
                 mask, old.clone(), torch.zeros(2), torch.ones(2))
    logp = torch.tensor([[-1.1, -1.8, 7.0], [-0.6, 5.0, 5.0]])  # from column 1 on; 7 and 5 are not trainable
    gap = OldLogprobGap()
    gap.adopt(c, 1, logp, mask[:, 1:])
    assert torch.equal(c.old_logp_BT, torch.tensor([[9.0, -1.1, -1.8, 0.0], [9.0, -0.6, 0.0, 0.0]]))
    # |differences| 0.1, 0.2 and 0.1 over 3 tokens; sequence means (-0.1 + 0.2) / 2 = 0.05 and -0.1
    m = gap.metrics()
    assert m["old_logp_gap"] == pytest.approx(0.4 / 3, abs=1e-6) and m["old_logp_gap_seq_max"] == pytest.approx(0.1, abs=1e-6)


PROMPT = [1, 17, 300, 42, 9]
REPLIES = [[11, 12, 13], [14, 15], [21, 22, 23, 24], [25, 26, 27]]


def _batch(model) -> list[EpisodeResult]:
    """Two groups of two episodes (rewards 1 and 0), each reply's recorded log-probs its own + PLANTED."""
    out = []
    for k, reply in enumerate(REPLIES):
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([PROMPT + reply])).logits[0].float(), -1)
        lp = [float(logp[len(PROMPT) - 1 + i, t]) + PLANTED for i, t in enumerate(reply)]
        tl = Timeline([Block(Author.ENV, "", PROMPT), Block(Author.LLM, "", reply, lp, True)])
        out.append(EpisodeResult(f"e{k}", f"g{k // 2}", "c", 1.0 - k % 2, [tl]))
    return out


def _step(mode: str) -> dict[str, float]:
    """One GSPO step (clip 3e-3) on the planted batch: two mini-batches (one per group), at an lr too small
    to move a float32 weight, so the second mini-batch's policy is still the old one."""
    cfg = SwarmConfig(
        model={"name": "tiny"},
        algorithm={"policy_loss": "gspo", "clip_low": 3e-3, "clip_high": 4e-3},
        training={"lr": 1e-30, "mini_batch_size": 2, "micro_batch_size": 1, "old_logprobs": mode},
    )
    model = load_model(cfg.model, device="cpu").model
    for p in model.parameters():
        p.requires_grad_(True)
    trainer = TorchTrainer(model, 0, cfg)
    return trainer.train_step(_batch(model))


def test_recorded_log_probs_off_by_a_planted_gap_clip_the_losing_sequences():
    m = _step("sampled")
    assert m["ratio_mean"] == pytest.approx(math.exp(-PLANTED), abs=1e-5)
    assert m["clip_frac"] == pytest.approx(0.5)  # a ratio below 1 - 3e-3 clips each negative-advantage sequence
    assert "old_logp_gap" not in m


def test_recomputed_log_probs_give_every_sequence_a_ratio_of_one_and_report_the_gap():
    m = _step("recomputed")
    assert m["ratio_mean"] == pytest.approx(1.0, abs=1e-6) and m["clip_frac"] == 0.0  # both mini-batches
    # the gap is the planted one, up to float32 rounding of log-probs near -6 (spacing 5e-7)
    assert m["old_logp_gap"] == pytest.approx(PLANTED, abs=1e-5)
    assert m["old_logp_gap_seq_max"] == pytest.approx(PLANTED, abs=1e-5)
    assert m["train_recompute_old_s"] >= 0.0


def _hacpo_step(mode: str) -> dict[str, float]:
    """A GSPO learner of a collaboration group (the HACPO trainer's own-sample path): four own replies in
    two groups, two own mini-batches, recorded log-probs a constant -3 (far from the model's own)."""
    from engine.backends.torch.hacpo_trainer import HacpoTrainer

    cfg = SwarmConfig(
        model={"name": "tiny-bytes"},
        collaboration={"agent": "a", "method": "gspo"},
        pool={"policy": "any_client_agrees"},
        training={"lr": 1e-30, "mini_batch_size": 2, "micro_batch_size": 1, "old_logprobs": mode},
    )
    loaded = load_model(cfg.model, device="cpu")
    tok = loaded.tokenizer
    batch = []
    for k, reply in enumerate(["5", "41", "5!", "x"]):
        ids = tok(reply, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        prompt = Block(Author.USER, "q", tok("q", add_special_tokens=False)["input_ids"])
        tl = Timeline([prompt, Block(Author.LLM, reply, ids, [-3.0] * len(ids), True)])
        batch.append(EpisodeResult(f"a{k}", f"t{k // 2}", "a", 1.0 - k % 2, [tl],
                                   prompt_messages=[{"role": "user", "content": "q"}]))
    return HacpoTrainer(loaded.model, tok.pad_token_id, cfg).train_step(batch)


def test_a_hacpo_learners_own_samples_take_the_recomputed_old_policy():
    sampled, recomputed = _hacpo_step("sampled"), _hacpo_step("recomputed")
    assert abs(sampled["own_s_mean"] - 1.0) > 0.1  # -3 a token is not this model's log-prob
    assert recomputed["own_s_mean"] == pytest.approx(1.0, abs=1e-6)  # both own mini-batches
    assert recomputed["own_clip_frac/m0"] == recomputed["own_clip_frac/m1"] == 0.0
    assert recomputed["old_logp_gap"] > 0.1 and "old_logp_gap" not in sampled
