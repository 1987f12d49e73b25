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


def test_growing_layer_reallocates_after_row_surgery_and_keeps_old_views():
    """Row selection replaces keys/values with new tensors: the next update copies them into a fresh
    buffer rather than writing into the stale one, and a view returned earlier keeps its values."""
    layer = kv.GrowingLayer()
    k0, v0 = torch.randn(3, 2, 5, 4), torch.randn(3, 2, 5, 4)
    keys, _ = layer.update(k0, v0)
    earlier = keys.clone()
    step_k, step_v = torch.randn(3, 2, 1, 4), torch.randn(3, 2, 1, 4)
    keys2, values2 = layer.update(step_k, step_v)
    assert torch.equal(keys, earlier)
    assert torch.equal(keys2, torch.cat([k0, step_k], dim=2))
    assert torch.equal(values2, torch.cat([v0, step_v], dim=2))
    index = torch.tensor([2, 0])
    layer.keys, layer.values = layer.keys.index_select(0, index), layer.values.index_select(0, index)
    k3, v3 = torch.randn(2, 2, 1, 4), torch.randn(2, 2, 1, 4)
    keys3, values3 = layer.update(k3, v3)
    assert torch.equal(keys3, torch.cat([keys2.index_select(0, index), k3], dim=2))
    assert torch.equal(values3, torch.cat([values2.index_select(0, index), v3], dim=2))
