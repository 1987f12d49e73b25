"""Prefix caching in the torch engine: exact against the uncached path (same tokens under greedy and
seeded sampling, log-probs within a tolerance derived from float32 and the sums behind a logit), never
stale across weight updates, bounded by its budget.

The tolerance: a float32 sum of n terms computed in another order (another matmul shape, which is all the
cache changes) differs by at most gamma_n = n*u / (1 - n*u) times the sum of the terms' magnitudes
(u = 2^-24, Higham's bound). The sums chained on the way to one logit are, per layer, the q/k/v and
output projections (hidden size d each), the attention scores (head_dim) and the weighted sum of values
(up to T positions), the MLP's gate/up (d) and down projection (intermediate size), then the LM head (d).
RMSNorm rescales between them, so their relative errors add: N = layers * (4d + head_dim + T + d_ff) + d.
The LM head's magnitude sum is sum_i |h_i W_vi| <= ||h|| ||W_v|| <= sqrt(d) max|g| max_v ||W_v|| for the
normed hidden state h = g * x / rms(x). A log-prob z_t - logsumexp(z) moves by at most twice a logit's error.
"""

from __future__ import annotations

import asyncio
import copy
import math
from dataclasses import replace

import pytest
import torch

from engine.backends.base import SamplingParams
from engine.backends.torch import TorchInferenceEngine
from engine.backends.torch.prefix_cache import PrefixCache, common_prefix_length, weights_version

U32 = torch.finfo(torch.float32).eps / 2  # unit roundoff 2^-24
CACHE = 64 << 20


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=120))


def gamma(n: int, u: float = U32) -> float:
    """Higham's gamma_n: relative error bound of an n-term floating-point sum in any order."""
    return n * u / (1 - n * u)


def chained_sum_length(layers: int, hidden: int, head_dim: int, intermediate: int, context: int) -> int:
    """Terms summed along the path to one logit of a Llama-style decoder (see the module docstring)."""
    return layers * (4 * hidden + head_dim + context + intermediate) + hidden


def logprob_tolerance(model, context: int) -> float:
    """Largest |cached - uncached| log-prob difference float32 rounding can make at `context` tokens."""
    model = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft
    c = model.config
    n = chained_sum_length(
        c.num_hidden_layers,
        c.hidden_size,
        c.hidden_size // c.num_attention_heads,
        c.intermediate_size,
        context,
    )
    head = model.get_output_embeddings().weight.float()
    norm_gain = model.model.norm.weight.float().abs().max().item()
    magnitude = math.sqrt(c.hidden_size) * norm_gain * head.norm(dim=-1).max().item()
    return 2 * gamma(n) * magnitude


def test_gamma_and_sum_length_by_hand():
    assert gamma(1000) == pytest.approx(1000 * 2**-24 / (1 - 1000 * 2**-24), rel=1e-12)
    assert gamma(1000) == pytest.approx(5.9608e-5, rel=1e-4)
    # tiny: 2 layers, d=64, head_dim=16, d_ff=128, 100 positions: 2 * (256 + 16 + 100 + 128) + 64
    assert chained_sum_length(2, 64, 16, 128, 100) == 1064


def test_common_prefix_length_by_hand():
    t = lambda *xs: torch.tensor(xs)  # noqa: E731
    assert common_prefix_length(t(1, 2, 3), t(1, 2, 4, 5)) == 2
    assert common_prefix_length(t(1, 2), t(1, 2, 3)) == 2
    assert common_prefix_length(t(9), t(1, 2)) == 0


def _kv(n: int, fill: float = 1.0):
    """One layer's keys and values [H=1, n, D=2] in float32: 16 bytes a token."""
    return [torch.full((1, n, 2), fill)], [torch.full((1, n, 2), fill)]


