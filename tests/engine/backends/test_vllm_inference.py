"""The vLLM inference adapter against a scripted token-in/token-out HTTP server (real sockets, on CPU)."""

from __future__ import annotations

import asyncio
import sys

import pytest
from tests_support import ScriptedVllmServer

from engine.backends.base import SamplingParams
from engine.backends.vllm.inference import VllmError, VllmInference
from engine.backends.vllm.server import vllm_serve_command, vllm_serve_env
from engine.config import SwarmConfig
from engine.errors import BadRequest

STOPS = (2, 7)


@pytest.fixture
def vllm_server():
    servers: list[ScriptedVllmServer] = []

    def start(script: list, lora_status: int = 200) -> ScriptedVllmServer:
        servers.append(ScriptedVllmServer(script, lora_status))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def _engine(srv: ScriptedVllmServer, **kw) -> VllmInference:
    return VllmInference(srv.url, "policy", stop_token_ids=STOPS, **kw)


def test_token_ids_and_logprobs_come_back_exactly_and_the_request_is_token_in(vllm_server):
    srv = vllm_server([{"choices": [{"token_ids": [11, 12, 2], "logprobs": [-0.5, -1.25, -0.125], "text": "hi"}]}])
    out = asyncio.run(_engine(srv).generate([5, 6, 7], SamplingParams(max_new_tokens=8, temperature=0.7, seed=3)))
    assert len(out) == 1
    c = out[0]
    assert (c.token_ids, c.logprobs, c.finish_reason, c.text) == ([11, 12, 2], [-0.5, -1.25, -0.125], "stop", "hi")
    body = srv.completions()[0]
    assert body["prompt"] == [5, 6, 7]  # ids, never text
    assert body["return_token_ids"] is True and body["logprobs"] == 0
    assert body["stop_token_ids"] == [2, 7] and body["top_k"] == -1
    assert (body["model"], body["max_tokens"], body["temperature"], body["seed"], body["n"]) == ("policy", 8, 0.7, 3, 1)
    assert body["stream"] is False and "stop" not in body


def test_n_choices_are_returned_in_index_order_with_length_finish(vllm_server):
    srv = vllm_server(
        [
            {
                "choices": [
                    {"token_ids": [3], "logprobs": [-0.25], "finish_reason": "length"},
                    {"token_ids": [4, 2], "logprobs": [-1.0, -2.0], "finish_reason": "stop"},
                ]
            }
        ]
    )
    out = asyncio.run(_engine(srv).generate([1], SamplingParams(n=2, stop=("\n",))))
    assert [c.token_ids for c in out] == [[3], [4, 2]]
    assert [c.finish_reason for c in out] == ["length", "stop"]
    assert srv.completions()[0]["stop"] == ["\n"]


def test_streaming_reports_every_sampled_id_per_choice_and_returns_the_same_completions(vllm_server):
    srv = vllm_server(
        [
            {
                "choices": [
                    {"token_ids": [21, 22, 2], "logprobs": [-0.5, -0.75, -1.0], "text": "ab"},
                    {"token_ids": [31], "logprobs": [-2.0], "text": "c", "finish_reason": "length"},
                ]
            }
        ]
    )
    seen: list[tuple[int, int]] = []
    out = asyncio.run(
        _engine(srv).generate([9], SamplingParams(n=2), on_token=lambda i, t: seen.append((i, t)))
    )
    assert [t for i, t in seen if i == 0] == [21, 22, 2] and [t for i, t in seen if i == 1] == [31]
    assert (out[0].token_ids, out[0].logprobs, out[0].text, out[0].finish_reason) == (
        [21, 22, 2], [-0.5, -0.75, -1.0], "ab", "stop",
    )  # fmt: skip
    assert (out[1].token_ids, out[1].finish_reason) == ([31], "length")
    assert srv.completions()[0]["stream"] is True


def test_server_errors_map_to_bad_request_or_vllm_error(vllm_server):
    srv = vllm_server([400, 503])
    eng = _engine(srv)
    with pytest.raises(BadRequest, match="vLLM rejected the request"):
        asyncio.run(eng.generate([1], SamplingParams()))
    with pytest.raises(VllmError, match="HTTP 503"):
        asyncio.run(eng.generate([1], SamplingParams()))
    assert eng.in_flight == 0


def test_a_server_without_token_ids_or_with_missing_logprobs_is_refused_with_the_fix(vllm_server):
    srv = vllm_server(
        [
            {"choices": [{"token_ids": None, "logprobs": [-1.0], "text": "x"}]},
            {"choices": [{"token_ids": [4, 5], "logprobs": [-1.0], "text": "x"}]},
            {"choices": [{"token_ids": None, "logprobs": None, "text": "x"}]},
        ]
    )
    eng = _engine(srv)
    with pytest.raises(VllmError, match="return_token_ids"):
        asyncio.run(eng.generate([1], SamplingParams()))
    with pytest.raises(VllmError, match="1 logprobs for 2 sampled tokens"):
        asyncio.run(eng.generate([1], SamplingParams()))
    with pytest.raises(VllmError, match="return_token_ids"):
        asyncio.run(eng.generate([1], SamplingParams(), on_token=lambda i, t: None))


