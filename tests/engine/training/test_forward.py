"""The trainer's forward pass (engine/backends/torch/forward.py): the plan and the packed layout by hand, and
the same log-probs and gradients as a plain full forward on the tiny model in every layout, full weights and
LoRA."""

from __future__ import annotations

import copy

import pytest
import torch

from engine.algorithms.losses import token_logprobs
from engine.backends.torch.forward import (
    EXTRA_PASS_TOKENS,
    ForwardPlan,
    Layout,
    block_causal_mask,
    head_parts,
    layout_cost,
    pack_rows,
    packed_length,
    pass_groups,
    plan_forward,
    scatter_rows,
    stack_packings,
    supports_packing,
    trainable_logits,
    trainable_logits_stacked,
    trainable_mask,
)
from engine.backends.torch.kv import cache_kwarg
from engine.config import ModelConfig
from engine.models import load_model
from engine.training.batch import collate
from engine.types import Author, Block, Sample, Timeline


def _sample(prompt: list[int], reply: list[int], tail: list[int] | None = None) -> Sample:
    blocks = [Block(Author.ENV, "", prompt), Block(Author.LLM, "", reply, [-1.0] * len(reply), True)]
    if tail:
        blocks.append(Block(Author.ENV, "", tail))
    return Sample(Timeline(blocks), "e", "t", 0.0, 1.0)


def test_plan_by_hand():
    # rows share tokens 0..2; the first trainable target (x_4 predicted at column 3) is in row 0
    c = collate([_sample([1, 2, 3, 4], [5, 6]), _sample([1, 2, 3, 9, 9], [7])], pad_id=0)
    assert plan_forward(c) == ForwardPlan(prefix=3, start=3, layout=Layout.PACKED)
    # without packing: the KV layout runs 3 + 2 * 3 = 9 tokens in two passes (9 + EXTRA_PASS_TOKENS), the
    # padded batch 12 in one: padded. With a longer shared prompt the KV layout wins (test below).
    assert plan_forward(c, pack=False) == ForwardPlan(prefix=0, start=3, layout=Layout.PADDED)
    # packed: the prefix once (3) plus each row's tokens after it (3 + 3) = 9 tokens
    assert plan_forward(c, pack_max_tokens=9).layout is Layout.PACKED
    assert plan_forward(c, pack_max_tokens=8).layout is Layout.PADDED
    # identical prompts: the prefix reaches the first trainable target and stops there
    c = collate([_sample([1, 2, 3], [5, 6]), _sample([1, 2, 3], [7])], pad_id=0)
    assert plan_forward(c) == ForwardPlan(prefix=2, start=2, layout=Layout.PACKED)
    # one row, sharing switched off, or nothing trainable: no prefix
    assert plan_forward(collate([_sample([1, 2, 3], [5])], pad_id=0)) == ForwardPlan(prefix=0, start=2)
    assert plan_forward(c, share_prefix=False) == ForwardPlan(prefix=0, start=2, layout=Layout.PACKED)
    assert plan_forward(c, share_prefix=False, pack=False) == ForwardPlan(prefix=0, start=2)
    frozen = Sample(Timeline([Block(Author.ENV, "", [1, 2, 3])]), "e", "t", 0.0, 1.0)
    assert plan_forward(collate([frozen, frozen], pad_id=0)) == ForwardPlan(prefix=0, start=0)
    # the very first token differs: nothing to share, but the rows still pack (no padding)
    c = collate([_sample([1, 2], [5]), _sample([8, 2], [5])], pad_id=0)
    assert plan_forward(c) == ForwardPlan(prefix=0, start=1, layout=Layout.PACKED)
    assert plan_forward(c, pack=False) == ForwardPlan(prefix=0, start=1, layout=Layout.PADDED)


def test_layout_cost_by_hand():
    assert layout_cost(100, 6000, 10) == 100 + 6000 / 60
    assert layout_cost(100, 6000, None) == 100
    assert layout_cost(100, 6000, None, passes=2) == 100 + EXTRA_PASS_TOKENS


