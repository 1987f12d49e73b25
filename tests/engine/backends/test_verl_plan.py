"""The verl backend's pure decisions (engine.backends.verl.plan / update / router and the boot checks that
need no cluster). No verl, Ray or GPU needed: these run in every venv."""

from __future__ import annotations

import asyncio
import json

import pytest
import torch
from tests_support import ScriptedVllmServer

from engine.backends.base import SamplingParams
from engine.backends.verl.dataproto import pack_samples
from engine.backends.verl.plan import (
    RAY_SETUP_HOOK,
    MiniBatch,
    Phase,
    StepMachine,
    checkpoint_due,
    gpu_shortfall,
    mini_batches,
    preflight,
    ray_init_kwargs,
    served_model_name,
    stale_verl_dirs,
    swarm_metrics,
    update_meta,
    verl_step_dir,
    worker_plan,
)
from engine.backends.verl.router import ReplicaRouter, pick_replica
from engine.backends.verl.update import PAD_UID, pad_rows, step_samples, update_batches
from engine.backends.vllm.inference import VllmError, VllmInference
from engine.config import SwarmConfig
from engine.errors import ConfigError
from engine.training.checkpoint import commit_checkpoint
from engine.types import Author, Block, EpisodeResult, Sample, Timeline


def _cfg(**kw) -> SwarmConfig:
    return SwarmConfig.model_validate({"backend": "verl", **kw})


# -- cluster ------------------------------------------------------------------------------------------


def test_ray_init_starts_a_local_cluster_unless_given_an_address_and_registers_in_every_worker():
    kw = ray_init_kwargs(_cfg(), environ={"NCCL_DEBUG": "INFO"})
    assert "address" not in kw
    env = kw["runtime_env"]
    assert env["worker_process_setup_hook"] == RAY_SETUP_HOOK == "engine.backends.verl.register.register_with_verl"
    assert env["env_vars"]["TOKENIZERS_PARALLELISM"] == "true"
    assert "NCCL_DEBUG" not in env["env_vars"]  # already set by the user: inherited, not overridden
    assert ray_init_kwargs(_cfg(verl={"ray_address": "10.0.0.1:6379"}), environ={})["address"] == "10.0.0.1:6379"


def test_the_setup_hook_names_a_real_function():
    import importlib

    module, _, fn = RAY_SETUP_HOOK.rpartition(".")
    pytest.importorskip("verl", reason="importing the registration module imports verl")
    assert callable(getattr(importlib.import_module(module), fn))


def test_gpu_shortfall_names_the_numbers_and_the_fields():
    cfg = _cfg(verl={"nnodes": 2, "n_gpus_per_node": 4})
    assert gpu_shortfall(cfg, 8.0) is None
    msg = gpu_shortfall(cfg, 3.0)
    assert "needs 8 GPUs" in msg and "has 3 free" in msg and "verl.n_gpus_per_node" in msg
    assert "one-node Ray cluster started here" in msg
    assert "cluster at auto" in gpu_shortfall(_cfg(verl={"ray_address": "auto"}), 0.0)


def test_preflight_says_what_is_missing_before_ray_starts():
    cfg = _cfg()
    ok = {"has_vllm": True, "has_cuda": True, "has_flash_attn": True}
    assert "vLLM is not installed" in preflight(cfg, **{**ok, "has_vllm": False})
    assert "pip install -e '.[gpu]'" in preflight(cfg, **{**ok, "has_vllm": False})
    msg = preflight(cfg, **{**ok, "has_cuda": False})
    assert "needs CUDA GPUs" in msg and "--ray-address" in msg and "backend: torch" in msg
    assert "pip install flash-attn" in preflight(cfg, **{**ok, "has_flash_attn": False})
    # A CPU-only head node may drive a GPU cluster it joins (the GPU nodes run the actor).
    joined = _cfg(verl={"ray_address": "auto"})
    assert preflight(joined, has_vllm=True, has_cuda=False, has_flash_attn=False) is None
    assert "vLLM" in preflight(joined, has_vllm=False, has_cuda=False, has_flash_attn=False)
    assert preflight(cfg, **ok) is None