def test_match_caps_at_all_but_the_last_token_and_reuses_part_of_an_entry():
    cache = PrefixCache(1 << 20)
    cache.insert([1, 2, 3, 4], *_kv(4))
    entry, n = cache.match([1, 2, 3, 4])
    assert n == 3  # the last prompt token must still run: its logits pick the first reply token
    assert cache.match([1, 2, 9])[1] == 2  # a leading part of a longer entry
    assert cache.match([7, 1, 2]) == (None, 0)
    assert (cache.stats.lookups, cache.stats.hits, cache.stats.reused_tokens) == (3, 2, 5)


def test_an_extending_entry_replaces_the_one_it_extends():
    cache = PrefixCache(1 << 20)
    cache.insert([1, 2, 3], *_kv(3))
    cache.insert([1, 2, 3, 4, 5], *_kv(5))  # the next call of an episode: prompt + reply
    assert len(cache) == 1 and cache.nbytes == 5 * 16
    cache.insert([1, 2], *_kv(2))  # already inside the held entry: not stored twice
    assert len(cache) == 1 and cache.nbytes == 5 * 16


def test_eviction_keeps_the_budget_and_drops_the_least_recently_used():
    cache = PrefixCache(10 * 16)  # ten tokens of the 16-byte test layout
    cache.insert([1, 1, 1, 1], *_kv(4))
    cache.insert([2, 2, 2, 2], *_kv(4))
    cache.match([1, 1, 1, 1, 5])  # touch [1,...]: [2,...] is now the oldest
    cache.insert([3, 3, 3, 3], *_kv(4))
    assert cache.nbytes == 8 * 16 <= cache.budget_bytes and cache.stats.evictions == 1
    assert cache.match([2, 2, 2, 9])[1] == 0 and cache.match([1, 1, 9])[1] == 2
    cache.insert(list(range(20)), *_kv(20))  # bigger than the whole budget: never stored
    assert cache.nbytes == 8 * 16


def test_weights_version_moves_on_in_place_updates_and_new_parameters():
    lin = torch.nn.Linear(2, 2)
    before = weights_version(lin)
    with torch.no_grad():
        lin.weight.add_(1.0)
    assert weights_version(lin) != before
    now = weights_version(lin)
    lin.bias = torch.nn.Parameter(torch.zeros(2))
    assert weights_version(lin) != now


# -- the engine, cached against uncached -------------------------------------------------------------


@pytest.fixture
def engines(tiny):
    plain = TorchInferenceEngine.from_loaded(tiny)
    cached = TorchInferenceEngine.from_loaded(tiny, prefix_cache_bytes=CACHE)
    yield plain, cached
    plain.close()
    cached.close()


def _assert_same(model, prompt, a, b):
    assert b.token_ids == a.token_ids
    assert (b.finish_reason, b.text) == (a.finish_reason, a.text)
    tol = logprob_tolerance(model, len(prompt) + len(a.token_ids))
    assert len(b.logprobs) == len(a.logprobs)
    diff = max((abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)), default=0.0)
    assert diff <= tol, f"log-probs differ by {diff:.3g} > derived bound {tol:.3g}"


async def _episode(eng, first_prompt, calls, params):
    """A multi-turn episode: every call re-sends the history (prompt + reply + a tool's answer)."""
    prompt, out = list(first_prompt), []
    for k in range(calls):
        (c,) = await eng.generate(
            prompt, replace(params, seed=None if params.seed is None else params.seed + k)
        )
        out.append((list(prompt), c))
        prompt = prompt + c.token_ids + [28, 5 + k, 29, 198]  # the tool's reply, as a chat template would add
    return out


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(max_new_tokens=10, temperature=0.0),
        SamplingParams(max_new_tokens=10, temperature=1.0, top_p=0.9, seed=5),
    ],
    ids=["greedy", "seeded"],
)
def test_a_multi_turn_episode_reuses_its_history_and_matches_the_uncached_path(
    tiny, engines, prompts, params
):
    plain, cached = engines
    ref = run(_episode(plain, prompts[1], 5, params))
    got = run(_episode(cached, prompts[1], 5, params))
    for (prompt, a), (_, b) in zip(ref, got, strict=True):
        _assert_same(tiny.model, prompt, a, b)
    stats = cached.prefix_cache.stats
    assert stats.hits == 4  # every call after the first
    # Calls 2..5 ran only what is new since the last call: the last reply token + the tool's 4 tokens.
    assert cached.stats.prefill_tokens == len(ref[0][0]) + sum(5 for _ in ref[1:])
    assert plain.stats.prefill_tokens == sum(len(p) for p, _ in ref)