def test_the_plan_packs_a_group_but_not_long_rows_side_by_side():
    # one prompt of 8 tokens, four replies of 2: packed 7 + 4 * 3 = 19 tokens in one pass; the KV layout
    # runs as many tokens in two passes; padded 40
    group = [_sample(list(range(1, 9)), [20 + r, 30 + r]) for r in range(4)]
    assert plan_forward(collate(group, 0), hidden_size=64).layout is Layout.PACKED
    # two unrelated rows of 40 tokens: packed and padded run 80 tokens, but the packed mask spans
    # 80 x 80 pairs against 2 x 40 x 40
    rows = [_sample(list(range(1, 39)), [50, 51]), _sample(list(range(100, 138)), [60, 61])]
    assert plan_forward(collate(rows, 0), hidden_size=64) == ForwardPlan(prefix=0, start=37)
    # long rows after a shared prompt (merged multi-turn samples): the KV layout saves more attention than
    # its second pass costs: 119^2 + 2 x 301 x 420 pairs against packed 721^2 (same 721 tokens)
    prompt = list(range(1, 121))
    merged = [_sample(prompt, list(range(200, 500))), _sample(prompt, list(range(600, 900)))]
    plan = plan_forward(collate(merged, 0), hidden_size=64)
    assert plan == ForwardPlan(prefix=119, start=119, layout=Layout.SHARED_KV)


def test_pack_rows_by_hand():
    # prefix [1, 2]; row 0 continues 3 4 (length 4, one pad), row 1 continues 7 8 9 (length 5), row 2
    # continues 6 5 (length 4, one pad)
    c = collate([_sample([1, 2, 3], [4]), _sample([1, 2, 7], [8, 9]), _sample([1, 2, 6], [5])], pad_id=0)
    plan = plan_forward(c)
    assert plan == ForwardPlan(prefix=2, start=2, layout=Layout.PACKED)
    p = pack_rows(c, plan)
    assert p.ids_N.tolist() == [1, 2, 3, 4, 7, 8, 9, 6, 5]
    assert p.positions_N.tolist() == [0, 1, 2, 3, 2, 3, 4, 2, 3]
    assert p.segments_N.tolist() == [-1, -1, 0, 0, 1, 1, 1, 2, 2]
    # target columns 2 and 3 of each row (T = 5), as packed positions of the states that predict them
    assert p.index_BT.tolist() == [[2, 3], [4, 5], [7, 8]]
    # e.g. row 1's tokens 8 and 9 are predicted from its positions 2 and 3: packed 4 and 5
    assert p.ids_N[p.index_BT[1] + 1].tolist() == [8, 9]


def test_pass_groups_by_hand():
    # packed lengths 3, 5, 4 share a pass while rows x longest <= 12: 2 x 5 = 10, then 3 x 5 = 15 > 12
    assert pass_groups([3, 5, 4], 12) == [[0, 1], [2]]
    assert pass_groups([3, 5, 4], 15) == [[0, 1, 2]]
    # an unpacked micro-batch (None) runs alone and ends the pass before it
    assert pass_groups([3, None, 4, 4], 100) == [[0], [1], [2, 3]]
    # budget 0, or one below any pair: one micro-batch per pass; a row longer than the budget still runs
    assert pass_groups([3, 5, 4], 0) == [[0], [1], [2]]
    assert pass_groups([30, 2], 10) == [[0], [1]]
    assert pass_groups([], 10) == []