@pytest.mark.parametrize(
    ("kw", "role", "ref"),
    [
        ({}, "actor_rollout", "none"),
        ({"algorithm": {"kl_coef": 0.01}}, "actor_rollout_ref", "model"),
        ({"algorithm": {"kl_coef": 0.01}, "lora": {"enabled": True}}, "actor_rollout", "adapter"),
    ],
)
def test_worker_plan_places_the_reference_policy(kw, role, ref):
    plan = worker_plan(_cfg(verl={"nnodes": 2, "n_gpus_per_node": 4, "rollout_tensor_parallel_size": 2}, **kw))
    assert (plan.role, plan.ref) == (role, ref)
    assert plan.process_on_nodes == (4, 4) and plan.dp_size == 8 and plan.n_replicas == 4


# -- mini-batches -------------------------------------------------------------------------------------


def test_mini_batches_follow_the_torch_trainers_cut_and_pad_to_whole_micro_batches_per_rank():
    assert mini_batches(10, 4, 2, 2) == [
        MiniBatch(slice(0, 4), 0, 2),
        MiniBatch(slice(4, 8), 0, 2),
        MiniBatch(slice(8, 10), 0, 1),  # one row per rank: the micro-batch shrinks, no padding
    ]
    assert mini_batches(5, 8, 2, 4) == [MiniBatch(slice(0, 5), 1, 3)]  # 3 rows per rank, one of them padding


