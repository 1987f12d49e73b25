"""Typed registries for the two algorithm kinds: advantage estimators and policy losses.

Each kind has exactly one call signature, written down as a Protocol below. Registration checks a
function's parameters against its kind's Protocol (names, order, keyword-only, which have defaults),
rejects a *different* function under a name already taken (re-registering the same function is a no-op),
and may attach recommended config defaults (e.g. GSPO's tiny clip range). Lookups that miss raise
`UnknownName` (a KeyError) listing the valid names.

Built-ins (advantages `grpo`, `rloo`; policy losses `ppo_clip`, `dapo`, `gspo`, `nll`) are declared with their
defaults in the torch-free `engine.algorithms.builtins`: names and defaults come from there, and the torch
module implementing them is imported on the first lookup of a function (or a registration under a built-in
name), so validating a config never imports torch. This module imports no torch either.

HACPO is deliberately NOT registered: its advantage needs each sample's source agent, the learner and the
agents' capabilities, and its loss needs per-sequence source log-probs from another tokenizer, omega and
the mini-batch index m. None of that fits these signatures, so `engine.algorithms.hacpo` has a dedicated
API instead of widening every signature for one algorithm.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from engine.algorithms.builtins import BUILTIN_ADVANTAGES, BUILTIN_POLICY_LOSSES, BuiltinTable
from engine.algorithms.config import AdvantageConfig, LossConfig
from engine.algorithms.errors import AlgorithmError, DuplicateAlgorithm, SignatureMismatch, UnknownName

if TYPE_CHECKING:  # annotations only: importing torch here would put it in every config-validating process
    import torch

    from engine.algorithms._groups import GroupIds

__all__ = [
    "estimator_config",
    "policy_loss_config",
    "AdvantageEstimator",
    "PolicyLoss",
    "Registry",
    "advantage_defaults",
    "advantage_names",
    "get_advantage_estimator",
    "get_policy_loss",
    "policy_loss_defaults",
    "policy_loss_names",
    "register_advantage",
    "register_policy_loss",
]

class AdvantageEstimator(Protocol):
    """rewards_N (one scalar per sample) and their task groups -> advantages_N (constants for the loss)."""

    def __call__(
        self, *, rewards_N: torch.Tensor, group_ids_N: GroupIds, cfg: AdvantageConfig
    ) -> torch.Tensor: ...


class PolicyLoss(Protocol):
    """Per-token log-probs of B sequences of T tokens -> (scalar loss to minimise, float metrics).

    logp_BT has grad (current policy); old_logp_BT is the sampling policy's; advantages_B one per sequence;
    mask_BT 1 on trainable tokens; weights_B multiplicative sample weights; ref_logp_BT (reference policy)
    is needed when cfg.kl_coef > 0, entropy_BT when cfg.entropy_coef > 0; either is reported when given.
    """

    def __call__(
        self,
        *,
        logp_BT: torch.Tensor,
        old_logp_BT: torch.Tensor,
        advantages_B: torch.Tensor,
        mask_BT: torch.Tensor,
        weights_B: torch.Tensor,
        cfg: LossConfig,
        ref_logp_BT: torch.Tensor | None = None,
        entropy_BT: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]: ...


F = TypeVar("F", bound=Callable[..., Any])
_NAME = re.compile(r"[a-z][a-z0-9_]*")


def _shape(fn: Callable[..., Any]) -> list[tuple[str, Any, bool]]:
    """(name, kind, has_default) per parameter, `self` dropped."""
    params = inspect.signature(fn).parameters.values()
    return [(p.name, p.kind, p.default is not p.empty) for p in params if p.name != "self"]


class Registry(Generic[F]):
    """Name -> function for one kind, with the kind's signature enforced at registration.

    `builtins` declares the kind's built-in names and defaults: they are known before their module is imported
    (names, defaults), and the module is imported when one of their functions is first looked up.
    """

    def __init__(self, kind: str, protocol: type, builtins: BuiltinTable | None = None) -> None:
        self.kind = kind
        self._expected = _shape(protocol.__call__)
        self._builtins = builtins
        self._fns: dict[str, F] = {}
        self._defaults: dict[str, dict[str, Any]] = {}

    def register(self, name: str, defaults: Mapping[str, Any] | None = None) -> Callable[[F], F]:
        """Decorator registering `fn` under `name`, with recommended config field values `defaults`."""
        if not _NAME.fullmatch(name):
            raise ValueError(f"{self.kind} name {name!r} must be lower_snake_case (it is a config key)")

        def decorator(fn: F) -> F:
            got = _shape(fn)
            if got != self._expected:
                raise SignatureMismatch(
                    f"{self.kind} {name!r} ({fn.__qualname__}) has parameters {_describe(got)}; "
                    f"every {self.kind} must take exactly {_describe(self._expected)}"
                )
            new_defaults = self._checked_defaults(name, fn, defaults)
            old = self._fns.get(name)
            if old is not None and (not _same(old, fn) or self._defaults[name] != new_defaults):
                raise DuplicateAlgorithm(
                    f"{self.kind} {name!r} is already registered to {old.__module__}.{old.__qualname__}; "
                    f"pick another name for {fn.__module__}.{fn.__qualname__}"
                )
            self._fns[name] = fn
            self._defaults[name] = new_defaults
            return fn

        return decorator

    def _checked_defaults(self, name: str, fn: F, defaults: Mapping[str, Any] | None) -> dict[str, Any]:
        """The defaults `fn` registers under `name`: a built-in's come from its declaration in `builtins`."""
        table = self._builtins
        if table is None:
            return dict(defaults or {})
        if fn.__module__ == table.module:
            if name not in table.defaults:
                raise AlgorithmError(
                    f"built-in {self.kind} {name!r} ({fn.__qualname__}) is not declared in "
                    f"engine.algorithms.builtins; add it there so configs can name it without importing torch"
                )
            declared = dict(table.defaults[name])
            if defaults is not None and dict(defaults) != declared:
                raise AlgorithmError(
                    f"built-in {self.kind} {name!r} registers defaults {dict(defaults)} but "
                    f"engine.algorithms.builtins declares {declared}; change the declaration, not the decorator"
                )
            return declared
        if name in table.defaults:
            self._load_builtins()  # the built-in registers first, so the clash below names it
        return dict(defaults or {})

    def _load_builtins(self) -> None:
        # Imported by name, not at module level: it imports torch and registers into this registry.
        if self._builtins is not None:
            importlib.import_module(self._builtins.module)

    def _unknown(self, name: str) -> UnknownName:
        return UnknownName(f"unknown {self.kind} {name!r}; valid names: {', '.join(self.names())}")

    def get(self, name: str) -> F:
        if name not in self._fns and self._builtins is not None and name in self._builtins.defaults:
            self._load_builtins()
        try:
            return self._fns[name]
        except KeyError:
            raise self._unknown(name) from None

    def defaults(self, name: str) -> dict[str, Any]:
        """The config defaults `name` registered (a built-in's declared ones, without importing it)."""
        if name in self._fns:
            return dict(self._defaults[name])
        if self._builtins is not None and name in self._builtins.defaults:
            return dict(self._builtins.defaults[name])
        raise self._unknown(name)

    def names(self) -> tuple[str, ...]:
        """Every registered name and every declared built-in, whether or not its module is imported yet."""
        declared = self._builtins.defaults if self._builtins is not None else {}
        return tuple(sorted({*self._fns, *declared}))

    def loaded(self) -> dict[str, F]:
        """The functions registered so far (a built-in only once its module has been imported)."""
        return dict(self._fns)


