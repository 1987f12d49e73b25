"""The embedded torch backend: transformers models on CPU or one GPU, continuous-batching inference."""

from engine.backends.torch.batch import GenerationStats
from engine.backends.torch.inference import TorchInferenceEngine

__all__ = ["GenerationStats", "TorchInferenceEngine"]
