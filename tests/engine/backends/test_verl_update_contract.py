"""What the verl backend hands `update_actor` is what verl's worker can take, and trains the project's loss.

The batch -> DataProto -> TensorDict step of `VerlBackend._update` (`update_input`, and the reference log-prob
call's `reference_input` / `reference_log_probs`), then what verl's worker does with it up to
the model: the split over data-parallel ranks (`chunk_tensordict`), the per-rank mini-batch and
micro-batch cut (`prepare_micro_batches`), the global token count, and verl's own `ppo_loss`, which calls
the registered `swarm_*` loss. The FSDP forward is replaced by a stand-in "model" (a per-token log-prob
that is a differentiable function of the token and its position), applied identically on both sides; the
sum over micro-batches, averaged over ranks as FSDP averages gradients, must equal the project's loss on
the same mini-batch (values and gradients). Needs verl (CPU is enough): `make test` runs it in the verl venv.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("verl", reason="verl pins transformers<5.11; make test runs these in the verl venv")

from verl.utils import tensordict_utils as tu  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass  # noqa: E402
from verl.workers.engine.utils import prepare_micro_batches  # noqa: E402
from verl.workers.utils.losses import ppo_loss  # noqa: E402

from engine.algorithms import get_policy_loss  # noqa: E402
from engine.backends.verl import register  # noqa: E402, F401  (registers the swarm_* losses, as every worker does)
from engine.backends.verl.backend import reference_input, reference_log_probs, update_input  # noqa: E402
from engine.backends.verl.config import compose_verl_config  # noqa: E402
from engine.backends.verl.dataproto import pack_samples  # noqa: E402
from engine.backends.verl.update import update_batches  # noqa: E402
from engine.config import SwarmConfig  # noqa: E402
from engine.training.algo_config import loss_config  # noqa: E402
from engine.types import Author, Block, Sample, Timeline  # noqa: E402

VOCAB = 32


def _logp(ids: torch.Tensor, pos: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """The stand-in model's log-prob of the next token, computed at each position."""
    return -torch.nn.functional.softplus(W[ids] + 0.01 * pos.to(W.dtype))


