"""A half-precision model trains through float32 master weights (engine.backends.torch.trainer).

Without masters AdamW steps bfloat16 weights directly and small updates round away: at lr 1e-5 a weight near
0.02 (bfloat16 spacing 1.2e-4 there) never moves, however many steps. With masters the float32 copy
accumulates the steps and the model gets it rounded, so the same weights move once the sum is large enough.
"""

from __future__ import annotations

import torch

from engine.backends.torch.trainer import TorchTrainer
from engine.config import ModelConfig, SwarmConfig
from engine.models import load_model
from engine.types import Author, Block, EpisodeResult, Timeline

LR = 1e-5
STEPS = 50


def _trainer(dtype: str) -> TorchTrainer:
    model = load_model(ModelConfig(name="tiny", dtype=dtype), device="cpu").model
    model.eval()
    for p in model.parameters():
        p.requires_grad_(True)
    cfg = SwarmConfig(model={"name": "tiny", "dtype": dtype}, training={"lr": LR, "weight_decay": 0.0})
    return TorchTrainer(model, 0, cfg)


def test_a_float32_model_is_stepped_in_place_without_masters():
    tr = _trainer("float32")
    assert tr.masters is None and tr.optimizer.param_groups[0]["params"] == tr.params


def test_small_steps_accumulate_in_the_masters_and_reach_the_bfloat16_weights():
    tr = _trainer("bfloat16")
    assert tr.masters is not None and all(m.dtype == torch.float32 for m in tr.masters)
    before = [p.detach().clone() for p in tr.params]
    for _ in range(STEPS):
        for p in tr.params:
            p.grad = torch.ones_like(p)
        tr.optimizer_step()
        tr.zero_grad()
        assert all(p.grad is None for p in tr.params) and all(m.grad is None for m in tr.masters)
    # Adam on a constant gradient moves every weight by lr per step (bias-corrected moments: m/sqrt(v) = 1,
    # clipping scales the gradient, which Adam's ratio ignores up to eps 1e-8). float32 rounding of 50
    # subtractions from values below 2 costs at most 50 x 1.2e-7, far under the 5e-4 expected.
    for m, b in zip(tr.masters, before, strict=True):
        torch.testing.assert_close(m, b.float() - STEPS * LR, atol=1e-5, rtol=0)
    for p, m in zip(tr.params, tr.masters, strict=True):
        assert p.dtype == torch.bfloat16 and torch.equal(p, m.to(torch.bfloat16))
    moved = sum((p != b).sum().item() for p, b in zip(tr.params, before, strict=True))
    total = sum(p.numel() for p in tr.params)
    # Every weight under ~0.06 in size (spacing <= 2.4e-4) has moved; without masters none would have.
    small = sum((b.float().abs() < 0.06).sum().item() for b in before)
    assert moved >= small > total / 2


def test_a_bfloat16_train_step_on_episodes_changes_the_weights_and_leaves_no_gradient():
    tr = _trainer("bfloat16")
    prompt, reply = [1, 17, 300, 42, 9], [11, 12, 13]
    with torch.no_grad():
        logp = torch.log_softmax(tr.model(torch.tensor([prompt + reply])).logits[0].float(), -1)
    lp = [float(logp[len(prompt) - 1 + i, t]) for i, t in enumerate(reply)]

    def episode(eid: str, reward: float) -> EpisodeResult:
        return EpisodeResult(eid, "t", "c", reward, [Timeline([Block(Author.ENV, "", prompt),
                                                               Block(Author.LLM, "", reply, lp, True)])])

    masters_before = [m.clone() for m in tr.masters]
    metrics = tr.train_step([episode("a", 1.0), episode("b", 0.0)])
    assert metrics["optimizer_steps"] >= 1
    assert any(not torch.equal(m, b) for m, b in zip(tr.masters, masters_before, strict=True))
    assert all(p.grad is None for p in tr.params)
    assert all(torch.equal(p, m.to(torch.bfloat16)) for p, m in zip(tr.params, tr.masters, strict=True))