def test_stack_packings_by_hand():
    c1 = collate([_sample([1, 2, 3], [4]), _sample([1, 2, 7], [8, 9])], pad_id=0)
    c2 = collate([_sample([5, 6], [7]), _sample([5, 6], [8])], pad_id=0)
    p1, p2 = (pack_rows(c, plan_forward(c)) for c in (c1, c2))
    assert [packed_length(c, plan_forward(c)) for c in (c1, c2)] == [7, 5]
    s = stack_packings([p1, p2])
    assert s.ids_GN.tolist() == [[1, 2, 3, 4, 7, 8, 9], [5, 6, 7, 6, 8, 0, 0]]
    assert s.positions_GN.tolist() == [[0, 1, 2, 3, 2, 3, 4], [0, 1, 2, 1, 2, 0, 0]]
    assert s.segments_GN.tolist() == [[-1, -1, 0, 0, 1, 1, 1], [-1, 0, 0, 1, 1, -2, -2]]
    # padding sees the prefix and earlier padding, never a row; no real token sees the padding
    visible = (block_causal_mask(s.segments_GN[1], torch.float32)[0, 0] == 0).int().tolist()
    assert visible[5] == [1, 0, 0, 0, 0, 1, 0] and visible[6] == [1, 0, 0, 0, 0, 1, 1]
    assert all(row[5:] == [0, 0] for row in visible[:5])


def test_block_causal_mask_by_hand():
    m = block_causal_mask(torch.tensor([-1, -1, 0, 0, 1]), torch.float32)[0, 0]
    visible = (m == 0).int().tolist()
    assert visible == [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0],
        [1, 1, 1, 1, 0],
        [1, 1, 0, 0, 1],  # row 1 sees the prefix and itself, not row 0
    ]
    assert float(m.min()) == torch.finfo(torch.float32).min


@pytest.fixture(scope="module")
def tiny():
    """The tiny model in float64. The layouts below are the same math summed in another order, so they are
    compared where rounding is small: in float32 the stacked pass's embedding gradient differed from the
    per-micro-batch passes by 2.3e-5 on an entry of 0.13 (in a row whose entries reach 7.6), which a fixed
    rtol of 1e-4 on each entry refused on this machine. See `assert_same`."""
    loaded = load_model(ModelConfig(name="tiny", seed=0), device="cpu")
    loaded.model.double()
    return loaded


# Relative to a tensor's largest entry, not to each entry: an entry that is a cancelling sum of large terms
# carries their rounding, not its own. In float64 the layouts agree to 4e-8 of that scale with a shared
# prefix (some stage of the model computes in float32 whatever its dtype: 3e-16 without a shared prefix) and
# the stacked pass to 7e-16; a wrong mask, position or row moves results by 1e-3 of it and more.
REL = 1e-6


def assert_same(got: torch.Tensor, want: torch.Tensor, name: str = "") -> None:
    torch.testing.assert_close(got, want, atol=REL * float(want.abs().max()), rtol=0, msg=name or None)


def _batch():
    """A group: one prompt, replies of different lengths (right padding), one with a trailing env block,
    plus a row whose prompt differs late, so the shared prefix stops short of the replies."""
    prompt = [1, 17, 300, 42, 9, 1000, 77, 5, 6]
    other = prompt[:6] + [500, 501, 502, 503]
    return [
        _sample(prompt, [11, 12, 13, 14]),
        _sample(prompt, [21, 22]),
        _sample(prompt, [31, 32, 33], tail=[2, 3]),
        _sample(other, [41, 42, 43, 44, 45]),
    ]


def _plain(model, c):
    logits = model(input_ids=c.input_ids_BT, attention_mask=c.attention_mask_BT).logits[:, :-1]
    return token_logprobs(logits.double(), c.target_ids_BT)


# Every way a micro-batch can go through the network: (share_prefix, layout).
LAYOUTS = {
    "packed": (True, Layout.PACKED),
    "shared-kv": (True, Layout.SHARED_KV),
    "packed-no-prefix": (False, Layout.PACKED),
    "padded": (False, Layout.PADDED),
}


def _plan(c, share: bool, layout: Layout) -> ForwardPlan:
    """The plan's prefix and start, in the given layout whatever the cost estimate prefers (without a
    hidden size the estimate packs: packing never runs more tokens)."""
    plan = plan_forward(c, share_prefix=share)
    assert plan.layout is Layout.PACKED or plan.prefix == 0
    return ForwardPlan(prefix=0 if layout is Layout.PADDED else plan.prefix, start=plan.start, layout=layout)


