"""Import a client folder's modules by file path (used inside sandboxed subprocesses only)."""

from __future__ import annotations

import importlib.util
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from vibe.layout import REQUIRED_FUNCTIONS

__all__ = ["client_roles", "contract_function", "load_module"]


def load_module(root: Path, filename: str) -> ModuleType:
    """Import `root/filename` as a module named after the file; the folder goes on sys.path so a
    client's own helper modules import as they would when run from the folder."""
    if str(root) in sys.path:
        sys.path.remove(str(root))
    sys.path.insert(0, str(root))  # first, ahead of any other client folder loaded in this process
    # a client's helper modules (`from reward import score`) are plain top-level names: one cached from
    # another client folder in this process must not stand in for this folder's own
    for local in root.glob("*.py"):
        cached = sys.modules.get(local.stem)
        if cached is not None and Path(getattr(cached, "__file__", "") or "").resolve() != local.resolve():
            del sys.modules[local.stem]
    name = "vibe_client_" + Path(filename).stem
    spec = importlib.util.spec_from_file_location(name, root / filename)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {filename}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def contract_function(module: ModuleType, filename: str) -> Callable:
    """The function the layout contract requires of `filename`, checked to take its parameters."""
    fname, params = REQUIRED_FUNCTIONS[filename]
    fn = getattr(module, fname, None)
    if not callable(fn):
        raise TypeError(f"{filename} must define {fname}({', '.join(params)})")
    try:
        inspect.signature(fn).bind(*params)
    except TypeError as e:
        raise TypeError(f"{filename}: {fname} must accept ({', '.join(params)}) positionally: {e}") from e
    except ValueError:
        pass  # builtins without a signature: calling it will tell
    return fn


def client_roles(module: Any) -> list[str]:
    """The module's ROLES, validated (empty for a single-role client)."""
    roles = getattr(module, "ROLES", None)
    if roles is None:
        return []
    if not (isinstance(roles, (list, tuple)) and roles and all(isinstance(r, str) and r for r in roles)
            and len(set(roles)) == len(roles)):
        raise TypeError("client.py: ROLES must be a list of distinct non-empty role names")
    return list(roles)
