"""HACPO's pure pieces against hand-computed values: the tokenizer-neutral export/import of samples, the
learner's view of a step (capabilities, advantages, omega, lp_src, own-first order), and the trainer's
micro-batch accumulation (the micro-batch size must not change the update)."""

from __future__ import annotations

import math

import pytest
import torch

from engine.algorithms import CapabilityTracker, HacpoConfig
from engine.config import ModelConfig, SwarmConfig
from engine.models import load_model
from engine.models.builtins import byte_tokenizer
from engine.training.exchange import SharedSample, export_sample, import_sample
from engine.training.hacpo_batch import learner_view
from engine.types import Author, Block, EpisodeResult, Timeline

MSGS = [{"role": "user", "content": "What is 2 + 3?"}]


@pytest.fixture(scope="module")
def tok():
    return byte_tokenizer()


def _own(tok, eid: str, task: str, reply: str, reward: float, lps: list[float], eos: bool = True) -> EpisodeResult:
    ids = tok(reply, add_special_tokens=False)["input_ids"] + ([tok.eos_token_id] if eos else [])
    assert len(ids) == len(lps)
    prompt = Block(Author.USER, "q", tok("q", add_special_tokens=False)["input_ids"])
    tl = Timeline([prompt, Block(Author.LLM, reply, ids, lps, True)])
    return EpisodeResult(eid, task, "a", reward, [tl], prompt_messages=MSGS)


def _shared(source: str, eid: str, task: str, text: str, reward: float, lp: float = -1.0) -> SharedSample:
    return SharedSample(source=source, episode_id=eid, task_id=task, messages=MSGS, text=text, reward=reward, length=max(1, len(text)), mean_logprob=lp)


def test_export_drops_the_end_of_turn_token_from_length_and_mean_logprob(tok):
    ep = _own(tok, "e1", "t", "15", 1.0, [-1.0, -3.0, -0.5])  # '1', '5', <|im_end|>
    s = export_sample(ep, "a", tok, {tok.eos_token_id})
    assert (s.text, s.length, s.mean_logprob, s.source, s.task_id) == ("15", 2, -2.0, "a", "t")
    assert s.messages == MSGS
    no_msgs = EpisodeResult("e2", "t", "a", 1.0, ep.timelines)
    assert export_sample(no_msgs, "a", tok, {tok.eos_token_id}) is None


def test_import_renders_the_learners_template_and_retokenises_the_text(tok):
    cross = import_sample(_shared("b", "e9", "t", "15", 1.0, lp=-0.7), tok, [tok.eos_token_id], max_tokens=4096)
    tl = cross.timelines[0]
    assert tl.blocks[-1].token_ids == tok("15", add_special_tokens=False)["input_ids"] and tl.blocks[-1].trainable
    prompt_ids = tok.apply_chat_template(MSGS, add_generation_prompt=True, tokenize=False)
    assert tok.decode(tl.token_ids[: -2]) == prompt_ids  # ChatML prompt, then the two reply bytes
    assert cross.episode_id == "b/e9" and cross.metadata == {"source": "b", "lp_src": -0.7, "src_len": 2, "truncated": False}
    n_prompt = len(tl.token_ids) - 2
    cut = import_sample(_shared("b", "e9", "t", "12345", 1.0), tok, [tok.eos_token_id], max_tokens=n_prompt + 3)
    assert len(cut.timelines[0].blocks[-1].token_ids) == 3 and cut.metadata["truncated"]
    assert import_sample(_shared("b", "e9", "t", "", 1.0), tok, [tok.eos_token_id], 4096) is None


def test_learner_view_matches_the_spec_by_hand(tok):
    # prompt t1: a's own rewards [1, 0], b's [1, 1]; prompt t2: a's [0, 0], b's [0, 0] (uniform jointly)
    own = [
        _own(tok, "a1", "t1", "5", 1.0, [-0.2, -0.4]),
        _own(tok, "a2", "t1", "4", 0.0, [-1.0, -2.0]),
        _own(tok, "a3", "t2", "7", 0.0, [-0.5, -0.5]),
        _own(tok, "a4", "t2", "8", 0.0, [-0.5, -0.5]),
    ]
    cross = [
        import_sample(_shared("b", f"b{i}", t, "5", r, lp=-0.3), tok, [tok.eos_token_id], 4096)
        for i, (t, r) in enumerate([("t1", 1.0), ("t1", 1.0), ("t2", 0.0), ("t2", 0.0)])
    ]
    tracker = CapabilityTracker(window=5)
    tracker.update({"a": 0.5, "b": 1.0})  # an earlier step
    view = learner_view(cross[:2] + own + cross[2:], "a", tracker, HacpoConfig(), "token")
    # this step: acc_a = 1/4, acc_b = 2/4 -> P_a = (0.5 + 0.25)/2, P_b = (1 + 0.5)/2
    P_a, P_b = 0.375, 0.75
    assert view.metrics["P/a"] == pytest.approx(P_a) and view.metrics["P/b"] == pytest.approx(P_b)
    assert view.cross == [False] * 4 + [True] * 4 and view.n_own == 4
    # t1: mu_a = mean(1*1, 1*0, w*1, w*1) with w = P_a/P_b = 0.5 -> 0.5; sigma = std([1,0,1,1]) = 0.5
    sigma = torch.tensor([1.0, 0.0, 1.0, 1.0]).std().item()
    adv = {s.episode_id: s.advantage for s in view.samples}
    assert adv["a1"] == pytest.approx((1 - 0.5) / (sigma + 1e-6))
    assert adv["a2"] == pytest.approx((0 - 0.5) / (sigma + 1e-6))
    assert adv["b/b0"] == pytest.approx((1 - 0.5) / (sigma + 1e-6))
    assert adv["a3"] == adv["b/b2"] == 0.0  # uniform group
    lp = dict(zip((s.episode_id for s in view.samples), view.lp_src, strict=True))
    assert lp["a2"] == pytest.approx(-1.5) and lp["b/b0"] == -0.3  # own: pi_old's mean over trainable tokens
    omega = dict(zip((s.episode_id for s in view.samples), view.omega, strict=True))
    assert omega["b/b1"] == pytest.approx(P_b / P_a) and omega["a1"] == 1.0
    assert view.metrics["zero_var_frac_own"] == 0.5 and view.metrics["zero_var_frac_joint"] == 0.5