@pytest.mark.parametrize("n", [1, 2, 3, 7, 16, 33])
@pytest.mark.parametrize(("mini", "dp", "micro"), [(4, 1, 2), (8, 2, 4), (16, 8, 1), (6, 4, 4), (32, 3, 5)])
def test_every_mini_batch_splits_evenly_as_verls_worker_asserts(n, mini, dp, micro):
    mbs = mini_batches(n, mini, dp, micro)
    assert [i for mb in mbs for i in range(mb.rows.start, mb.rows.stop)] == list(range(n))
    for mb in mbs:
        assert mb.size % dp == 0 and (mb.size // dp) % mb.micro == 0  # verl: train_mini_batch, micro-batching
        assert 1 <= mb.micro <= micro and mb.n_pad < dp * mb.micro  # padding below one micro-batch per rank


def test_update_meta_is_what_verls_update_actor_reads():
    cfg = _cfg(algorithm={"entropy_coef": 0.01}, model={"seed": 3})
    meta = update_meta(cfg, MiniBatch(slice(0, 5), 1, 3), n_loss_rows=4)
    assert meta == {
        "temperature": 1.0,
        "calculate_entropy": True,
        "distillation_use_topk": False,
        "distillation_only": False,
        "global_batch_size": 4,  # the rows that carry a loss, not the padded size
        "mini_batch_size": 6,
        "micro_batch_size_per_gpu": 3,
        "epochs": 1,
        "seed": 3,
        "dataloader_kwargs": {"shuffle": False},
        "compute_loss": True,
    }
    assert update_meta(_cfg(), MiniBatch(slice(0, 2), 0, 1), 2)["calculate_entropy"] is False


def _sample(prompt: list[int], answer: list[int], *, task: str = "t", weight: float = 1.0, adv: float = 0.5) -> Sample:
    tl = Timeline([Block(Author.ENV, "", prompt, None), Block(Author.LLM, "", answer, [-0.5] * len(answer), True)])
    return Sample(tl, f"e-{task}-{len(answer)}", task, 1.0, weight, adv)


def test_padding_rows_carry_no_loss_and_keep_verls_unpadding_valid():
    samples = [_sample([5, 6], [7, 8, 9]), _sample([4], [3], weight=0.5, adv=-1.0)]
    t, nt = pad_rows(*pack_samples(samples, 0), 2, 0)
    assert t["prompts"].shape == (4, 2) and t["responses"].shape == (4, 3)
    assert t["attention_mask"][2:].tolist() == [[0, 1, 1, 0, 0]] * 2  # one prompt and one response token
    assert t["position_ids"][2:].tolist() == [[0, 0, 1, 1, 1]] * 2
    for key in ("response_mask", "old_log_probs", "advantages", "rollout_is_weights", "token_level_rewards"):
        assert not t[key][2:].any(), key
    assert nt["uid"].tolist() == ["t", "t", PAD_UID, PAD_UID] and nt["episode_id"][2:].tolist() == ["", ""]
    real, _ = pack_samples(samples, 0)
    assert all(torch.equal(t[k][:2], v) for k, v in real.items())
    assert pad_rows(real, {"uid": nt["uid"][:2], "episode_id": nt["episode_id"][:2]}, 0, 0)[0] is real


def _episode(task: str, reward: float, answer: list[int], client: str = "c") -> EpisodeResult:
    tl = Timeline([Block(Author.ENV, "", [1, 2], None), Block(Author.LLM, "", answer, [-0.25] * len(answer), True)])
    return EpisodeResult(episode_id=f"{task}-{reward}-{len(answer)}", task_id=task, client_id=client, reward=reward, timelines=[tl])


def test_step_samples_carry_the_projects_advantages_in_the_torch_trainers_order():
    batch = [_episode("a", 1.0, [3, 4, 5]), _episode("a", 0.0, [3]), _episode("b", 0.5, [6, 7])]
    samples = step_samples(batch, _cfg(pool={"group_size": 2}))
    assert [s.timeline.n_tokens for s in samples] == [3, 4, 5]  # same prompt, then by length
    by_ep = {s.episode_id: s.advantage for s in samples}
    assert by_ep["a-1.0-3"] > 0 > by_ep["a-0.0-1"] and by_ep["b-0.5-2"] == 0.0  # GRPO within task groups
    with pytest.raises(ValueError, match="at least one episode"):
        step_samples([], _cfg())


def test_update_batches_pack_each_optimizer_step_and_count_only_real_rows():
    samples = [_sample([1, 2], [3] * (1 + i % 3), task=f"t{i // 2}") for i in range(5)]
    cfg = _cfg(training={"mini_batch_size": 4, "micro_batch_size": 2})
    calls = update_batches(samples, cfg, pad_id=0, dp_size=2)
    assert [c.mini for c in calls] == [MiniBatch(slice(0, 4), 0, 2), MiniBatch(slice(4, 5), 1, 1)]
    last = calls[1]
    assert last.tensors["input_ids"].shape[0] == 2 and last.meta["global_batch_size"] == 1
    assert last.meta["mini_batch_size"] == 2 and last.n_tokens == samples[4].timeline.n_tokens - 2
    assert sum(c.n_tokens for c in calls) == sum(sum(s.timeline.loss_mask) for s in samples)


def test_a_timeline_that_starts_trainable_keeps_one_prompt_token():
    s = Sample(Timeline([Block(Author.LLM, "", [7, 8, 9], [-1.0, -2.0, -3.0], True)]), "e", "t", 1.0, 1.0, 1.0)
    t, _ = pack_samples([s], 0)
    assert t["prompts"].tolist() == [[7]] and t["responses"].tolist() == [[8, 9]]
    assert t["response_mask"].tolist() == [[1, 1]] and t["old_log_probs"].tolist() == [[-2.0, -3.0]]


# -- metrics, state, checkpoints ----------------------------------------------------------------------


def test_swarm_metrics_map_verls_names_and_average_over_optimizer_steps():
    out = swarm_metrics(
        [
            {"actor/swarm_clip_frac": 0.1, "grad_norm": 2.0, "actor/pg_loss": 0.5, "mfu": 0.3, "odd": "x"},
            {"actor/swarm_clip_frac": 0.3, "grad_norm": 4.0, "actor/pg_loss": 0.7},
        ]
    )
    assert out["clip_frac"] == pytest.approx(0.2) and out["grad_norm"] == pytest.approx(3.0)
    assert out["verl/actor/pg_loss"] == pytest.approx(0.6) and out["verl/mfu"] == pytest.approx(0.3)
    assert out["optimizer_steps"] == 2.0 and "verl/odd" not in out
    assert swarm_metrics([]) == {"optimizer_steps": 0.0}


def test_step_machine_happy_path_counts_one_step_per_update():
    m = StepMachine(7, phase=Phase.ASLEEP)  # as at boot: replicas asleep until the first sync
    m.to(Phase.SERVING)
    m.require_serving()
    m.to(Phase.ASLEEP)
    with pytest.raises(RuntimeError, match="already under way"):
        m.require_serving()
    m.to(Phase.UPDATED)
    assert m.global_step == 8
    m.to(Phase.SERVING)
    assert (m.phase, m.global_step) == (Phase.SERVING, 8)


def test_step_machine_recovers_from_a_failed_update_and_refuses_after_a_failed_sync():
    m = StepMachine(2)
    m.to(Phase.ASLEEP)
    m.to(Phase.SERVING)  # the update failed, the replicas were synced back: no step counted
    assert m.global_step == 2
    with pytest.raises(RuntimeError, match="illegal transition serving -> updated"):
        m.to(Phase.UPDATED)
    m.to(Phase.ASLEEP)
    m.to(Phase.UPDATED)
    reason = m.break_("the weight sync to the vLLM replicas", ConnectionError("node lost"))
    assert "step 3" in reason and "ConnectionError: node lost" in reason
    with pytest.raises(RuntimeError, match="broken: the weight sync.*start it again on the same run dir"):
        m.require_serving()
    with pytest.raises(RuntimeError, match="illegal"):
        m.to(Phase.SERVING)


def test_checkpoint_placement_and_pruning(tmp_path):
    assert checkpoint_due(_cfg(run_dir=str(tmp_path), training={"checkpoint_every": 2}), 4)
    assert not checkpoint_due(_cfg(run_dir=str(tmp_path), training={"checkpoint_every": 2}), 3)
    assert not checkpoint_due(_cfg(training={"checkpoint_every": 1}), 1)  # no run dir: nowhere to write
    assert not checkpoint_due(_cfg(run_dir=str(tmp_path), training={"checkpoint_every": 0}), 4)
    assert verl_step_dir(tmp_path, 12) == tmp_path / "verl" / "global_step_12"
    names = ["global_step_2", "global_step_4", "global_step_6", "latest_checkpointed_iteration.txt", "x"]
    assert stale_verl_dirs(names, [4, 6]) == ["global_step_2"]


def test_served_model_name_reads_v1_models():
    assert served_model_name({"data": [{"id": "/models/qwen"}]}, "fallback") == "/models/qwen"
    assert served_model_name({"data": []}, "fallback") == "fallback"


def test_resume_point_takes_only_verls_own_checkpoints(tmp_path):
    from engine.backends.verl.backend import resume_point

    cfg = _cfg(run_dir=str(tmp_path))
    assert resume_point(cfg) == (0, None)
    commit_checkpoint(tmp_path, 3, lambda tmp: None, {"model": "tiny", "lora": False})  # as the torch backend
    with pytest.raises(ConfigError, match="written by backend 'torch'.*new run dir"):
        resume_point(cfg)
    vdir = verl_step_dir(tmp_path, 5)
    commit_checkpoint(tmp_path, 5, lambda tmp: None, {"backend": "verl", "verl_dir": str(vdir)})
    with pytest.raises(ConfigError, match="does not exist"):
        resume_point(cfg)
    (vdir / "actor").mkdir(parents=True)
    assert resume_point(cfg) == (5, vdir)


def test_published_checkpoints_resume_from_the_newest_and_keep_verls_dirs_in_step(tmp_path):
    from engine.backends.verl.backend import publish_checkpoint, resume_point

    cfg = _cfg(run_dir=str(tmp_path), training={"checkpoint_every": 1})
    for step in (1, 2, 3):
        (verl_step_dir(tmp_path, step) / "actor").mkdir(parents=True)  # what verl's save_checkpoint wrote
        publish_checkpoint(cfg, step)
    (verl_step_dir(tmp_path, 4) / "actor").mkdir(parents=True)  # saved, then the process died: never published
    assert resume_point(cfg) == (3, verl_step_dir(tmp_path, 3))
    assert sorted(p.name for p in (tmp_path / "verl").iterdir()) == ["global_step_2", "global_step_3", "global_step_4"]
    (verl_step_dir(tmp_path, 5) / "actor").mkdir(parents=True)
    publish_checkpoint(cfg, 5)  # the leftover of the lost step goes with the stale ones
    assert sorted(p.name for p in (tmp_path / "verl").iterdir()) == ["global_step_3", "global_step_5"]


# -- the replica router -------------------------------------------------------------------------------


def test_pick_replica_takes_the_least_loaded_and_rotates_among_equals():
    assert pick_replica([2, 0, 1], 0) == 1
    assert [pick_replica([0, 0, 0], t) for t in range(4)] == [0, 1, 2, 0]
    assert pick_replica([1, 1, 0, 0], 3) == 3
    with pytest.raises(ValueError):
        pick_replica([], 0)


@pytest.fixture
def replicas():
    servers: list[ScriptedVllmServer] = []

    def start(n: int, script: list) -> list[ScriptedVllmServer]:
        servers.extend(ScriptedVllmServer(list(script)) for _ in range(n))
        return servers[-n:]

    yield start
    for s in servers:
        s.close()


def _router(servers) -> ReplicaRouter:
    return ReplicaRouter([VllmInference(s.url, "/models/m", stop_token_ids=(2,)) for s in servers])


def test_router_spreads_calls_over_replicas_token_in_token_out(replicas):
    reply = {"choices": [{"token_ids": [5, 2], "logprobs": [-0.5, -0.25]}], "delay_s": 0.2}
    a, b = replicas(2, [reply, reply])
    router = _router([a, b])

    async def two():
        return await asyncio.gather(*(router.generate([1, 2, 3], SamplingParams(max_new_tokens=4)) for _ in range(2)))

    out = asyncio.run(two())
    assert [c[0].token_ids for c in out] == [[5, 2], [5, 2]] and out[0][0].logprobs == [-0.5, -0.25]
    assert len(a.requests) == len(b.requests) == 1  # concurrent calls went to different replicas
    assert a.requests[0]["body"]["prompt"] == [1, 2, 3] and a.requests[0]["body"]["model"] == "/models/m"
    assert router.stop_token_ids == (2,)


def test_router_pauses_every_replica_and_fails_plainly_once_broken(replicas):
    reply = {"choices": [{"token_ids": [5], "logprobs": [-0.5]}]}
    router = _router(replicas(2, [reply]))

    async def held_then_released():
        await router.pause()
        assert router.paused
        call = asyncio.ensure_future(router.generate([1], SamplingParams(max_new_tokens=1)))
        await asyncio.sleep(0.1)
        assert not call.done()  # held while the replicas sleep
        router.resume()
        return await call

    assert asyncio.run(held_then_released())[0].token_ids == [5]
    router.mark_broken("backend 'verl' cannot serve: the weight sync failed")
    with pytest.raises(VllmError, match="weight sync failed"):
        asyncio.run(router.generate([1], SamplingParams()))
    router.close()


def test_router_refuses_replicas_that_disagree():
    with pytest.raises(ValueError, match="at least one"):
        ReplicaRouter([])
    with pytest.raises(ValueError, match="end-of-turn"):
        ReplicaRouter([VllmInference("http://x", "m", stop_token_ids=(2,)), VllmInference("http://y", "m", stop_token_ids=(3,))])


# -- the CLI option -----------------------------------------------------------------------------------


def test_swarm_serve_ray_address_sets_the_one_config_field(tmp_path):
    import argparse

    from engine.cli import _load_config

    args = argparse.Namespace(config=None, model=None, run_dir=None, backend="verl", ray_address="10.1.2.3:6379")
    cfg = _load_config(args)
    assert cfg.backend == "verl" and cfg.verl.ray_address == "10.1.2.3:6379"
    with pytest.raises(ConfigError, match="--ray-address is for backend verl.*add --backend verl"):
        _load_config(argparse.Namespace(config=None, model=None, run_dir=None, backend=None, ray_address="auto"))
    saved = tmp_path / "c.yaml"
    saved.write_text(cfg.to_yaml())
    assert json.loads(SwarmConfig.from_yaml(saved).model_dump_json())["verl"]["ray_address"] == "10.1.2.3:6379"


# -- benchmarks/gpu_smoke.py's verl weights check -----------------------------------------------------


def test_gpu_smoke_compares_the_two_newest_verl_shards(tmp_path):
    from tests_support import load_benchmark

    smoke = load_benchmark("gpu_smoke")
    for step, payload in ((1, b"a"), (2, b"b"), (10, b"b")):
        actor = verl_step_dir(tmp_path, step) / "actor"
        actor.mkdir(parents=True)
        (actor / "model_world_size_1_rank_0.pt").write_bytes(payload)
    assert not smoke._verl_weights_changed(tmp_path)  # steps 2 and 10 (numeric order), same bytes
    (verl_step_dir(tmp_path, 10) / "actor" / "model_world_size_1_rank_0.pt").write_bytes(b"c")
    assert smoke._verl_weights_changed(tmp_path)
    with pytest.raises(AssertionError, match="fewer than two"):
        smoke._verl_weights_changed(tmp_path / "nothing")
