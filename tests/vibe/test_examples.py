"""`vibe new "<task>" --examples FILE.jsonl`: matchers against hand-made replies, the choice of matcher,
the refusals (each names the line), and a built client that `vibe check` passes."""

from __future__ import annotations

import json

import pytest

from vibe.answer_match import Matcher, matches
from vibe.check import check
from vibe.cli import main
from vibe.examples import Example, check_matcher, pick_matcher, read_examples


@pytest.mark.parametrize("matcher, reply, answer, choices, hit", [
    (Matcher.NUMERIC, "12 + 7 = 19", "19", (), True),
    (Matcher.NUMERIC, "it is 1,456.", "1456", (), True),
    (Matcher.NUMERIC, "19 or maybe 20", "19", (), False),  # the last number counts
    (Matcher.NUMERIC, "no number", "3", (), False),
    (Matcher.CHOICE, "Yes, it is.", "yes", ("yes", "no"), True),
    (Matcher.CHOICE, "yes or no", "yes", ("yes", "no"), False),  # naming every choice earns nothing
    (Matcher.CHOICE, "nope", "no", ("yes", "no"), False),  # whole words only
    (Matcher.NORMALISED, "  the Eiffel   tower!", "The Eiffel Tower", (), True),
    (Matcher.NORMALISED, "the Eiffel tower is tall", "The Eiffel Tower", (), False),
    (Matcher.EXACT, " XK-7 \n", "XK-7", (), True),
    (Matcher.EXACT, "xk-7", "XK-7", (), False),
])
def test_matchers_against_hand_made_replies(matcher, reply, answer, choices, hit):
    assert matches(matcher, reply, answer, choices) is hit


def ex(*pairs):
    return [Example(i + 1, p, a) for i, (p, a) in enumerate(pairs)]


def test_the_matcher_is_picked_from_the_answers():
    assert pick_matcher(ex(("2+2?", "4"), ("1/2?", "0.5"), ("3-5?", "-2"))) == (Matcher.NUMERIC, [])
    assert pick_matcher(ex(("7?", "Yes"), ("8?", "no"), ("9?", "no"))) == (Matcher.CHOICE, ["Yes", "no"])
    assert pick_matcher(ex(("a?", "New York"), ("b?", "Paris"), ("c?", "Rome"))) == (Matcher.NORMALISED, [])
    assert pick_matcher(ex(("a?", "XK-7"), ("b?", "QZ-2"), ("c?", "AB-1"))) == (Matcher.EXACT, [])


def test_the_matcher_is_checked_on_every_example():
    leaky = ex(("What is 6 * 7? Hint: 42", "42"), ("What is 2 * 3?", "6"))
    [problem] = check_matcher(Matcher.NUMERIC, [], leaky)
    assert problem.startswith("line 1: repeating the prompt matches the answer '42'")
    # a choice that is a number in another spelling still matches under the numeric rule: named as wrong
    assert check_matcher(Matcher.NUMERIC, ["4", "4.0"], ex(("Two and two?", "4"),)) == ["line 1: the wrong choice '4.0' matches"]
    assert check_matcher(Matcher.CHOICE, ["red", "blue"], ex(("Pick: red or blue?", "red"),)) == []
    assert check_matcher(Matcher.NUMERIC, [], ex(("What is 2 * 3?", "6"), ("Half of 1?", "0.5"))) == []


def write_lines(path, lines):
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def test_bad_examples_are_refused_naming_the_line(tmp_path):
    good = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(5)]
    with pytest.raises(Exception, match="line 2: not JSON"):
        read_examples(write_lines(tmp_path / "a.jsonl", [good[0], "{oops", *good[1:]]))
    with pytest.raises(Exception, match='line 1: needs a non-empty "prompt" and "answer"'):
        read_examples(write_lines(tmp_path / "b.jsonl", [{"prompt": "x"}, *good]))
    with pytest.raises(Exception, match="line 6: the same prompt as line 1"):
        read_examples(write_lines(tmp_path / "c.jsonl", [*good, {"prompt": "what is 0  + 1", "answer": "1"}]))
    with pytest.raises(Exception, match="has 2 example"):
        read_examples(write_lines(tmp_path / "d.jsonl", good[:2]))
    assert [e.answer for e in read_examples(write_lines(tmp_path / "e.jsonl", [{"prompt": "p?", "gold": 3}, *good]))][0] == "3"


def test_new_with_examples_builds_the_task_asked_for_and_it_checks(sandboxed, tmp_path, capsys):
    rows = [{"prompt": f"Is {n} a prime number? Answer yes or no.", "answer": "yes" if all(n % d for d in range(2, n)) else "no"}
            for n in range(2, 14)]
    src = write_lines(tmp_path / "prime.jsonl", rows)
    task = "Make the model answer yes/no questions about whether a number is prime"
    out = tmp_path / "prime"
    assert main(["new", task, "--examples", str(src), "--out", str(out), "--no-check"]) == 0
    readme = (out / "README.md").read_text()
    assert readme.startswith(f"# {task}") and "matcher `choice`" in readme and "'yes', 'no'" in readme
    assert "arithmetic" not in readme  # the qa template's README is not left describing another task
    assert "Matcher.CHOICE" in (out / "reward.py").read_text()
    tasks = [json.loads(line) for f in ("train", "test") for line in (out / "data" / f"{f}.jsonl").read_text().splitlines()]
    assert sorted(t["prompt"] for t in tasks) == sorted(r["prompt"] for r in rows)
    r = check(out, dry_run=False)  # layout, data (not stale), reward probes and whole-loop probes
    assert r.passed, r.render()

    leaky = write_lines(tmp_path / "leaky.jsonl", [{"prompt": f"{i} + 1 = ? (it is {i + 1})", "answer": str(i + 1)} for i in range(6)])
    capsys.readouterr()
    assert main(["new", "add one", "--examples", str(leaky), "--out", str(tmp_path / "leaky")]) == 2
    err = capsys.readouterr().err
    assert "numeric answer matcher" in err and "the prompt gives it away" in err
    assert not (tmp_path / "leaky").exists()  # refused before anything was written
