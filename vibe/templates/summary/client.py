"""One-sentence summary: one LLM call, graded by the LLM judge in reward.score."""

from reward import score


def run(llm, model, task, sampling):
    """Play one episode and return the reward components."""
    out = llm.chat.completions.create(
        model=model, messages=[{"role": "user", "content": task["prompt"]}], **sampling
    )
    return score(task, out.choices[0].message.content or "")
