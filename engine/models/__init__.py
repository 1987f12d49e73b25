"""Model loading: built-ins that work offline (`tiny`, `tiny-bytes`, `smollm2-135m`, `gemma3-270m`), local HF
directories and GGUF files.

Everything resolves to a plain local Hugging Face directory (converted once into the cache, see
`engine.models.cache`) and loads with `local_files_only=True`: the hub is never contacted.
"""

from engine.models.builtins import BUILTINS
from engine.models.cache import cache_root
from engine.models.loader import LoadedModel, load_model, resolve_model_dir
from engine.models.tokens import end_of_turn_ids, ensure_pad_token

__all__ = [
    "BUILTINS",
    "LoadedModel",
    "cache_root",
    "end_of_turn_ids",
    "ensure_pad_token",
    "load_model",
    "resolve_model_dir",
]
