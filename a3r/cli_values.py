"""Values typed on the command line (`--set key=VALUE`, `--budget key=VALUE`), parsed the way users mean them."""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["parse_value"]


def parse_value(text: str) -> Any:
    """YAML scalars and lists, with one fix: YAML 1.1 reads `2e-5` (no dot) as a string, but on a command
    line it is always meant as the number, so numeric-looking strings become floats."""
    value = yaml.safe_load(text)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value
