"""Rule fixes: known failures the scheduler repairs by changing the run's config before retrying.

A fix maps the attempt's effective engine config to overrides (deep-merged into the run's config for
the next attempt) plus a one-line description, or returns None when it does not apply (then the failure
goes to the caller). Registered per failure kind, tried in registration order; conflicting duplicate
names are rejected.

Built in:
- oom: halve every micro-batch size found in the config (`micro_batch_size` and the verl/deepspeed
  spellings), down to 1, and with it the torch trainer's `pass_max_tokens` (packed micro-batches share a
  pass up to that many tokens). Same data per optimizer step, less activation memory per forward pass.
- nan_divergence: halve the learning rate (`lr` / `learning_rate`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from a3r.states import FailureKind

__all__ = ["FIXES", "Fix", "propose_fix", "register_fix"]

FixFn = Callable[[dict[str, Any]], "tuple[dict[str, Any], str] | None"]


class Fix:
    def __init__(self, kind: FailureKind, name: str, fn: FixFn):
        self.kind, self.name, self.fn = kind, name, fn


FIXES: dict[FailureKind, dict[str, Fix]] = {}


def register_fix(kind: FailureKind, name: str) -> Callable[[FixFn], FixFn]:
    """Register `fn` as a fix for `kind` under `name`; a second, different fn with that name is an error."""

    def deco(fn: FixFn) -> FixFn:
        table = FIXES.setdefault(kind, {})
        if name in table and table[name].fn is not fn:
            raise ValueError(f"fix {name!r} for {kind.value} is already registered; pick another name")
        table[name] = Fix(kind, name, fn)
        return fn

    return deco


def propose_fix(kind: FailureKind | str, config: dict[str, Any]) -> tuple[str, dict[str, Any], str] | None:
    """(fix name, overrides, description) of the first registered fix that applies, else None."""
    for fix in FIXES.get(FailureKind(kind), {}).values():
        out = fix.fn(config)
        if out is not None:
            return (fix.name, *out)
    return None


def _find(
    cfg: dict[str, Any], keys: set[str], path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], Any]]:
    for k, v in cfg.items():
        if isinstance(v, dict):
            yield from _find(v, keys, (*path, k))
        elif k in keys:
            yield (*path, k), v


def _nest(path: tuple[str, ...], value: Any, into: dict[str, Any]) -> None:
    node = into
    for k in path[:-1]:
        node = node.setdefault(k, {})
    node[path[-1]] = value


def _scale(cfg: dict[str, Any], keys: set[str], ok: Callable[[Any], bool], new: Callable[[Any], Any]):
    overrides: dict[str, Any] = {}
    changes = []
    for path, value in _find(cfg, keys):
        if ok(value):
            _nest(path, new(value), overrides)
            changes.append(f"{'.'.join(path)} {value} -> {new(value)}")
    return (overrides, ", ".join(changes)) if overrides else None


_MICRO_BATCH_KEYS = {
    "micro_batch_size",
    "ppo_micro_batch_size",
    "ppo_micro_batch_size_per_gpu",
    "micro_batch_size_per_gpu",
    "train_micro_batch_size_per_gpu",
}


@register_fix(FailureKind.OOM, "halve_micro_batch")
def halve_micro_batch(cfg: dict[str, Any]):
    is_int = lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 1  # noqa: E731
    halve = lambda v: max(1, v // 2)  # noqa: E731
    micro = _scale(cfg, _MICRO_BATCH_KEYS, is_int, halve)
    if micro is None:
        return None
    overrides, said = micro
    # The torch trainer stacks packed micro-batches into one pass up to this budget: unhalved, the pass
    # would keep its size (and its memory) with twice as many smaller micro-batches in it.
    for path, value in _find(cfg, {"pass_max_tokens"}):
        if is_int(value):
            _nest(path, halve(value), overrides)
            said += f", {'.'.join(path)} {value} -> {halve(value)}"
    return overrides, said


@register_fix(FailureKind.NAN_DIVERGENCE, "halve_lr")
def halve_lr(cfg: dict[str, Any]):
    is_pos = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0  # noqa: E731
    return _scale(cfg, {"lr", "learning_rate"}, is_pos, lambda v: v / 2)