def test_per_character_view_divides_the_source_sequence_log_prob_by_the_reply_characters(tok):
    own = [_own(tok, "a1", "t1", "15", 1.0, [-0.2, -0.4, -0.1]), _own(tok, "a2", "t1", "4", 0.0, [-1.0, -2.0])]
    # the source exported "150" as 2 of its tokens with mean log-prob -0.9: sequence log-prob -1.8
    cross = import_sample(
        SharedSample(source="b", episode_id="b0", task_id="t1", messages=MSGS, text="150", reward=1.0, length=2, mean_logprob=-0.9),
        tok, [tok.eos_token_id], 4096,
    )
    tracker = CapabilityTracker(window=5)
    view = learner_view([*own, cross], "a", tracker, HacpoConfig(cross_normalization="char"), "token")
    lp = dict(zip((s.episode_id for s in view.samples), view.lp_src, strict=True))
    chars = dict(zip((s.episode_id for s in view.samples), view.chars, strict=True))
    assert lp["b/b0"] == pytest.approx(-1.8 / 3) and chars["b/b0"] == 3.0
    assert lp["a1"] == pytest.approx(-0.7 / 3)  # own samples keep the per-token mean of the spec
    token_view = learner_view([*own, cross], "a", CapabilityTracker(window=5), HacpoConfig(), "token")
    assert dict(zip((s.episode_id for s in token_view.samples), token_view.lp_src, strict=True))["b/b0"] == -0.9


def test_hacpo_step_does_not_depend_on_the_micro_batch_size(tok):
    """Own and cross mini-batches accumulate over micro-batches to the same update as one big pass."""
    from engine.backends.torch.hacpo_trainer import HacpoTrainer

    results = []
    for micro in (1, 4):
        loaded = load_model(ModelConfig(name="tiny-bytes"))
        cfg = SwarmConfig(
            model={"name": "tiny-bytes"},
            collaboration={"agent": "a", "hacpo": {"cross_clip": False}},
            pool={"policy": "any_client_agrees"},
            training={"lr": 1e-2, "mini_batch_size": 4, "micro_batch_size": micro},
        )
        trainer = HacpoTrainer(loaded.model, loaded.tokenizer.pad_token_id, cfg)
        grads: list[torch.Tensor] = []  # each mini-batch's accumulated gradient, before its optimizer step
        step = trainer.optimizer_step
        trainer.optimizer_step = lambda step=step, grads=grads, t=trainer: (
            grads.append(torch.cat([p.grad.flatten().clone() for p in t.params])), step())[1]
        with torch.no_grad():
            rendered = torch.tensor(loaded.tokenizer.apply_chat_template(MSGS, add_generation_prompt=True, tokenize=True)["input_ids"])
            lp = torch.log_softmax(loaded.model(rendered[None]).logits[0, -1], -1)
        batch = []
        for i, (text, r) in enumerate([("5", 1.0), ("41", 0.0), ("5!", 1.0), ("x", 0.0)]):
            ids = loaded.tokenizer(text, add_special_tokens=False)["input_ids"]
            ep = _own(loaded.tokenizer, f"a{i}", "t", text, r, [float(lp[ids[0]])] * len(ids), eos=False)
            batch.append(ep)
            batch.append(import_sample(_shared("b", f"b{i}", "t", text[::-1] + "0", 1.0 - r, lp=-5.0), loaded.tokenizer, [], 4096))
        metrics = trainer.train_step(batch)
        assert metrics["optimizer_steps"] == 2 and metrics["grad_norm/m1"] > 0
        results.append((grads, metrics))
    (g1, m1), (g4, m4) = results
    assert len(g1) == len(g4) == 2  # m0 (own), m1 (cross)
    for a, b in zip(g1, g4, strict=True):
        assert a.norm() > 0 and (a - b).norm() / a.norm() < 1e-4  # float32 rounding, not a different update
    assert math.isclose(m1["grad_norm/m1"], m4["grad_norm/m1"], rel_tol=1e-4)


