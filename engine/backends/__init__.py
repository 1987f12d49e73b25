"""Backends behind one interface: `torch` (embedded default), `vllm` (one CUDA host) and `verl` (building
blocks; lazy imports). `engine.backends.factory` maps the config's `backend` key to one of them."""
