"""oneDNN-prepacked weights for the inference engine's linear layers on CPU (a decode-time fast path).

Decoding multiplies a handful of rows by every weight matrix: `F.linear` with M = 1..16 rows runs at about
a third of the machine's memory bandwidth on the 2-core CPU this was measured on, while oneDNN with the
weight reordered once into its blocked layout runs 1.5-2.5x faster for those shapes and no slower for
prefill-sized ones (`benchmarks/generation_throughput.py --compare-linear`, docs/benchmarks/generation.md).
Results agree with `F.linear` to float32 rounding (a different summation order), far below the 1e-4 the recorded
log-probs are tested at.

The packed copy is used only under `torch.inference_mode()`, which the inference engine's compute thread
always runs in; training (grad enabled) and no-grad reference passes take the module's own forward. The
trainer updates weights in place while inference is paused; every in-place update bumps the tensor's
version counter, so a stale packed copy is detected on the next call and re-packed (about 0.1 s for all of
SmolLM2-135M), never served. It costs one extra copy of the linear weights in memory.
"""

from __future__ import annotations

import logging
import types
from typing import Any

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)

_PACK_ROWS_HINT = 1  # decode rows: what the packing is tuned for; other row counts still work


def available() -> bool:
    """oneDNN's packed linear ops exist in this torch build and agree with F.linear on a probe."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        w, x = torch.randn(24, 16), torch.randn(3, 16)
        with torch.inference_mode():
            packed = torch.ops.mkldnn._reorder_linear_weight(w, _PACK_ROWS_HINT)
            y = torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
        return torch.allclose(y, F.linear(x, w), atol=1e-5, rtol=1e-5)
    except (AttributeError, RuntimeError):
        return False


class _Packed:
    """The packed copy of one module's weight and the weight version it was made from."""

    __slots__ = ("tensor", "version", "ptr")

    def __init__(self) -> None:
        self.tensor: torch.Tensor | None = None
        self.version = -1
        self.ptr = 0


def _fast_forward(module: torch.nn.Linear, original: Any, packed: _Packed):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if not torch.is_inference_mode_enabled() or x.dtype != torch.float32 or w.dtype != torch.float32:
            return original(x)
        if packed.version != w._version or packed.ptr != w.data_ptr():
            packed.tensor = torch.ops.mkldnn._reorder_linear_weight(w.detach(), _PACK_ROWS_HINT)
            packed.version, packed.ptr = w._version, w.data_ptr()
        return torch.ops.mkldnn._linear_pointwise(x, packed.tensor, self.bias, "none", [], "")

    return types.MethodType(forward, module)


def install(model: torch.nn.Module) -> int:
    """Give every float32 CPU `nn.Linear` of `model` the inference fast path; returns how many.

    Idempotent. Does nothing (returns 0) when the ops are unavailable.
    """
    if not available():
        log.info("oneDNN packed linear unavailable; inference uses F.linear")
        return 0
    n = 0
    for module in model.modules():
        if not isinstance(module, torch.nn.Linear) or getattr(module, "_swarm_packed", False):
            continue
        if module.weight.device.type != "cpu" or module.weight.dtype != torch.float32:
            continue
        module.forward = _fast_forward(module, module.forward, _Packed())
        module._swarm_packed = True
        n += 1
    return n


def uninstall(model: torch.nn.Module) -> int:
    """Undo `install`: the modules get their own forward back and the packed copies are freed."""
    n = 0
    for module in model.modules():
        if getattr(module, "_swarm_packed", False):
            del module.forward, module._swarm_packed
            n += 1
    return n
