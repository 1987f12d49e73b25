"""Blueprint schema and the jinja2 templates that turn one blueprint + seed into a run directory."""

from a3r.blueprints.render import RUN_FILES, render_files, write_files
from a3r.blueprints.schema import DEFAULT_LAUNCH_COMMAND, Blueprint, Budget, canonical_json, deep_merge

__all__ = [
    "DEFAULT_LAUNCH_COMMAND",
    "RUN_FILES",
    "Blueprint",
    "Budget",
    "canonical_json",
    "deep_merge",
    "render_files",
    "write_files",
]
