"""Tokenizer helpers every backend needs: a pad token for batching and the ids that end an assistant turn."""

from __future__ import annotations

from typing import Any

# Special tokens that close a turn (or a document) in common chat formats: ChatML / Qwen / SmolLM
# (<|im_end|>, <|endoftext|>), Llama 3 (<|eot_id|>, <|eom_id|> after a tool call, <|end_of_text|>),
# Phi-3 (<|end|>), Gemma (<end_of_turn>), sentencepiece models (</s>). Only tokens the tokenizer registers
# as special or added count, so an ordinary vocabulary entry that happens to spell one never stops decoding.
_END_OF_TURN_TOKENS = (
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end_of_text|>",
    "<|end|>",
    "<end_of_turn>",
    "</s>",
)


def _as_list(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [int(v) for v in value if v is not None]
    return [int(value)]


def end_of_turn_ids(tokenizer: Any, generation_config: Any = None) -> list[int]:
    """Sorted ids that end generation: the tokenizer's eos, the generation config's eos list and known
    end-of-turn specials (see `_END_OF_TURN_TOKENS`) the tokenizer actually has."""
    ids = set(_as_list(getattr(tokenizer, "eos_token_id", None)))
    if generation_config is not None:
        ids.update(_as_list(getattr(generation_config, "eos_token_id", None)))
    special = set(getattr(tokenizer, "all_special_tokens", []) or [])
    try:
        special.update(tokenizer.get_added_vocab())
    except (AttributeError, NotImplementedError):
        pass
    vocab = tokenizer.get_vocab()
    for tok in _END_OF_TURN_TOKENS:
        if tok in special and tok in vocab:
            ids.add(int(vocab[tok]))
    return sorted(ids)


def ensure_pad_token(tokenizer: Any) -> int:
    """Give the tokenizer a pad token if it has none and return its id.

    Reuses eos (then unk) rather than adding a new token: a new token would need a resized embedding, and
    pad positions are always masked out, so which id fills them does not matter.
    """
    if tokenizer.pad_token_id is None:
        for candidate in (tokenizer.eos_token, tokenizer.unk_token):
            if candidate is not None:
                tokenizer.pad_token = candidate
                break
        else:
            raise ValueError("tokenizer has no pad, eos or unk token to pad with; set tokenizer.pad_token")
    return int(tokenizer.pad_token_id)
