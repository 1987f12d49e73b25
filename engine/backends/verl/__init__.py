"""`backend: verl`: the swarm server training through verl on a Ray cluster (`backend`, needs verl, Ray,
vLLM and CUDA GPUs), and its parts: SwarmConfig -> verl config (`config`), pooled samples <-> DataProto
(`dataproto`), the project's losses/estimators in verl's registries (`register`, imports verl), the
backend's pure decisions (`plan`), a pooled batch -> `update_actor` rows (`update`) and the router over
verl's vLLM replicas (`router`).

`names`, `plan`, `update`, `router`, `config.verl_overrides` and `dataproto.pack_samples/unpack_samples`
import no verl; the rest imports it lazily. What is tested where, and what has not run (the GPU path):
docs/engine.md, "GPU backends".
"""
