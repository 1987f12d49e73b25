"""Client SDK: drive a swarm server and run episodes against it from any agent code."""

from engine.client.client import Episode, EpisodeOutcome, SwarmClient, SwarmHTTPError
from engine.client.group import EpisodeGroup
from engine.client.runner import RunnerResult, run_episodes, run_groups

__all__ = [
    "Episode",
    "EpisodeGroup",
    "EpisodeOutcome",
    "RunnerResult",
    "SwarmClient",
    "SwarmHTTPError",
    "run_episodes",
    "run_groups",
]
