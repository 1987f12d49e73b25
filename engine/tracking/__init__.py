"""Context tracking: render chat requests with the model's own template, record every call's timeline,
merge prefix-sharing timelines into weighted training samples.

Modules: `chat` (render_prompt, tool-call text), `messages` (request validation), `tracker`
(ContextTracker), `history` (re-sent replies fed as their sampled ids), `merging` (merge_timelines,
episode_samples).
"""

from engine.tracking.chat import RenderedPrompt, format_tool_calls, parse_tool_calls, render_prompt
from engine.tracking.merging import MERGE_MODES, MergeMode, episode_samples, merge_timelines, strip_reasoning
from engine.tracking.messages import validate_messages, validate_tools
from engine.tracking.tracker import ContextTracker

__all__ = [
    "RenderedPrompt",
    "render_prompt",
    "parse_tool_calls",
    "format_tool_calls",
    "validate_messages",
    "validate_tools",
    "ContextTracker",
    "MergeMode",
    "MERGE_MODES",
    "merge_timelines",
    "episode_samples",
    "strip_reasoning",
]
