"""`backend: verl` building blocks: SwarmConfig -> verl config (`config`), pooled samples <-> DataProto
(`dataproto`), and the project's losses/estimators in verl's registries (`register`, imports verl).

`names`, `config.verl_overrides` and `dataproto.pack_samples/unpack_samples` import no verl; the rest
imports it lazily. What is and is not shipped yet: docs/engine.md, "GPU backends".
"""
