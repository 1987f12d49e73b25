"""TorchInferenceEngine on the tiny model: batching equals unbatched decoding, exact logprobs, stops,
seeds, continuous joins, pause/resume around in-place weight updates, cancellation."""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch

from engine.backends.base import SamplingParams
from engine.backends.torch import TorchInferenceEngine
from engine.errors import BadRequest

GREEDY = SamplingParams(max_new_tokens=12, temperature=0.0)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


@pytest.fixture
def engine(tiny):
    eng = TorchInferenceEngine.from_loaded(tiny)
    yield eng
    eng.close()


async def _sequential(eng, prompts, params):
    return [(await eng.generate(p, params))[0] for p in prompts]


def teacher_forced_logprobs(model, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """log_softmax of one unpadded forward pass over prompt + completion, at the completion's ids."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
    return logp[len(prompt) - 1 : -1].gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)


def test_batched_greedy_equals_unbatched_with_padding(engine, prompts):
    async def main():
        seq = await _sequential(engine, prompts, GREEDY)
        before = engine.stats.forward_passes
        batched = await asyncio.gather(*[engine.generate(p, GREEDY) for p in prompts])
        return seq, batched, engine.stats.forward_passes - before

    seq, batched, passes = run(main())
    assert len({len(p) for p in prompts}) == len(prompts)  # really different lengths -> left padding
    for a, (b,) in zip(seq, batched, strict=True):
        assert b.token_ids == a.token_ids
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-4)
        assert (b.finish_reason, b.text) == (a.finish_reason, a.text)
    assert passes == GREEDY.max_new_tokens  # one prefill + 11 decode passes for the whole batch


def test_rows_joining_and_leaving_a_running_batch_match_unbatched(engine, prompts):
    """Continuous batching: requests join mid-decode (shorter and longer than the running cache) and
    short requests leave early; every row must still decode exactly as it would alone."""
    long = SamplingParams(max_new_tokens=24, temperature=0.0)
    short = SamplingParams(max_new_tokens=5, temperature=0.0)

    async def main():
        solo = [(await engine.generate(prompts[0], long))[0]]
        solo += await _sequential(engine, prompts[1:], short)
        loop = asyncio.get_running_loop()
        started = asyncio.Event()
        seen = []

        def on_token(i, tok):
            seen.append(tok)
            if len(seen) == 6:
                loop.call_soon_threadsafe(started.set)

        first = asyncio.create_task(engine.generate(prompts[0], long, on_token=on_token))
        await started.wait()
        later = await asyncio.gather(*[engine.generate(p, short) for p in prompts[1:]])
        return solo, [(await first)[0]] + [c for (c,) in later]

    solo, mixed = run(main())
    for a, b in zip(solo, mixed, strict=True):
        assert b.token_ids == a.token_ids
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-4)
    assert engine.stats.max_rows == len(prompts)


def test_logprobs_match_teacher_forced_forward(engine, tiny, prompts):
    """Recorded logprobs are untempered log_softmax values, even when sampling with temperature/top-p."""
    params = SamplingParams(max_new_tokens=16, temperature=0.7, top_p=0.9, n=2, seed=11)

    async def main():
        return await asyncio.gather(*[engine.generate(p, params) for p in prompts])

    for prompt, choices in zip(prompts, run(main()), strict=True):
        for c in choices:
            assert len(c.logprobs) == len(c.token_ids)
            ref = teacher_forced_logprobs(tiny.model, prompt, c.token_ids)
            assert torch.allclose(torch.tensor(c.logprobs), ref, atol=1e-4)


def test_concurrent_requests_share_forward_passes(engine, prompts):
    params = SamplingParams(max_new_tokens=10, temperature=1.0, seed=1)
    many = [prompts[i % len(prompts)] for i in range(8)]

    async def main():
        return await asyncio.gather(*[engine.generate(p, params) for p in many])

    results = run(main())
    assert all(len(c.token_ids) == 10 for (c,) in results)
    sequential_passes = 8 * params.max_new_tokens  # each alone: 1 prefill + 9 decode passes
    assert engine.stats.forward_passes == params.max_new_tokens < sequential_passes
    assert engine.stats.max_rows == 8


def test_identical_prompts_in_separate_calls_are_prefilled_once(engine, prompts):
    """A GRPO group arrives as G separate calls with one prompt: one prefill row for it, and every
    row still samples exactly what it samples alone (same seed, same tokens and logprobs)."""
    params = [SamplingParams(max_new_tokens=8, temperature=1.0, seed=s) for s in range(4)]
    group = [(prompts[1], p) for p in params] + [(prompts[3], p) for p in params[:2]]

    async def main():
        alone = [(await engine.generate(prompt, p))[0] for prompt, p in group]
        engine.stats.reset()
        together = await asyncio.gather(*[engine.generate(prompt, p) for prompt, p in group])
        return alone, [c for (c,) in together]

    alone, together = run(main())
    assert (engine.stats.prefill_passes, engine.stats.prefill_rows) == (1, 2)  # one row per distinct prompt
    for a, b in zip(alone, together, strict=True):
        assert b.token_ids == a.token_ids
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-4)


def test_sequential_mode_runs_one_row_at_a_time(tiny, prompts):
    eng = TorchInferenceEngine.from_loaded(tiny, max_batch_rows=1)
    try:

        async def main():
            return await asyncio.gather(*[eng.generate(p, GREEDY) for p in prompts])

        run(main())
        assert eng.stats.max_rows == 1
        assert eng.stats.forward_passes == len(prompts) * GREEDY.max_new_tokens
    finally:
        eng.close()


def test_stop_string_cuts_text_and_finishes_with_stop(engine, prompts):
    base = run(engine.generate(prompts[1], SamplingParams(max_new_tokens=20, temperature=0)))[0]
    assert len(base.text) > 12
    stop = base.text[6:10]
    cut = run(
        engine.generate(prompts[1], SamplingParams(max_new_tokens=20, temperature=0, stop=("@@never", stop)))
    )[0]
    assert cut.finish_reason == "stop"
    assert cut.text == base.text[: base.text.index(stop)]
    assert stop not in cut.text
    # Every sampled token is kept (up to the one completing the stop string), so the trainer sees them.
    assert cut.token_ids == base.token_ids[: len(cut.token_ids)]
    assert len(cut.logprobs) == len(cut.token_ids) < len(base.token_ids)


def test_max_new_tokens_finishes_with_length(engine, prompts):
    (c,) = run(engine.generate(prompts[0], SamplingParams(max_new_tokens=7, temperature=1.0, seed=0)))
    assert c.finish_reason == "length"
    assert len(c.token_ids) == len(c.logprobs) == 7


def test_end_of_turn_token_is_kept_in_ids_but_not_text(tiny, prompts):
    params = SamplingParams(max_new_tokens=10, temperature=0)
    plain = TorchInferenceEngine.from_loaded(tiny)
    try:
        ref = run(plain.generate(prompts[0], params))[0].token_ids
    finally:
        plain.close()
    # Declare a later greedy token an end-of-turn token: decoding must stop right after sampling it.
    k = next(i for i in range(2, len(ref)) if ref[i] not in ref[:i])
    eng = TorchInferenceEngine.from_loaded(tiny, stop_token_ids=[ref[k]])
    try:
        (c,) = run(eng.generate(prompts[0], params))
    finally:
        eng.close()
    assert c.finish_reason == "stop"
    assert c.token_ids == ref[: k + 1]
    assert c.text == tiny.tokenizer.decode(ref[:k], skip_special_tokens=True)
    assert 2 in tiny.end_of_turn_ids  # <|im_end|> ends turns of the real chat template


def test_seeded_sampling_is_reproducible_and_batch_independent(engine, prompts):
    params = SamplingParams(max_new_tokens=12, temperature=1.0, top_p=0.95, n=3, seed=42)

    async def main():
        alone = await engine.generate(prompts[1], params)
        crowd = await asyncio.gather(
            engine.generate(prompts[0], SamplingParams(max_new_tokens=5, temperature=1.0)),
            engine.generate(prompts[1], params),
            engine.generate(prompts[2], params),
        )
        other_seed = await engine.generate(
            prompts[1], SamplingParams(max_new_tokens=12, temperature=1.0, n=1, seed=43)
        )
        return alone, crowd[1], other_seed

    alone, in_batch, other_seed = run(main())
    assert [c.token_ids for c in alone] == [c.token_ids for c in in_batch]
    assert len({tuple(c.token_ids) for c in alone}) == 3  # the n choices are different samples
    assert other_seed[0].token_ids != alone[0].token_ids


def test_on_token_streams_every_sampled_token_in_order(engine, prompts):
    streamed: dict[int, list[int]] = {}
    params = SamplingParams(max_new_tokens=9, temperature=1.0, n=2, seed=5)
    choices = run(
        engine.generate(prompts[3], params, on_token=lambda i, t: streamed.setdefault(i, []).append(t))
    )
    assert streamed == {i: c.token_ids for i, c in enumerate(choices)}


def test_pause_drains_running_rows_and_holds_new_requests(engine, tiny, prompts):
    params = SamplingParams(max_new_tokens=20, temperature=0)

    async def main():
        loop = asyncio.get_running_loop()
        running = asyncio.Event()
        before_update = await engine.generate(prompts[1], params)
        first = asyncio.create_task(
            engine.generate(prompts[0], params, on_token=lambda i, t: loop.call_soon_threadsafe(running.set))
        )
        await running.wait()
        await engine.pause()
        assert first.done() and len(first.result()[0].token_ids) == 20  # running rows were finished
        passes = engine.stats.forward_passes
        held = asyncio.create_task(engine.generate(prompts[1], params))
        await asyncio.sleep(0.3)
        assert not held.done() and engine.stats.forward_passes == passes  # held: no forward pass at all
        # The trainer mutates the shared module in place while paused ...
        with torch.no_grad():
            tiny.model.model.norm.weight.mul_(-1.0)
        try:
            engine.resume()
            after_update = await held
        finally:
            with torch.no_grad():
                tiny.model.model.norm.weight.mul_(-1.0)
        return before_update, after_update

    before, after = run(main())
    # ... and the first step after resume already decodes with the new weights.
    assert before[0].token_ids != after[0].token_ids


def test_resume_from_another_thread_releases_requests(engine, prompts):
    async def main():
        await engine.pause()
        held = asyncio.create_task(engine.generate(prompts[0], GREEDY))
        await asyncio.sleep(0.05)
        assert not held.done()
        t = threading.Thread(target=engine.resume)
        t.start()
        t.join()
        return await held

    assert len(run(main())[0].token_ids) == GREEDY.max_new_tokens


def test_cancelled_request_leaves_the_batch_and_others_continue(engine, prompts):
    long = SamplingParams(max_new_tokens=400, temperature=0)

    async def main():
        loop = asyncio.get_running_loop()
        going = asyncio.Event()
        doomed = asyncio.create_task(
            engine.generate(prompts[0], long, on_token=lambda i, t: loop.call_soon_threadsafe(going.set))
        )
        await going.wait()
        doomed.cancel()
        survivor = await engine.generate(prompts[1], GREEDY)
        await engine.pause()  # returns only once no row is running: the cancelled rows are gone
        return doomed, survivor

    doomed, survivor = run(main())
    assert doomed.cancelled()
    assert len(survivor[0].token_ids) == GREEDY.max_new_tokens
    assert len(engine._batch) == 0
    assert engine.stats.tokens_generated < 400


def test_event_loop_stays_responsive_during_generation(engine, prompts):
    async def main():
        ticks = 0
        task = asyncio.create_task(
            engine.generate(prompts[1], SamplingParams(max_new_tokens=60, temperature=0))
        )
        while not task.done():
            ticks += 1
            await asyncio.sleep(0.001)
        return ticks

    assert run(main()) > 3


@pytest.mark.parametrize(
    "prompt, params",
    [
        ([], SamplingParams()),
        ([1, 2], SamplingParams(n=0)),
        ([1, 2], SamplingParams(max_new_tokens=0)),
        ([1, 2], SamplingParams(top_p=0.0)),
        ([1, 2], SamplingParams(temperature=-1.0)),
        ([1, 10**9], SamplingParams()),
        ([1, 2], SamplingParams(max_new_tokens=10**6)),
    ],
)
def test_bad_requests_are_rejected_before_batching(engine, prompt, params):
    with pytest.raises(BadRequest):
        run(engine.generate(prompt, params))
    assert engine.stats.forward_passes == 0


def test_engine_survives_event_loop_restarts(engine, prompts):
    a = run(engine.generate(prompts[0], GREEDY))
    b = run(engine.generate(prompts[0], GREEDY))
    assert a[0].token_ids == b[0].token_ids


def test_real_model_batched_greedy_equals_unbatched():
    """SmolLM2-135M (30 layers, 9 query / 3 kv heads): padding and cache surgery are exact on a real model,
    and replies that end with <|im_end|> stop with it (in ids, not in text)."""
    from engine.config import ModelConfig
    from engine.models import load_model

    lm = load_model(ModelConfig(name="smollm2-135m"), device="cpu")  # cached after the first run (~20 s once)
    tok = lm.tokenizer
    prompts = [
        list(
            tok.apply_chat_template(
                [{"role": "user", "content": q}], add_generation_prompt=True, return_dict=False
            )
        )
        for q in ("hi", "Write a haiku about the sea and the wind, with a title.", "What is 2+2?")
    ]
    # "hi" gets room for its whole reply (~12 tokens + <|im_end|>); the others stop early, leaving the batch.
    params = [SamplingParams(max_new_tokens=n, temperature=0) for n in (16, 5, 3)]
    eng = TorchInferenceEngine.from_loaded(lm)
    try:

        async def main():
            seq = [(await eng.generate(p, s))[0] for p, s in zip(prompts, params, strict=True)]
            return seq, await asyncio.gather(
                *[eng.generate(p, s) for p, s in zip(prompts, params, strict=True)]
            )

        seq, batched = run(main())
    finally:
        eng.close()
    for a, (b,) in zip(seq, batched, strict=True):
        assert b.token_ids == a.token_ids
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-4)
    hello = seq[0]
    assert hello.finish_reason == "stop" and hello.token_ids[-1] == tok.convert_tokens_to_ids("<|im_end|>")
    assert "<|im_end|>" not in hello.text and hello.text.strip()


def test_lora_wrapped_model_batches_and_scores_exactly(tiny, prompts):
    """The torch backend serves a peft-wrapped module: same batching and logprob guarantees."""
    import copy

    from peft import LoraConfig, get_peft_model

    base = copy.deepcopy(tiny.model)
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False))
    model.eval()
    eng = TorchInferenceEngine(model, tiny.tokenizer, stop_token_ids=tiny.end_of_turn_ids)
    params = SamplingParams(max_new_tokens=8, temperature=0.9, seed=3)
    try:

        async def main():
            seq = await _sequential(eng, prompts, params)
            return seq, await asyncio.gather(*[eng.generate(p, params) for p in prompts])

        seq, batched = run(main())
    finally:
        eng.close()
    for prompt, a, (b,) in zip(prompts, seq, batched, strict=True):
        assert b.token_ids == a.token_ids
        ref = teacher_forced_logprobs(model, prompt, b.token_ids)
        assert torch.allclose(torch.tensor(b.logprobs), ref, atol=1e-4)
