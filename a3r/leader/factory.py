"""Which policy leads a campaign: the LLM policy when an endpoint is configured, else the offline one. It sits
above both (the LLM policy builds on the offline one), so neither imports the other's chooser."""

from __future__ import annotations

from a3r.leader.policy import OfflinePolicy, Policy

__all__ = ["make_policy"]


def make_policy(
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    model: str | None = None,
    offline: bool = False,
) -> Policy:
    """The LLM policy when an endpoint is configured (arguments, else A3R_LLM_BASE_URL / A3R_LLM_API_KEY /
    A3R_LLM_MODEL), otherwise the offline policy. `offline=True` forces the offline one."""
    if offline:
        return OfflinePolicy()
    # The endpoint and the LLM policy import the OpenAI SDK (~2 s on this machine): only when not offline.
    from a3r.leader.endpoint import endpoint_from_env

    endpoint = endpoint_from_env(base_url, model, api_key)
    if endpoint is None:
        return OfflinePolicy()
    from a3r.leader.llm import LLMPolicy

    return LLMPolicy(base_url=endpoint.base_url, api_key=endpoint.api_key, model=endpoint.model)
