"""Vibe training: a natural-language task description becomes a checked swarm training client.

`vibe new` writes a client folder (from an LLM endpoint, or an offline template), `vibe check` validates
it (sandboxed imports, dataset, reward probes, a dry run against a local debug server, one training
step), and `vibe train` trains it in tmux sessions. The folder layout is fixed in `vibe.layout`.
"""
