"""Judge reward: the LLM judge of vibe.yaml's `judge:` grades the reply against its rubric, in [0, 1].

`grade` reaches the judge outside the sandbox (vibe.judge_client); the judge's key never reaches this
code, and its calls never train. A reply the judge cannot grade raises (fallback: exclude), so that
episode is never trained on a made-up reward.
"""

from vibe.judge_client import grade


def score(task, response):
    return {"judge": grade(task["prompt"], response)}