def test_identical_prompts_in_later_waves_reuse_the_first_prefill(tiny, engines, prompts):
    """A GRPO group whose calls arrive in several admission waves: the first wave's prompt KV serves the
    rest. Within one wave identical prompts already share one prefill row (with or without the cache)."""
    seeds = [SamplingParams(max_new_tokens=8, temperature=1.0, seed=s) for s in range(6)]
    group = [prompts[3]] * 3 + [prompts[1]] * 3

    async def waves(eng):
        first = await asyncio.gather(
            *[eng.generate(p, s) for p, s in zip(group[::2], seeds[::2], strict=True)]
        )
        second = await asyncio.gather(
            *[eng.generate(p, s) for p, s in zip(group[1::2], seeds[1::2], strict=True)]
        )
        return [c for (c,) in first + second]

    ref, got = run(waves(plain := engines[0])), run(waves(engines[1]))
    order = group[::2] + group[1::2]
    for prompt, a, b in zip(order, ref, got, strict=True):
        _assert_same(tiny.model, prompt, a, b)
    # The second wave's two distinct prompts each reuse all but their last token.
    assert engines[1].prefix_cache.stats.hits == 2
    assert engines[1].prefix_cache.stats.reused_tokens == len(prompts[3]) - 1 + len(prompts[1]) - 1
    assert (
        engines[1].stats.prefill_tokens
        == plain.stats.prefill_tokens - engines[1].prefix_cache.stats.reused_tokens
    )


def test_logprobs_keep_their_meaning_under_the_cache(tiny, engines, prompts):
    """What the server records for training (untempered log_softmax at the sampled ids) is still what a
    plain teacher-forced forward gives, for calls whose prompt came mostly from the cache."""
    _, cached = engines
    params = SamplingParams(max_new_tokens=8, temperature=0.8, seed=2)
    episode = run(_episode(cached, prompts[1], 3, params))
    assert cached.prefix_cache.stats.hits == 2
    for prompt, c in episode:
        ids = torch.tensor([prompt + c.token_ids])
        with torch.no_grad():
            logp = torch.log_softmax(tiny.model(ids).logits[0].float(), dim=-1)
        ref = logp[len(prompt) - 1 : -1].gather(-1, torch.tensor(c.token_ids)[:, None]).squeeze(-1)
        diff = (torch.tensor(c.logprobs) - ref).abs().max().item()
        assert diff <= logprob_tolerance(tiny.model, ids.shape[1])


def test_no_cache_hit_survives_a_weight_update(tiny, engines, prompts):
    """The trainer mutates the module between pause() and resume(): the next call must not reuse KV
    computed with the old weights, and must decode exactly as the uncached engine does with the new ones."""
    plain, cached = engines
    params = SamplingParams(max_new_tokens=10, temperature=0.0)
    norm = tiny.model.model.layers[0].input_layernorm.weight

    async def after_update(eng):
        await eng.generate(prompts[1], params)
        await eng.pause()
        # Through .data, which bypasses the version counter: only resume()'s invalidation can catch it.
        norm.data.mul_(-1.0)  # changes every layer-0 key and value
        eng.resume()
        return (await eng.generate(prompts[1], params))[0]

    try:
        got = run(after_update(cached))
        assert cached.prefix_cache.stats.hits == 0 and cached.prefix_cache.stats.invalidations == 1
        with torch.no_grad():
            norm.mul_(-1.0)
        ref = run(after_update(plain))
    finally:
        with torch.no_grad():
            norm.mul_(-1.0)
    _assert_same(tiny.model, prompts[1], ref, got)


