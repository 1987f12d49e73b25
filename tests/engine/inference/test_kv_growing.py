"""GrowingLayer: the decode batch's KV cache grows in place, and decodes exactly as the torch.cat cache did."""

from __future__ import annotations

import asyncio

import pytest
import torch
from transformers import DynamicCache

from engine.backends.base import SamplingParams
from engine.backends.torch import TorchInferenceEngine, kv
from engine.backends.torch.batch import DecodeBatch, GenerationStats, Request
from engine.models.tokens import ensure_pad_token


def _decode_all(tiny, prompts, params):
    """Every prompt with every params, all concurrent: rows join (prefills) and leave at different steps."""
    eng = TorchInferenceEngine.from_loaded(tiny)

    async def main():
        calls = [eng.generate(p, s) for s in params for p in prompts]
        return await asyncio.wait_for(asyncio.gather(*calls), timeout=120)

    try:
        return [c for choices in asyncio.run(main()) for c in choices]
    finally:
        eng.close()


def test_decode_matches_the_concatenating_cache(tiny, prompts, monkeypatch):
    """The old path (transformers' DynamicCache, torch.cat per token) against GrowingLayer: same tokens,
    greedy and seeded, and the same log-probs. Rows of different lengths join and leave the batch, so the
    reallocations after row surgery are covered too."""
    params = [
        SamplingParams(max_new_tokens=20, temperature=0.0),
        SamplingParams(max_new_tokens=7, temperature=1.0, seed=3, n=2),
        SamplingParams(max_new_tokens=45, temperature=0.8, top_p=0.9, seed=5),
    ]
    new = _decode_all(tiny, prompts, params)
    monkeypatch.setattr(kv, "growing_cache", DynamicCache)
    old = _decode_all(tiny, prompts, params)
    assert [c.token_ids for c in new] == [c.token_ids for c in old]
    for a, b in zip(new, old, strict=True):
        # The same values are summed in the same order (only the KV's head stride differs), so the
        # tolerance is float32 rounding of a log-softmax over the vocabulary, not a looser bound.
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5, rel=1e-6)


def test_decode_steps_write_the_cache_in_place(tiny, prompts):
    """While no row joins or leaves, a decode step adds its column into the same buffers: no layer's
    keys or values are reallocated (torch.cat copied the whole cache, per layer, every token)."""
    model, tok = tiny.model, tiny.tokenizer
    batch = DecodeBatch(model, tok, set(), ensure_pad_token(tok), GenerationStats())
    loop = asyncio.new_event_loop()
    try:
        params = SamplingParams(max_new_tokens=30, temperature=1.0, n=3)
        req = Request(prompts[1], params, [1, 2, 3], loop, loop.create_future())
        batch.step([req], set())  # prefill and one decode pass: two tokens
        layers = list(kv._layers(batch.cache))
        assert layers
        first = [(layer.keys.data_ptr(), layer.values.data_ptr()) for layer in layers]
        length = layers[0].keys.shape[-2]
        for step in range(1, 28):
            assert not batch.step([], set())  # no row finishes before max_new_tokens
            assert [(layer.keys.data_ptr(), layer.values.data_ptr()) for layer in layers] == first
            assert layers[0].keys.shape[-2] == length + step
        assert batch.step([], set()) == [req]
    finally:
        loop.close()


def test_row_surgery_on_a_growing_cache_matches_the_concatenating_cache():
    """select_rows, trim_left and rows replaced from outside (concat_rows), each followed by updates, give
    the same keys/values as DynamicCache; selection and trimming reuse the buffer (no reallocation on the
    next update), and a view returned earlier keeps its values."""
    torch.manual_seed(0)
    grow, plain = kv.growing_cache(), DynamicCache()

    def update(rows: int, cols: int = 1) -> None:
        k, v = torch.randn(rows, 2, cols, 4), torch.randn(rows, 2, cols, 4)
        for cache in (grow, plain):
            cache.update(k, v, 0)
        assert torch.equal(grow.layers[0].keys, plain.layers[0].keys)
        assert torch.equal(grow.layers[0].values, plain.layers[0].values)

    update(3, cols=5)
    layer = grow.layers[0]
    earlier, earlier_copy = layer.keys, layer.keys.clone()
    update(3)
    assert torch.equal(earlier, earlier_copy)
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 1, 1]])
    index = torch.tensor([2, 0])
    masks = [kv.select_rows(cache, mask, index) for cache in (grow, plain)]
    buffer = layer._kbuf.data_ptr()
    update(2)
    assert layer._kbuf.data_ptr() == buffer  # selected in the buffer: the update wrote in place
    masks = [torch.nn.functional.pad(m, (0, 1), value=1) for m in masks]
    trimmed = [kv.trim_left(cache, m) for cache, m in zip((grow, plain), masks, strict=True)]
    assert trimmed[0].shape[1] == 6  # one leading column was padding in both rows
    update(2)
    assert layer._kbuf.data_ptr() == buffer  # trimmed as a view of the buffer
    extra_k, extra_v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    for cache in (grow, plain):
        other = DynamicCache()
        other.update(extra_k, extra_v, 0)
        kv.concat_rows(cache, trimmed[0], other, torch.ones(1, 3, dtype=torch.long))
    update(3)
    assert layer._kbuf.data_ptr() != buffer  # replaced from outside: reallocated, not written into
    for _ in range(40):  # past the spare capacity: reallocates and keeps every column
        update(3)