def test_invalid_requests_fail_here_without_reaching_the_server(vllm_server):
    srv = vllm_server([])
    eng = _engine(srv, max_model_len=16, vocab_size=100)
    with pytest.raises(BadRequest, match="prompt is empty"):
        asyncio.run(eng.generate([], SamplingParams()))
    with pytest.raises(BadRequest, match="exceeds the model's context of 16"):
        asyncio.run(eng.generate([1] * 10, SamplingParams(max_new_tokens=7)))
    with pytest.raises(BadRequest, match=r"\[0, 100\)"):
        asyncio.run(eng.generate([100], SamplingParams()))
    assert srv.requests == []


def test_pause_waits_for_calls_in_flight_and_holds_new_ones_until_resume(vllm_server):
    slow = {"choices": [{"token_ids": [1], "logprobs": [-0.1]}], "delay_s": 0.4}
    fast = {"choices": [{"token_ids": [2], "logprobs": [-0.2]}]}
    srv = vllm_server([slow, fast])
    eng = _engine(srv)

    async def scenario() -> list:
        first = asyncio.create_task(eng.generate([1], SamplingParams()))
        while not srv.requests:  # the slow call has reached the server
            await asyncio.sleep(0.01)
        await eng.pause()  # must return only after the slow call finished
        assert first.done() and eng.in_flight == 0
        held = asyncio.create_task(eng.generate([2], SamplingParams()))
        await asyncio.sleep(0.2)
        assert not held.done() and len(srv.requests) == 1  # held here, never sent while paused
        eng.resume()
        return [(await first)[0].token_ids, (await held)[0].token_ids]

    assert asyncio.run(scenario()) == [[1], [2]]


def test_close_fails_held_calls(vllm_server):
    eng = _engine(vllm_server([]))

    async def scenario() -> None:
        await eng.pause()
        held = asyncio.create_task(eng.generate([1], SamplingParams()))
        await asyncio.sleep(0.05)
        eng.close()
        with pytest.raises(RuntimeError, match="closed"):
            await held

    asyncio.run(scenario())


def test_lora_push_loads_a_new_version_routes_calls_to_it_and_unloads_the_old_one(vllm_server):
    ok = {"choices": [{"token_ids": [1], "logprobs": [-0.1]}]}
    srv = vllm_server([ok, ok])
    eng = _engine(srv)
    assert eng.push_lora("/ckpt/a") == "policy-v1"
    asyncio.run(eng.generate([1], SamplingParams()))
    assert eng.push_lora("/ckpt/b") == "policy-v2"
    asyncio.run(eng.generate([1], SamplingParams()))
    admin = [(r["path"], r["body"]) for r in srv.requests if r["path"] != "/v1/completions"]
    assert admin == [
        ("/v1/load_lora_adapter", {"lora_name": "policy-v1", "lora_path": "/ckpt/a"}),
        ("/v1/load_lora_adapter", {"lora_name": "policy-v2", "lora_path": "/ckpt/b"}),
        ("/v1/unload_lora_adapter", {"lora_name": "policy-v1"}),
    ]
    assert [b["model"] for b in srv.completions()] == ["policy-v1", "policy-v2"]


def test_lora_push_to_a_server_without_runtime_lora_names_the_flags(vllm_server):
    eng = _engine(vllm_server([], lora_status=404))
    with pytest.raises(VllmError, match="VLLM_ALLOW_RUNTIME_LORA_UPDATING"):
        eng.push_lora("/ckpt/a")
    assert eng.model == "policy" and eng.adapter_version == 0  # nothing switched on failure


def test_serve_command_maps_the_config_once():
    full = SwarmConfig.model_validate(
        {"backend": "vllm", "model": {"dtype": "bfloat16", "seed": 5}, "episodes": {"max_context_tokens": 2048},
         "vllm": {"gpu_memory_utilization": 0.3, "tensor_parallel_size": 2, "extra_args": ["--enforce-eager"]}}
    )  # fmt: skip
    cmd = vllm_serve_command(full, "/m", port=8123, served_name="p")
    assert cmd[:3] == [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    flags = dict(zip(cmd[3::2], cmd[4::2], strict=False))
    assert flags["--model"] == "/m" and flags["--served-model-name"] == "p" and flags["--port"] == "8123"
    assert flags["--host"] == "127.0.0.1" and flags["--logprobs-mode"] == "raw_logprobs"
    assert (flags["--dtype"], flags["--seed"], flags["--max-model-len"]) == ("bfloat16", "5", "2048")
    assert (flags["--gpu-memory-utilization"], flags["--tensor-parallel-size"]) == ("0.3", "2")
    assert "--weight-transfer-config" in cmd and "--enable-lora" not in cmd and cmd[-1] == "--enforce-eager"
    env = vllm_serve_env(full, {})
    assert env == {"VLLM_SERVER_DEV_MODE": "1", "VLLM_ALLOW_INSECURE_SERIALIZATION": "1"}

    lora = full.model_copy(update={"lora": full.lora.model_copy(update={"enabled": True, "rank": 16})})
    cmd = vllm_serve_command(lora, "/m", port=1, served_name="p")
    assert cmd[cmd.index("--max-lora-rank") + 1] == "16" and "--weight-transfer-config" not in cmd
    assert vllm_serve_env(lora, {}) == {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