def test_an_in_place_update_without_pause_also_invalidates(tiny, engines, prompts):
    """Second guard: weights changed behind the engine's back (no pause/resume) still empty the cache."""
    _, cached = engines
    params = SamplingParams(max_new_tokens=6, temperature=0.0)
    norm = tiny.model.model.layers[0].input_layernorm.weight
    run(cached.generate(prompts[1], params))
    assert len(cached.prefix_cache) > 0
    try:
        with torch.no_grad():
            norm.mul_(-1.0)
        run(cached.generate(prompts[1], params))
    finally:
        with torch.no_grad():
            norm.mul_(-1.0)
    assert cached.prefix_cache.stats.hits == 0 and cached.prefix_cache.stats.invalidations == 1


def test_a_small_budget_evicts_and_stays_exact(tiny, prompts):
    """A budget of about two episodes' worth of KV: old prefixes are evicted, memory stays under it."""
    per_token = 2 * tiny.model.config.num_hidden_layers * 2 * 16 * 4  # keys+values, 2 kv heads x 16 dims, f32
    budget = 160 * per_token
    plain = TorchInferenceEngine.from_loaded(tiny)
    cached = TorchInferenceEngine.from_loaded(tiny, prefix_cache_bytes=budget)
    params = SamplingParams(max_new_tokens=8, temperature=0.0)
    try:

        async def several(eng):
            out = []
            for p in prompts[:2] + prompts[3:]:
                out += await _episode(eng, p, 3, params)
                if eng.prefix_cache is not None:
                    assert eng.prefix_cache.nbytes <= budget
            return out

        ref, got = run(several(plain)), run(several(cached))
    finally:
        plain.close()
        cached.close()
    for (prompt, a), (_, b) in zip(ref, got, strict=True):
        _assert_same(tiny.model, prompt, a, b)
    assert cached.prefix_cache.stats.evictions > 0 and cached.prefix_cache.stats.hits > 0


def test_a_lora_model_is_cached_and_an_adapter_update_invalidates(tiny, prompts):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(
        copy.deepcopy(tiny.model),
        LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False),
    )
    model.eval()
    plain = TorchInferenceEngine(model, tiny.tokenizer, stop_token_ids=tiny.end_of_turn_ids)
    cached = TorchInferenceEngine(
        model, tiny.tokenizer, stop_token_ids=tiny.end_of_turn_ids, prefix_cache_bytes=CACHE
    )
    params = SamplingParams(max_new_tokens=8, temperature=0.9, seed=3)
    lora = next(p for n, p in model.named_parameters() if "lora_B" in n)
    try:
        ref, got = run(_episode(plain, prompts[1], 3, params)), run(_episode(cached, prompts[1], 3, params))
        for (prompt, a), (_, b) in zip(ref, got, strict=True):
            _assert_same(model, prompt, a, b)
        hits = cached.prefix_cache.stats.hits
        assert hits == 2
        with torch.no_grad():
            lora.add_(0.5)  # an adapter step: the base weights are untouched
        run(cached.generate(prompts[1], params))
        assert cached.prefix_cache.stats.hits == hits and cached.prefix_cache.stats.invalidations == 1
    finally:
        plain.close()
        cached.close()


def test_the_backend_turns_the_cache_off_for_batch_invariant_runs():
    from engine.backends.torch.backend import TorchBackend
    from engine.config import SwarmConfig

    on = TorchBackend(SwarmConfig.model_validate({"inference": {"prefix_cache_mib": 8}}))
    off = TorchBackend(
        SwarmConfig.model_validate({"inference": {"prefix_cache_mib": 8, "batch_invariant": True}})
    )
    try:
        assert on.inference.prefix_cache is not None and on.inference.prefix_cache.budget_bytes == 8 << 20
        assert off.inference.prefix_cache is None
    finally:
        on.close()
        off.close()


