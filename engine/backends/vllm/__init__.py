"""`backend: vllm`: vLLM rollouts token-in/token-out, the torch trainer on the same CUDA host.

`VllmInference` (the HTTP adapter) imports only httpx, so it is importable and tested on CPU; the backend
itself (`engine.backends.vllm.backend`) needs CUDA and vLLM at boot.
"""

from engine.backends.vllm.inference import VllmError, VllmInference

__all__ = ["VllmError", "VllmInference"]
