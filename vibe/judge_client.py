"""`grade(prompt, reply)`: a vibe client's LLM-judge reward, called from its `reward.py`.

Client code runs sandboxed, without network and without the judge's key. The judge itself runs on the
trusted side (vibe.judge_link) whenever the client's `vibe.yaml` has a `judge:`; this module reaches it
over the unix socket that side announces (`VIBE_JUDGE_URL`, `VIBE_JUDGE_BRIDGE`), carrying the judge's
port into the sandbox's own loopback on first use. Light on purpose: it imports neither torch nor the
engine, so the sandboxed probes still start fast.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from vibe.netbridge import TcpToUnix

__all__ = ["JudgeNotConfigured", "JudgeUngraded", "grade"]

URL_ENV = "VIBE_JUDGE_URL"  # set by vibe.judge_link on the trusted side
BRIDGE_ENV = "VIBE_JUDGE_BRIDGE"
TOKEN_ENV = "VIBE_JUDGE_TOKEN"  # the service's own token: it grades only for the client it was started for
# The judge service applies the judge's own timeouts and retries; this only bounds a hung connection.
TIMEOUT_S = 600.0

_lock = threading.Lock()
_bridge: list[TcpToUnix | None] = []  # set once: the forwarder, or None where none is needed


class JudgeNotConfigured(RuntimeError):
    """No judge here: the client's vibe.yaml has no `judge:` (or this runs outside vibe's sandbox)."""


class JudgeUngraded(RuntimeError):
    """The judge could not grade this reply (fallback=exclude), or refused the request: no reward exists."""


def _url() -> str:
    url = os.environ.get(URL_ENV)
    if not url:
        raise JudgeNotConfigured(f"no LLM judge: add a `judge:` section to vibe.yaml ({URL_ENV} is unset)")
    sock = os.environ.get(BRIDGE_ENV)
    with _lock:
        if sock and not _bridge:
            try:
                _bridge.append(TcpToUnix(urlsplit(url).port, Path(sock)))
            except OSError:  # the port is taken: outside a sandbox, by the judge service itself
                _bridge.append(None)
    return url


def grade(prompt: str, reply: str) -> float:
    """The judge's reward in [0, 1] for `reply` to `prompt` (the fallback score when the judge is set to
    `fallback: default` and could not grade). JudgeUngraded when there is no grade to give."""
    headers = {"Authorization": f"Bearer {os.environ.get(TOKEN_ENV, '')}"}
    r = httpx.post(_url() + "/grade", json={"prompt": prompt, "reply": reply}, headers=headers, timeout=TIMEOUT_S)
    if r.status_code != 200:
        raise JudgeUngraded(f"the judge gave no grade (HTTP {r.status_code}): {r.text[:300]}")
    return float(r.json()["reward"])
