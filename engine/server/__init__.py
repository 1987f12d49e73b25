"""The swarm server: OpenAI-compatible inference, episode lifecycle, control plane, pool and training."""