def _gathered(model, c, share: bool, layout: Layout):
    plan = _plan(c, share, layout)
    logits, sel = trainable_logits(model, c, plan, cache_kwarg(model)), trainable_mask(c, plan)
    targets = c.target_ids_BT[:, plan.start :][sel][None]
    logp = scatter_rows(sel, token_logprobs(logits.double()[None], targets)[0])
    return torch.nn.functional.pad(logp, (c.mask_BT.shape[1] - logp.shape[1], 0))


def _logp_and_grads(model, c, forward):
    """Masked log-probs and the gradients of a row-weighted sum of them (weights of both signs)."""
    model.zero_grad(set_to_none=True)
    logp = forward(model, c) * c.mask_BT
    weights = torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=torch.float64)[: len(logp)]
    (logp * weights[:, None]).sum().backward()
    return logp.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


def _lora(model):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    for n, p in model.named_parameters():  # non-zero B, so the adapter's A gets a gradient too
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.02)
    return model


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("rows", [3, 4], ids=["one-group", "group+other"])
def test_same_logprobs_and_gradients_as_a_plain_forward(tiny, lora, layout, rows):
    model = copy.deepcopy(tiny.model)
    model = _lora(model) if lora else model
    model.eval()
    assert supports_packing(model)
    share, kind = LAYOUTS[layout]
    c = collate(_batch()[:rows], tiny.tokenizer.pad_token_id)
    plan = _plan(c, share, kind)
    assert plan.prefix == (0 if not share or kind is Layout.PADDED else 9 - 1 if rows == 3 else 6)
    ref_logp, ref_grads = _logp_and_grads(model, c, _plain)
    got_logp, got_grads = _logp_and_grads(model, c, lambda m, c: _gathered(m, c, share, kind))
    assert_same(got_logp, ref_logp)
    assert ref_grads.keys() == got_grads.keys() and ref_grads
    for name, g in ref_grads.items():
        assert_same(got_grads[name], g, name)


def _merged(prompt: list[int], turns: list[tuple[list[int], list[int]]]) -> Sample:
    """A merged multi-turn sample: the prompt, then (reply, environment answer) pairs; only replies train."""
    blocks = [Block(Author.ENV, "", prompt)]
    for reply, env in turns:
        blocks.append(Block(Author.LLM, "", reply, [-1.0] * len(reply), True))
        if env:
            blocks.append(Block(Author.ENV, "", env))
    return Sample(Timeline(blocks), "e", "t", 0.0, 1.0)


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_head_at_trainable_targets_only_gives_a_plain_forwards_logprobs_and_gradients(tiny, lora, layout):
    """Merged multi-turn rows (replies interleaved with environment turns) next to plain ones: the LM head
    runs on the gathered trainable positions only, and log-probs and every gradient match a plain forward."""
    model = copy.deepcopy(tiny.model)
    model = _lora(model) if lora else model
    model.eval()
    assert head_parts(model) is not None  # the gathered path runs, not the contiguous fallback
    prompt = [1, 17, 300, 42, 9, 1000, 77]
    rows = [
        _merged(prompt, [([11, 12], [2, 3, 4]), ([13, 14, 15], [5, 6]), ([16], [])]),
        _merged(prompt, [([21], [2, 3]), ([22, 23], [7])]),  # ends in an environment turn
        _sample(prompt, [31, 32, 33]),
        _merged(prompt[:4] + [8, 8], [([41, 42], [9]), ([43], [])]),
    ]
    c = collate(rows, tiny.tokenizer.pad_token_id)
    ref_logp, ref_grads = _logp_and_grads(model, c, _plain)
    got_logp, got_grads = _logp_and_grads(model, c, lambda m, c: _gathered(m, c, *LAYOUTS[layout]))
    assert_same(got_logp, ref_logp)
    assert ref_grads.keys() == got_grads.keys() and ref_grads
    for name, g in ref_grads.items():
        assert_same(got_grads[name], g, name)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_models_that_transform_their_logits_keep_the_full_head_with_the_same_results(tiny, layout):
    """A model whose config says its logits are transformed gets the model's own logits (no gathered head),
    in every layout. The tiny model ignores the soft-capping setting, so a plain forward is the reference."""
    model = copy.deepcopy(tiny.model)
    model.config.final_logit_softcapping = 30.0
    model.eval()
    assert head_parts(model) is None
    c = collate(_batch(), tiny.tokenizer.pad_token_id)
    ref_logp, ref_grads = _logp_and_grads(model, c, _plain)
    got_logp, got_grads = _logp_and_grads(model, c, lambda m, c: _gathered(m, c, *LAYOUTS[layout]))
    assert_same(got_logp, ref_logp)
    for name, g in ref_grads.items():
        assert_same(got_grads[name], g, name)