def test_naive_sharing_counts_every_cross_sample_as_carrying_gradient(tok):
    """Naive sharing has no clip band: the same far-off cross samples that HACPO discards all train it, and
    cross_in_band_frac says so (it is the share of cross samples that carry gradient)."""
    from engine.backends.torch.hacpo_trainer import HacpoTrainer

    loaded = load_model(ModelConfig(name="tiny-bytes"))
    cfg = SwarmConfig(
        model={"name": "tiny-bytes"},
        collaboration={"agent": "a", "method": "naive"},
        pool={"policy": "any_client_agrees"},
        training={"lr": 1e-2, "mini_batch_size": 4, "micro_batch_size": 2},
    )
    trainer = HacpoTrainer(loaded.model, loaded.tokenizer.pad_token_id, cfg)
    metrics = trainer.train_step(_far_cross_batch(loaded.tokenizer))
    assert metrics["cross_below_lo_frac/m1"] == 1.0  # s is still far below lo ...
    assert metrics["cross_in_band_frac"] == 1.0 and metrics["optimizer_steps"] == 2  # ... yet every sample trains


def _far_cross_batch(tokenizer) -> list[EpisodeResult]:
    """Four own replies (mean log-prob -3) and four cross replies from a source nearly sure of them (-0.01)."""
    batch = []
    for i, (text, r) in enumerate([("5", 1.0), ("41", 0.0), ("5!", 1.0), ("x", 0.0)]):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        batch.append(_own(tokenizer, f"a{i}", "t", text, r, [-3.0] * len(ids), eos=False))
        batch.append(import_sample(_shared("b", f"b{i}", "t", text[::-1] + "0", 1.0 - r, lp=-0.01), tokenizer, [], 4096))
    return batch


def test_a_mini_batch_without_gradient_takes_no_optimizer_step(tok):
    """Cross samples far below the clip band carry no gradient: their mini-batch must leave the weights as the
    own mini-batch left them (an AdamW step on a zero gradient still moves them through momentum)."""
    from engine.backends.torch.hacpo_trainer import HacpoTrainer

    loaded = load_model(ModelConfig(name="tiny-bytes"))
    cfg = SwarmConfig(
        model={"name": "tiny-bytes"},
        collaboration={"agent": "a"},
        pool={"policy": "any_client_agrees"},
        training={"lr": 1e-2, "mini_batch_size": 4, "micro_batch_size": 2},
    )
    trainer = HacpoTrainer(loaded.model, loaded.tokenizer.pad_token_id, cfg)
    initial = _flat_weights(trainer)
    after_step: list[tuple[torch.Tensor, list[torch.Tensor]]] = []  # weights and AdamW state after each step
    step = trainer.optimizer_step
    trainer.optimizer_step = lambda: (step(), after_step.append((_flat_weights(trainer), _optimizer_tensors(trainer))))[0]
    # a random learner's ~-5.5 per byte against the source's -0.01: s ~ 0.004, far below lo for every cross sample
    batch = _far_cross_batch(loaded.tokenizer)
    metrics = trainer.train_step(batch)
    assert metrics["optimizer_steps"] == 1 and metrics["optimizer_steps_skipped"] == 1
    assert metrics["cross_below_lo_frac/m1"] == 1.0 and metrics["cross_in_band_frac"] == 0.0
    assert len(after_step) == 1
    weights_after_own, state_after_own = after_step[0]
    assert not torch.equal(weights_after_own, initial)  # the own mini-batch did update: the check below can fail
    assert torch.equal(_flat_weights(trainer), weights_after_own)  # bit-unchanged by the gradient-free mini-batch
    state_now = _optimizer_tensors(trainer)
    assert len(state_now) == len(state_after_own) and all(torch.equal(a, b) for a, b in zip(state_now, state_after_own, strict=True))


def _flat_weights(trainer) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for p in trainer.params])


def _optimizer_tensors(trainer) -> list[torch.Tensor]:
    """AdamW's state (step counts, both moments) of every parameter, copied, in the parameters' order."""
    state = trainer.optimizer.state
    return [v.detach().clone() for p in trainer.params for _, v in sorted(state.get(p, {}).items()) if torch.is_tensor(v)]


def test_nll_is_the_mean_negative_log_likelihood_of_trainable_tokens():
    from engine.algorithms import get_policy_loss, policy_loss_config

    logp = torch.tensor([[-1.0, -2.0, -9.0], [-0.5, -4.0, -3.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
    loss, m = get_policy_loss("nll")(
        logp_BT=logp, old_logp_BT=torch.zeros(2, 3), advantages_B=torch.tensor([5.0, -5.0]),
        mask_BT=mask, weights_B=torch.tensor([1.0, 1.0]), cfg=policy_loss_config("nll"),
    )
    assert loss.item() == pytest.approx((1 + 2 + 4 + 3) / 4) and m["pg_loss"] == pytest.approx(2.5)
    loss.backward()  # d/dlogp = -mask / 4, advantages play no part
    assert torch.allclose(logp.grad, -mask / 4)

