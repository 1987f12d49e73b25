"""The swarm training engine: one trainable model per server, agents anywhere, token-level tracking."""

__version__ = "0.1.0"
