"""The defect battery of issue 27: each defect class is a client (the qa template with one defect planted)
that `vibe check` must fail with a message naming it. Static stages only (`dry_run=False`): every check
here is decided before a debug server would start, so the battery stays cheap. The sandbox attacks are in
test_sandbox_attacks.py, stale data and the train gate in test_check_sandbox.py, a play that hangs in training in
test_train.py."""

from __future__ import annotations

import json

import pytest

from vibe.check import check
from vibe.data_writer import write_data
from vibe.flags import Stage
from vibe.layout import ClientDir

REPLY = 'out.choices[0].message.content or ""'
LONG_GOLD = ("After thinking about the question very carefully and checking every step of the working twice, "
             "I am fully confident that the correct value you asked me for is {answer}, and nothing else at all, "
             "as anyone who repeats the same sum will find")


def edit(root, filename: str, old: str, new: str) -> None:
    text = (root / filename).read_text()
    assert old in text, f"{filename} no longer holds {old!r}: update the fixture"
    (root / filename).write_text(text.replace(old, new))


def regenerate(root) -> None:
    """Rewrite data/ from the edited make_data.py (else the check stops at data_stale)."""
    write_data(ClientDir.open(root))


def constant_reward(root):  # calls the model, then scores a constant (the constant-42 client)
    edit(root, "client.py", f"score(task, {REPLY})", 'score(task, "42")')


def unreachable_gold(root):  # a 40-word gold under exact match, max_tokens 16 (qa's vibe.yaml)
    edit(root, "make_data.py", '"gold": str(answer),', f'"gold": {LONG_GOLD!r}.format(answer=answer),')
    (root / "reward.py").write_text('def score(task, response):\n'
                                    '    return {"exact": 1.0 if response.strip() == task["gold"] else 0.0}\n')
    regenerate(root)


def leaked_answer(root):  # "The answer is 1456. What is 56 * 26?"
    edit(root, "make_data.py", '"prompt": f"What is', '"prompt": f"The answer is {answer}. What is')
    regenerate(root)


def nan_for_empty_reply(root):
    edit(root, "reward.py", "def score(task, response):\n",
         "def score(task, response):\n    if not response:\n        return {'correct': float('nan')}\n")


def string_component(root):
    edit(root, "reward.py", '1.0 if last_integer(response) == task["answer"] else 0.0',
         '"1.0" if last_integer(response) == task["answer"] else "0.0"')


def intermittent_exception(root):
    edit(root, "reward.py", "def score(task, response):\n",
         "def score(task, response):\n    if '?' in response:\n        raise ValueError('cannot parse')\n")


def overlap_hidden_by_spaces(root):  # five test questions are training questions with doubled spaces
    edit(root, "make_data.py", 'return {"train": tasks[:200], "test": tasks[200:]}',
         'test = [t | {"prompt": tasks[i]["prompt"].replace(" ", "  ")} for i, t in enumerate(tasks[200:205])]\n'
         '    return {"train": tasks[:200], "test": test + tasks[205:]}')
    regenerate(root)


def empty_data(root):
    (root / "data" / "train.jsonl").write_text("")


def run_pays_for_long_replies(root):  # reward.score is sound; run() adds half a point for any long reply
    edit(root, "client.py", f"return score(task, {REPLY})",
         f"reply = {REPLY}\n    return {{'correct': max(score(task, reply)['correct'], 0.5 if len(reply) > 20 else 0.0)}}")


def run_raises_on_some_replies(root):  # parses the reply itself, and crashes on one that is not a number
    edit(root, "client.py", f"return score(task, {REPLY})",
         f"return score(task, str(int(({REPLY}).strip().split()[-1])))")


def hangs_in_first_task(root):  # run() never returns on the first training task
    first = json.loads((root / "data" / "train.jsonl").read_text().splitlines()[0])["id"]
    (root / "client.py").write_text((root / "client.py").read_text() + (
        "\n_run = run\n\n\ndef run(llm, model, task, sampling):\n    import time\n"
        f"    while task['id'] == {first!r}:\n        time.sleep(1)\n    return _run(llm, model, task, sampling)\n"))
    # plays are given up after half of check.timeout_s
    (root / "vibe.yaml").write_text((root / "vibe.yaml").read_text() + "check: {timeout_s: 40}\n")


# defect -> (plant it, the stage that must catch it, the flag code, words the message must contain)
BATTERY = {
    "constant_reward": (constant_reward, Stage.LOOP_PROBES, "reward_ignores_output", "the reward ignores the model's output"),
    "unreachable_gold": (unreachable_gold, Stage.LOOP_PROBES, "gold_exceeds_token_budget", "unreachable within max_tokens=16"),
    "leaked_answer": (leaked_answer, Stage.PROBES, "hackable_prompt_span", "the prompt gives the answer away"),
    "nan_for_empty_reply": (nan_for_empty_reply, Stage.PROBES, "reward_not_a_number", "is nan, not a finite number"),
    "string_component": (string_component, Stage.PROBES, "reward_not_a_number", "(str), not a number"),
    "intermittent_exception": (intermittent_exception, Stage.PROBES, "score_raises_intermittently", "e.g. task"),
    "overlap_hidden_by_spaces": (overlap_hidden_by_spaces, Stage.DATASET, "train_test_overlap", "test"),
    "empty_data": (empty_data, Stage.DATASET, "train_empty", "vibe data"),
    "run_pays_for_long_replies": (run_pays_for_long_replies, Stage.LOOP_PROBES, "loop_hackable_garbage", "a garbage reply scores above"),
    "run_raises_on_some_replies": (run_raises_on_some_replies, Stage.LOOP_PROBES, "run_raises_on_reply", "ValueError"),
    "hangs_in_first_task": (hangs_in_first_task, Stage.LOOP_PROBES, "loop_play_timeout", "did not end within 20 s"),
}


@pytest.mark.parametrize("defect", BATTERY)
def test_each_defect_fails_the_check_with_a_message_naming_it(qa_client, defect):
    plant, stage, code, words = BATTERY[defect]
    plant(qa_client)
    r = check(qa_client, dry_run=False)
    flags = [f for f in r.errors if f.code == code]
    assert flags, f"{defect}: expected {code}, got\n{r.render()}"
    assert flags[0].stage is stage and words in flags[0].message, flags[0].message
    if defect == "hangs_in_first_task":  # the report names the task that hung
        first = json.loads((qa_client / "data" / "train.jsonl").read_text().splitlines()[0])["id"]
        assert f"first: task {first!r}" in flags[0].message


def test_the_unplanted_template_passes_the_same_stages(qa_client):
    # the battery's baseline: without a planted defect the same check passes, loop probes included
    r = check(qa_client, dry_run=False)
    assert r.passed, r.render()
    assert Stage.LOOP_PROBES in r.stages_run and r.stats["loop_plays"] >= 3 * 4
