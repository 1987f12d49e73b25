"""Resolve a model name to a local Hugging Face directory and load it, never touching the network."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from engine.config import ModelConfig
from engine.errors import ModelLoadError
from engine.models import builtins
from engine.models.tokens import end_of_turn_ids, ensure_pad_token

log = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LoadedModel:
    """A model ready for inference and training: eval mode, tokenizer with a pad token."""

    model: Any  # transformers PreTrainedModel (a torch nn.Module)
    tokenizer: Any
    name: str
    path: Path  # the plain local HF directory the weights were read from
    end_of_turn_ids: list[int] = field(default_factory=list)


def _hint(name: str) -> str:
    return (
        f"unknown model {name!r}: use a built-in ({', '.join(repr(b) for b in builtins.BUILTINS)}), "
        "a local Hugging Face directory (with config.json), a .gguf file, or a hub id already in the "
        "local Hugging Face cache (hub downloads are never attempted: fetch it elsewhere and pass its directory)"
    )


def _from_hf_cache(repo_id: str) -> Path | None:
    """A hub id's snapshot if it is already in the local HF cache; no network request is made."""
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:  # not cached, invalid id, or huggingface_hub missing: all mean "not available"
        return None


def resolve_model_dir(name: str, *, seed: int = 0) -> Path:
    """The local HF directory for `name`, converting (once) built-ins and GGUF files into the cache.

    `seed` selects the random weights of `tiny`; other names ignore it.
    """
    key = name.strip().lower()
    if key == builtins.TINY:
        return builtins.tiny_dir(seed)
    if key == builtins.TINY_BYTES:
        return builtins.tiny_bytes_dir(seed)
    if key == builtins.SMOLLM2:
        return builtins.smollm2_dir()
    if key == builtins.GEMMA3:
        return builtins.gemma3_dir()
    path = Path(name).expanduser()
    if path.suffix.lower() == ".gguf":
        if not path.is_file():
            raise ModelLoadError(f"GGUF file {path} does not exist")
        return builtins.gguf_dir(path)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelLoadError(
                f"{path} is a directory but not a Hugging Face model (no config.json); {_hint(name)}"
            )
        return path
    if name.count("/") == 1 and not name.startswith((".", "/", "~")):
        cached = _from_hf_cache(name)
        if cached is not None and (cached / "config.json").is_file():
            return cached
    raise ModelLoadError(_hint(name))


def resolve_tokenizer_dir(name: str, *, seed: int = 0) -> Path:
    """A local directory holding `name`'s tokenizer. For SmolLM2 that is the tokenizer alone, so a caller
    that only counts tokens (vibe check's token budget) skips the 20 s conversion of its weights."""
    if name.strip().lower() == builtins.SMOLLM2:
        return builtins.smollm2_tokenizer_dir()
    return resolve_model_dir(name, seed=seed)


def load_model(cfg: ModelConfig, *, device: str | torch.device | None = None) -> LoadedModel:
    """Load `cfg.name` in `cfg.dtype` on `device` (default: CUDA when available, else CPU), in eval mode."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model_dir(cfg.name, seed=cfg.seed)
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=_DTYPES[cfg.dtype], local_files_only=True)
    except (OSError, ValueError, KeyError) as e:
        raise ModelLoadError(f"cannot load model {cfg.name!r} from {path}: {e}") from e
    ensure_pad_token(tokenizer)
    model.to(device)
    model.eval()
    eot = end_of_turn_ids(tokenizer, getattr(model, "generation_config", None))
    return LoadedModel(model=model, tokenizer=tokenizer, name=cfg.name, path=path, end_of_turn_ids=eot)