def _same(a: Callable[..., Any], b: Callable[..., Any]) -> bool:
    # A module re-import creates a new function object for the same definition; that is not a conflict.
    return a is b or (a.__module__, a.__qualname__) == (b.__module__, b.__qualname__)


def _describe(shape: list[tuple[str, Any, bool]]) -> str:
    kw = {inspect.Parameter.KEYWORD_ONLY: "keyword-only", inspect.Parameter.VAR_KEYWORD: "**"}
    parts = [f"{n}{'=default' if d else ''} ({kw.get(k, 'positional')})" for n, k, d in shape]
    return "[" + ", ".join(parts) + "]"


_ADVANTAGES: Registry[AdvantageEstimator] = Registry("advantage estimator", AdvantageEstimator, BUILTIN_ADVANTAGES)
_POLICY_LOSSES: Registry[PolicyLoss] = Registry("policy loss", PolicyLoss, BUILTIN_POLICY_LOSSES)


def register_advantage(name: str, defaults: Mapping[str, Any] | None = None) -> Callable[[F], F]:
    """`@register_advantage("grpo")`; `defaults` are recommended AdvantageConfig field values."""
    return _ADVANTAGES.register(name, defaults)


def register_policy_loss(name: str, defaults: Mapping[str, Any] | None = None) -> Callable[[F], F]:
    """`@register_policy_loss("gspo", defaults={...})`; `defaults` are recommended LossConfig field values."""
    return _POLICY_LOSSES.register(name, defaults)


def get_advantage_estimator(name: str) -> AdvantageEstimator:
    return _ADVANTAGES.get(name)


def get_policy_loss(name: str) -> PolicyLoss:
    return _POLICY_LOSSES.get(name)


def advantage_names() -> tuple[str, ...]:
    return _ADVANTAGES.names()


def policy_loss_names() -> tuple[str, ...]:
    return _POLICY_LOSSES.names()


def advantage_defaults(name: str) -> dict[str, Any]:
    return _ADVANTAGES.defaults(name)


def policy_loss_defaults(name: str) -> dict[str, Any]:
    return _POLICY_LOSSES.defaults(name)


def estimator_config(name: str, **overrides: Any) -> AdvantageConfig:
    """The config an estimator registered as its default, with `overrides` on top."""
    return AdvantageConfig(**{**advantage_defaults(name), **overrides})


def policy_loss_config(name: str, **overrides: Any) -> LossConfig:
    """The config a policy loss registered as its default (e.g. gspo: 3e-4/4e-4), with `overrides` on top."""
    return LossConfig(**{**policy_loss_defaults(name), **overrides})