def test_cached_rows_join_a_running_batch_with_n_choices_and_stop_strings(tiny, engines, prompts):
    """Cache hits whose prefill (past + holes in the mask) joins rows already decoding, with n > 1 choices
    expanded from one prefill row and a stop string: still what the uncached engine produces."""
    long = SamplingParams(max_new_tokens=20, temperature=0.0)
    joiners = [
        (prompts[1] + [28, 5, 29], SamplingParams(max_new_tokens=6, temperature=1.0, n=2, seed=7)),
        (prompts[3], SamplingParams(max_new_tokens=9, temperature=1.0, seed=8, stop=("a",))),
    ]

    async def main(eng):
        warm = [
            (await eng.generate(p, SamplingParams(max_new_tokens=3, temperature=0.0)))[0]
            for p in prompts[1::2]
        ]
        loop = asyncio.get_running_loop()
        started, seen = asyncio.Event(), []

        def on_token(i, tok):
            seen.append(tok)
            if len(seen) == 6:
                loop.call_soon_threadsafe(started.set)

        first = asyncio.create_task(eng.generate(prompts[0], long, on_token=on_token))
        await started.wait()
        later = await asyncio.gather(*[eng.generate(p, s) for p, s in joiners])
        return warm + (await first) + [c for choices in later for c in choices]

    ref, got = run(main(engines[0])), run(main(engines[1]))
    order = list(prompts[1::2]) + [prompts[0]] + [joiners[0][0]] * 2 + [joiners[1][0]]
    for prompt, a, b in zip(order, ref, got, strict=True):
        _assert_same(tiny.model, prompt, a, b)
    assert engines[1].prefix_cache.stats.hits >= 2 and engines[1].stats.max_rows >= 3


def test_the_server_records_the_same_tokens_and_logprobs_with_the_cache(live_server):
    """Through the real server (chat template, exact_history, tracking): a 3-call episode records the same
    tokens and, within the derived bound, the same per-token log-probs with the cache as without."""
    from engine.config import SwarmConfig

    def episode(srv) -> list[dict]:
        with srv.client() as c:
            ep = c.begin_episode("multi-turn")
            llm, msgs = ep.openai(), [{"role": "user", "content": "What is 2 + 3?"}]
            for k in range(3):
                out = llm.chat.completions.create(model="tiny", messages=msgs, max_tokens=6, temperature=0)
                msgs += [
                    {"role": "assistant", "content": out.choices[0].message.content},
                    {"role": "user", "content": f"And plus {k}?"},
                ]
            ep.end(1.0)
            token = c._http.headers["Authorization"][7:]
            pool = c._http.get(srv.url + "/swarm/pool/episodes", headers={"Authorization": f"Bearer {token}"})
        (recorded,) = pool.json()["episodes"]
        return [b for tl in recorded["timelines"] for b in tl["blocks"]]

    plain = live_server(SwarmConfig())
    cached = live_server(SwarmConfig(inference={"prefix_cache_mib": 16}))
    ref, got = episode(plain), episode(cached)
    assert cached.server.backend.inference.prefix_cache.stats.hits == 2  # calls 2 and 3
    assert [b["token_ids"] for b in got] == [b["token_ids"] for b in ref]
    model = cached.server.backend.model
    tol = logprob_tolerance(model, sum(len(b["token_ids"]) for b in ref))
    for a, b in zip(ref, got, strict=True):
        assert (a["logprobs"] is None) == (b["logprobs"] is None)
        if a["logprobs"] is not None:
            assert max(abs(x - y) for x, y in zip(a["logprobs"], b["logprobs"], strict=True)) <= tol
