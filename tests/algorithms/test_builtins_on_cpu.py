"""The torch-free table of built-in algorithms and the registries agree exactly, and cannot drift apart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import engine.algorithms.advantages  # noqa: F401  (registers the built-in estimators)
import engine.algorithms.losses  # noqa: F401  (registers the built-in losses)
from engine.algorithms import AdvantageEstimator, AlgorithmError, Registry
from engine.algorithms.builtins import BUILTIN_ADVANTAGES, BUILTIN_POLICY_LOSSES, BuiltinTable
from engine.algorithms.registry import _ADVANTAGES, _POLICY_LOSSES

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("registry", "table"), [(_ADVANTAGES, BUILTIN_ADVANTAGES), (_POLICY_LOSSES, BUILTIN_POLICY_LOSSES)])
def test_every_declared_builtin_is_registered_from_its_module_with_its_defaults(registry, table):
    from_module = {n: fn for n, fn in registry.loaded().items() if fn.__module__ == table.module}
    assert set(from_module) == set(table.defaults)
    for name in table.defaults:
        assert registry.defaults(name) == dict(table.defaults[name]), name


def test_names_and_defaults_before_torch_equal_those_after_loading_the_implementations():
    script = """
import json, sys
from engine.algorithms import advantage_defaults, advantage_names, policy_loss_defaults, policy_loss_names
def view():
    return {"adv": {n: advantage_defaults(n) for n in advantage_names()},
            "loss": {n: policy_loss_defaults(n) for n in policy_loss_names()}}
before, torch_before = view(), "torch" in sys.modules
import engine.algorithms.advantages, engine.algorithms.losses
print(json.dumps({"before": before, "after": view(), "torch_before": torch_before}))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["torch_before"] is False
    assert got["before"] == got["after"]
    assert got["after"]["loss"]["gspo"] == {"clip_low": 3e-4, "clip_high": 4e-4, "agg": "seq_mean_token_mean"}
    assert got["after"]["adv"] == {"grpo": {}, "rloo": {"scale_by_std": False}}


def _adv(*, rewards_N, group_ids_N, cfg):
    return rewards_N


# A table whose implementing module is this test module, so `_adv` counts as a built-in of it.
_TABLE = BuiltinTable(__name__, {"mine": {"scale_by_std": False}})


def test_builtin_missing_from_the_table_or_with_other_defaults_is_rejected():
    reg = Registry("advantage estimator", AdvantageEstimator, _TABLE)
    with pytest.raises(AlgorithmError, match="not declared in engine.algorithms.builtins"):
        reg.register("undeclared")(_adv)
    with pytest.raises(AlgorithmError, match="declares {'scale_by_std': False}"):
        reg.register("mine", defaults={"scale_by_std": True})(_adv)
    assert reg.names() == ("mine",) and reg.loaded() == {}
    reg.register("mine")(_adv)  # takes the declared defaults
    assert reg.defaults("mine") == {"scale_by_std": False} and reg.get("mine") is _adv


def test_a_clash_with_a_builtin_not_yet_loaded_is_still_rejected_and_lookup_loads_it():
    """In a fresh process the built-in losses are declared but not imported: registering another function
    under a built-in's name loads the built-in first and is rejected; looking a loss up loads its module."""
    script = """
import sys
from engine.algorithms import DuplicateAlgorithm, get_policy_loss, register_policy_loss
def mine(*, logp_BT, old_logp_BT, advantages_B, mask_BT, weights_B, cfg, ref_logp_BT=None, entropy_BT=None):
    return logp_BT.sum(), {}
assert "engine.algorithms.losses" not in sys.modules
try:
    register_policy_loss("gspo")(mine)
except DuplicateAlgorithm as e:
    assert "engine.algorithms.losses.gspo_loss" in str(e), e
else:
    raise AssertionError("clash accepted")
assert get_policy_loss("gspo").__module__ == "engine.algorithms.losses"
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_the_lazy_table_names_exactly_what_the_torch_modules_export():
    """`engine.algorithms` lists its torch names by hand (importing the modules to read them would load
    torch); each must be one its module exports, and every name the package exports must resolve."""
    import importlib

    import engine.algorithms as algorithms

    for module in set(algorithms._LAZY.values()):
        exported = set(getattr(importlib.import_module(module), "__all__", ()))
        listed = {n for n, m in algorithms._LAZY.items() if m == module}
        assert listed <= exported | {"GroupIds"}, (module, listed - exported)
    for name in algorithms.__all__:
        assert getattr(algorithms, name) is not None, name
