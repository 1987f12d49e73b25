"""Failure classification from exit status + log tail, metric-line parsing, and the rule-fix registry."""

import pytest

from a3r.fixes import FIXES, propose_fix, register_fix
from a3r.states import FailureKind as K
from a3r.worker.classify import classify_failure
from a3r.worker.metrics import parse_metric_bytes


@pytest.mark.parametrize(
    "code,tail,kw,expected",
    [
        (0, "all good", {}, None),
        (0, "", {"timed_out": True}, K.TIMEOUT),
        (1, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB", {}, K.OOM),
        (1, "RuntimeError: CUDA error: out of memory", {}, K.OOM),
        (137, "", {}, K.OOM),
        (-9, "", {}, K.OOM),
        (1, "step 40 loss=nan grad_norm=inf", {}, K.NAN_DIVERGENCE),
        (1, "training diverged", {}, K.NAN_DIVERGENCE),
        (1, "ValueError: bad", {"saw_nan": True}, K.NAN_DIVERGENCE),
        (1, "RuntimeError: NCCL error: unhandled system error", {}, K.INFRASTRUCTURE),
        (1, "OSError: [Errno 28] No space left on device", {}, K.INFRASTRUCTURE),
        (1, "httpx.ConnectError: [Errno 111] Connection refused", {}, K.INFRASTRUCTURE),
        (-1, "", {}, K.INFRASTRUCTURE),  # SIGHUP: pane or session killed
        (143, "", {}, K.INFRASTRUCTURE),  # SIGTERM via a shell
        (None, "", {}, K.INFRASTRUCTURE),
        (1, "Traceback (most recent call last):\nKeyError: 'reward'", {}, K.CODE_ERROR),
        (2, "usage: train.py [-h]", {}, K.CODE_ERROR),
        (-11, "", {}, K.CODE_ERROR),  # segfault: the code's problem until shown otherwise
    ],
)
def test_classify(code, tail, kw, expected):
    assert classify_failure(code, tail, **kw) == expected


def test_oom_beats_nan_when_both_appear():
    assert classify_failure(1, "loss=nan\nCUDA out of memory") == K.OOM


def test_metric_parsing_is_tolerant():
    data = (
        b'{"step": 0, "reward": 0.5, "loss": 1, "name": "x", "flag": true}\n'
        b"not json\n"
        b'{"reward": 1}\n'
        b'{"step": -1, "reward": 1}\n'
        b'{"step": 2.0, "reward": NaN, "loss": Infinity}\n'
        b"\xff\xfe\n"
        b"\n"
        b'{"step": 3, "reward": 0.7'
    )
    c = parse_metric_bytes(data)
    assert c.points == [(0, "reward", 0.5), (0, "loss", 1.0), (2, "reward", None), (2, "loss", None)]
    assert c.corrupt == 4 and c.saw_nan and c.last_step == 2
    assert c.consumed == data.rfind(b"\n") + 1, "the torn last line waits for its newline"
    final = parse_metric_bytes(data, final=True)
    assert final.corrupt == 5 and final.consumed == len(data)


def test_fixes():
    assert propose_fix(K.OOM, {"training": {"micro_batch_size": 8, "mini_batch_size": 16}}) == (
        "halve_micro_batch",
        {"training": {"micro_batch_size": 4}},
        "training.micro_batch_size 8 -> 4",
    )
    # the torch trainer's pass budget halves with the micro-batch, never alone
    assert propose_fix(K.OOM, {"training": {"micro_batch_size": 8, "pass_max_tokens": 4096}})[1:] == (
        {"training": {"micro_batch_size": 4, "pass_max_tokens": 2048}},
        "training.micro_batch_size 8 -> 4, training.pass_max_tokens 4096 -> 2048",
    )
    assert propose_fix(K.OOM, {"training": {"micro_batch_size": 1, "pass_max_tokens": 4096}}) is None
    verl = {"actor": {"ppo_micro_batch_size_per_gpu": 3}, "critic": {"ppo_micro_batch_size_per_gpu": 2}}
    assert propose_fix("oom", verl)[1] == {
        "actor": {"ppo_micro_batch_size_per_gpu": 1},
        "critic": {"ppo_micro_batch_size_per_gpu": 1},
    }
    assert propose_fix(K.OOM, {"training": {"micro_batch_size": 1}}) is None, (
        "nothing left to halve: caller decides"
    )
    assert propose_fix(K.NAN_DIVERGENCE, {"training": {"lr": 1e-4}})[1] == {"training": {"lr": 5e-5}}
    assert propose_fix(K.CODE_ERROR, {"training": {"lr": 1}}) is None


def test_fix_registry_rejects_conflicting_names():
    def other(cfg):
        return None

    with pytest.raises(ValueError, match="already registered"):
        register_fix(K.OOM, "halve_micro_batch")(other)
    fn = FIXES[K.OOM]["halve_micro_batch"].fn
    assert register_fix(K.OOM, "halve_micro_batch")(fn) is fn, "re-registering the same function is fine"