def test_a_decoder_lookup_that_falls_back_to_the_model_keeps_the_contiguous_head(tiny):
    """transformers' get_decoder() returns the model itself when it finds no decoder: no gathered path."""
    model = copy.deepcopy(tiny.model)
    model.get_decoder = lambda: model
    assert head_parts(model) is None


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("full_head", [False, True], ids=["gathered-head", "full-head"])
def test_micro_batches_stacked_in_one_pass_give_each_ones_logprobs_and_gradients(tiny, lora, full_head):
    """Three packed micro-batches of different packed lengths (padding in the stacked batch), one of them a
    merged multi-turn row pair: one pass gives each micro-batch the log-probs of its own pass, and the
    gradient of a weighted sum over all three is the sum of the three passes' gradients."""
    model = copy.deepcopy(tiny.model)
    model = _lora(model) if lora else model
    if full_head:
        model.config.final_logit_softcapping = 30.0  # the tiny model ignores it: the full-logits path
    model.eval()
    prompt = [1, 17, 300, 42, 9, 1000, 77]
    micros = [
        collate(_batch(), tiny.tokenizer.pad_token_id),
        collate([_sample([3, 4, 5], [6]), _sample([3, 4, 5], [7, 8])], tiny.tokenizer.pad_token_id),
        collate(
            [_merged(prompt, [([11, 12], [2, 3, 4]), ([13], [])]), _sample(prompt, [31, 32, 33])],
            tiny.tokenizer.pad_token_id,
        ),
    ]
    plans = [plan_forward(c) for c in micros]
    assert all(p.layout is Layout.PACKED for p in plans)
    assert len({packed_length(c, p) for c, p in zip(micros, plans, strict=True)}) == 3
    weights = [torch.tensor(w, dtype=torch.float64) for w in ([1.0, -2.0, 0.5, 3.0], [2.0, -1.0], [-0.5, 1.5])]

    def weighted(logits, c, plan, w):
        sel = trainable_mask(c, plan)
        logp = token_logprobs(logits.double()[None], c.target_ids_BT[:, plan.start :][sel][None])[0]
        return (scatter_rows(sel, logp) * w[:, None]).sum(), logp.detach()

    def grads():
        out = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
        model.zero_grad(set_to_none=True)
        return out

    ref_logp = []
    for c, plan, w in zip(micros, plans, weights, strict=True):  # one pass per micro-batch, gradients accumulated
        loss, logp = weighted(trainable_logits(model, c, plan, cache_kwarg(model)), c, plan, w)
        loss.backward()
        ref_logp.append(logp)
    ref_grads = grads()
    stacked = trainable_logits_stacked(model, micros, plans)
    parts = [weighted(lg, c, plan, w) for lg, c, plan, w in zip(stacked, micros, plans, weights, strict=True)]
    torch.stack([loss for loss, _ in parts]).sum().backward()
    got_grads = grads()
    for (_, got), want in zip(parts, ref_logp, strict=True):
        assert_same(got, want)
    assert ref_grads.keys() == got_grads.keys() and ref_grads
    for name, g in ref_grads.items():
        assert_same(got_grads[name], g, name)
