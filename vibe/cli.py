"""`vibe`: new (prompt -> client folder), check (validation report), data, train, status, attach."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import ValidationError

from engine.errors import ConfigError
from vibe.exceptions import VibeError


def _say(msg: str) -> None:
    print(f"[vibe] {msg}", flush=True)


def _prompt(args: argparse.Namespace) -> str:
    if args.prompt and args.prompt_file:
        raise VibeError("give the prompt as an argument or with --prompt-file, not both")
    if args.prompt_file:
        try:
            text = Path(args.prompt_file).read_text()
        except OSError as e:
            raise VibeError(f"cannot read --prompt-file {args.prompt_file}: {e.strerror}") from e
    else:
        text = args.prompt or ""
    if not text.strip():
        raise VibeError('describe the task: vibe new "<prompt>" or vibe new --prompt-file FILE')
    return text.strip()


def _cmd_new(args: argparse.Namespace) -> int:
    from a3r.leader.endpoint import endpoint_from_env
    from vibe.new import default_out, new_from_template
    from vibe.templates import Family

    prompt = _prompt(args)
    out = Path(args.out) if args.out else default_out(prompt)
    if args.examples:
        if args.template:
            raise VibeError("--examples builds a QA client from your examples; it does not combine with --template")
        from vibe.new import new_from_examples

        new_from_examples(prompt, Path(args.examples), out)
        return 0 if args.no_check else _print_check(out)
    endpoint = None if args.offline or args.template else endpoint_from_env(args.llm_base_url, args.llm_model)
    if endpoint is None:
        if not (args.offline or args.template):
            _say("no LLM endpoint configured (--llm-base-url/--llm-model or A3R_LLM_BASE_URL/A3R_LLM_MODEL): "
                 "using an offline template")
        new_from_template(prompt, out, Family(args.template) if args.template else None)
        if args.no_check:
            return 0
        return _print_check(out)
    from vibe.generate import generate

    result = generate(prompt, out, endpoint, rounds=args.rounds, echo=_say)
    print(result.report.render())
    _say(f"{len(result.rounds)} round(s) kept in {out / '.vibe' / 'rounds'}")
    return 0 if result.report.passed else 1


def _print_check(path: Path) -> int:
    from vibe.check import check

    report = check(path)
    print(report.render())
    return 0 if report.passed else 1


def _cmd_check(args: argparse.Namespace) -> int:
    from vibe.check import check

    report = check(args.dir, dry_run=not args.no_dry_run)
    print(report.model_dump_json(indent=2) if args.json else report.render())
    return 0 if report.passed else 1


def _cmd_data(args: argparse.Namespace) -> int:
    from vibe.data_writer import write_data
    from vibe.layout import ClientDir

    counts = write_data(ClientDir.open(args.dir), args.seed)
    _say(f"wrote {counts['train']} training and {counts['test']} test tasks to {args.dir}/data")
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from vibe.train_session import launch

    launch(args.dir, steps=args.steps, recheck=args.recheck, warm_start=args.warm_start, echo=_say)
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    from vibe.train_session import status

    print(status(args.dir))
    return 0


def _cmd_attach(args: argparse.Namespace) -> int:
    from vibe.train_session import attach

    return attach(args.dir)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vibe", description="Natural-language task -> checked swarm training client")
    sub = p.add_subparsers(dest="cmd", required=True)

    n = sub.add_parser("new", help="write a client folder from a task description")
    n.add_argument("prompt", nargs="?", help="the task in words")
    n.add_argument("--prompt-file", help="read the task description from a file")
    n.add_argument("--out", help="new folder for the client (default vibe-<words of the prompt>)")
    n.add_argument("--offline", action="store_true", help="use an offline template even if an endpoint is configured")
    n.add_argument("--template", choices=["qa", "tool_use", "game", "summary"], help="this offline template, whatever the prompt says")
    n.add_argument("--examples", metavar="FILE.jsonl",
                   help='build a QA client from your examples, one {"prompt": ..., "answer": ...} per line (offline)')
    n.add_argument("--llm-base-url", help="OpenAI-compatible endpoint (default $A3R_LLM_BASE_URL); key from $A3R_LLM_API_KEY")
    n.add_argument("--llm-model", help="model name at that endpoint (default $A3R_LLM_MODEL)")
    n.add_argument("--rounds", type=int, default=3, help="repair rounds after the first generation (default 3)")
    n.add_argument("--no-check", action="store_true", help="offline and --examples paths: skip the check after writing")
    n.set_defaults(fn=_cmd_new)

    c = sub.add_parser("check", help="validate a client folder (report in DIR/.vibe/check.json)")
    c.add_argument("dir")
    c.add_argument("--no-dry-run", action="store_true", help="skip the dry run and training step (static checks only)")
    c.add_argument("--json", action="store_true", help="print the report as JSON")
    c.set_defaults(fn=_cmd_check)

    d = sub.add_parser("data", help="rewrite DIR/data from make_data.generate(seed)")
    d.add_argument("dir")
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(fn=_cmd_data)

    t = sub.add_parser("train", help="train a checked client in tmux sessions (server, client)")
    t.add_argument("dir")
    t.add_argument("--steps", type=int, default=20, help="training steps (default 20)")
    t.add_argument("--recheck", action="store_true", help="run the check again even if a passing one is current")
    t.add_argument(
        "--warm-start", type=int, default=0, metavar="N",
        help="first N supervised steps on the training tasks' gold answers (nll loss), then RL from there (default 0: none)",
    )
    t.set_defaults(fn=_cmd_train)

    s = sub.add_parser("status", help="reward per step, flags and session state of a training run")
    s.add_argument("dir")
    s.set_defaults(fn=_cmd_status)

    a = sub.add_parser("attach", help="attach to the training run's tmux session")
    a.add_argument("dir")
    a.set_defaults(fn=_cmd_attach)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "rounds", 1) < 0:
        print("vibe: --rounds must be 0 or more", file=sys.stderr)
        return 2
    import openai

    try:
        return args.fn(args)
    except (VibeError, ConfigError, ValidationError, ValueError) as e:
        print(f"vibe: {e}", file=sys.stderr)
        return 2
    except openai.APIError as e:
        print(f"vibe: the LLM endpoint failed ({type(e).__name__}: {e}); check --llm-base-url, "
              "--llm-model and A3R_LLM_API_KEY", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