def _entropy(ids: torch.Tensor, pos: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """The stand-in model's entropy of its next-token distribution at each position."""
    return torch.sigmoid(W[ids] - 0.02 * pos.to(W.dtype)) * 2.0


def _ref(t: dict, W: torch.Tensor) -> torch.Tensor:
    """Reference log-probs (B, R) of a packed batch: the stand-in model at other weights, no grad."""
    P, R = t["prompts"].shape[1], t["responses"].shape[1]
    return _logp(t["input_ids"], t["position_ids"], W.detach() * 0.5)[:, P - 1 : P - 1 + R]


def _samples(weights: list[float]) -> list[Sample]:
    g = torch.Generator().manual_seed(0)
    out = []
    for i, w in enumerate(weights):
        prompt = torch.randint(3, VOCAB, (1 + i % 3,), generator=g).tolist()
        a1 = torch.randint(3, VOCAB, (1 + (i * 5) % 4,), generator=g).tolist()
        blocks = [Block(Author.ENV, "", prompt, None), Block(Author.LLM, "", a1, (-torch.rand(len(a1), generator=g)).tolist(), True)]
        if i % 3 == 1:  # a multi-turn sample: a tool result (no loss) and a second answer
            a2 = torch.randint(3, VOCAB, (2,), generator=g).tolist()
            blocks += [Block(Author.ENV, "", [7, 8], None), Block(Author.LLM, "", a2, [-0.3, -0.7], True)]
        out.append(Sample(Timeline(blocks), f"e{i}", f"t{i // 2}", float(i % 2), w, float(i % 3) - 1.0))
    return out


def _ours(samples: list[Sample], cfg: SwarmConfig, W: torch.Tensor) -> torch.Tensor:
    """The project's loss on one mini-batch, as the torch trainer computes it."""
    t, _ = pack_samples(samples, 0)
    P = t["prompts"].shape[1]
    R = t["responses"].shape[1]
    cols = slice(P - 1, P - 1 + R)  # the response token j is predicted at the column before it
    a = cfg.algorithm
    loss, _ = get_policy_loss(a.policy_loss)(
        logp_BT=_logp(t["input_ids"], t["position_ids"], W)[:, cols],
        old_logp_BT=t["old_log_probs"],
        advantages_B=torch.tensor([s.advantage for s in samples]),
        mask_BT=t["response_mask"].float(),
        weights_B=torch.tensor([s.weight for s in samples]),
        cfg=loss_config(cfg),
        ref_logp_BT=_ref(t, W) if a.kl_coef > 0 else None,
        entropy_BT=_entropy(t["input_ids"], t["position_ids"], W)[:, cols] if a.entropy_coef > 0 else None,
    )
    return loss


def _reference_through_verl(ub, W: torch.Tensor, *, adapter: bool) -> torch.Tensor:
    """The backend's reference log-prob call: its input, a stand-in for the worker's unpadded answer (the
    stand-in model at the reference weights), and the backend's read-back."""
    td = reference_input(ub, adapter=adapter)
    assert td["compute_loss"] is False and td["calculate_entropy"] is False
    assert td.get("no_lora_adapter", None) is (True if adapter else None)
    ids = td["input_ids"]
    values = _logp(ids.values(), td["position_ids"].values(), W.detach() * 0.5)
    out = tu.get_tensordict({"log_probs": torch.nested.nested_tensor_from_jagged(values, offsets=ids.offsets())})
    return reference_log_probs(out, td)


def _through_verl(ub, actor, dp: int, W: torch.Tensor) -> torch.Tensor:
    """`VerlBackend._update`'s calls (the backend's own conversion), then verl's worker up to its loss call."""
    if actor.use_kl_loss:
        ub.ref_log_prob = _reference_through_verl(ub, W, adapter=ub.mini.rows.start % 2 == 1)
        m = ub.tensors["response_mask"].bool()
        torch.testing.assert_close(ub.ref_log_prob[m], _ref(ub.tensors, W)[m])
    td = update_input(ub)
    assert td["temperature"] == 1.0 and td["compute_loss"] is True
    ranks = tu.chunk_tensordict(td, dp)  # the nd-compute dispatch's even split over data-parallel ranks
    n_tokens = sum(int(r["loss_mask"].sum()) for r in ranks)  # all-reduced by verl's engine
    total = torch.zeros(())
    for r in ranks:
        assert td["mini_batch_size"] // dp == len(r)  # train_mini_batch: one mini-batch per call
        tu.assign_non_tensor(r, batch_num_tokens=n_tokens, dp_size=dp, use_dynamic_bsz=False)
        micros, _ = prepare_micro_batches(data=r, dp_group=None, same_micro_num_in_dp=True)
        assert len(micros) * r["micro_batch_size_per_gpu"] == len(r)
        for m in micros:
            ids, pos = m["input_ids"].values(), m["position_ids"].values()
            out = {"log_probs": _logp(ids, pos, W)}
            if m["calculate_entropy"]:
                out["entropy"] = _entropy(ids, pos, W)
            loss, metrics = ppo_loss(actor, out, m)
            assert "actor/swarm_pg_loss" in metrics
            total = total + loss
    return total / dp  # FSDP averages the ranks' gradients


UNEQUAL = [1.0, 0.5, 0.5, 1.0, 0.25, 0.25, 0.25]


@pytest.mark.parametrize(
    ("policy_loss", "agg", "dp", "micro", "weights", "extra"),
    [
        ("ppo_clip", "token_mean", 2, 2, [1.0] * 7, {}),
        ("ppo_clip", "seq_mean_token_mean", 2, 1, [1.0] * 7, {}),
        ("gspo", "seq_mean_token_mean", 3, 2, [1.0] * 7, {}),
        ("dapo", "token_mean", 4, 1, [1.0] * 7, {}),
        # Unequal weights (merged episodes): exact with one micro-batch per rank (see register's docstring).
        ("ppo_clip", "token_mean", 1, 8, UNEQUAL, {}),
        ("ppo_clip", "seq_mean_token_mean", 1, 8, UNEQUAL, {}),
        # verl adds the KL (to the reference log-probs the backend puts in the batch) and entropy terms
        # itself, unweighted: equal to ours with equal weights.
        ("ppo_clip", "token_mean", 2, 2, [1.0] * 7, {"kl_coef": 0.1, "kl_estimator": "k3", "entropy_coef": 0.01}),
        ("ppo_clip", "seq_mean_token_mean", 2, 1, [1.0] * 7, {"kl_coef": 0.05, "kl_estimator": "k1"}),
    ],
)
def test_each_update_actor_call_trains_the_projects_loss_on_its_mini_batch(
    tmp_path, policy_loss, agg, dp, micro, weights, extra
):
    cfg = SwarmConfig.model_validate(
        {
            "backend": "verl",
            "algorithm": {"policy_loss": policy_loss, "agg": agg, **extra},
            "pool": {"group_size": 2},
            "training": {"mini_batch_size": 4 if micro < 8 else 8, "micro_batch_size": micro},
        }
    )
    actor = omega_conf_to_dataclass(compose_verl_config(cfg, model_path=str(tmp_path)).actor_rollout_ref.actor)
    samples = _samples(weights)
    calls = update_batches(samples, cfg, pad_id=0, dp_size=dp)
    assert any(c.mini.n_pad for c in calls) or dp == 1  # the padding rows are exercised
    for ub in calls:
        W = torch.randn(VOCAB, generator=torch.Generator().manual_seed(ub.mini.rows.start)).requires_grad_(True)
        theirs = _through_verl(ub, actor, dp, W)
        (g_theirs,) = torch.autograd.grad(theirs, W)
        ours = _ours(samples[ub.mini.rows], cfg, W)
        (g_ours,) = torch.autograd.grad(ours, W)
        torch.testing.assert_close(theirs, ours, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(g_theirs, g_ours, rtol=1e-5, atol=1e-6)
