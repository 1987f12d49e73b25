"""`swarm`: serve a model, watch a server, train a built-in task end to end."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path

from pydantic import ValidationError

from engine.config import SwarmConfig
from engine.errors import ConfigError, ServerLost, SwarmError
from engine.tasks import task_names
from engine.teams.config import SyncMode, TeamMethod


def _load_config(args: argparse.Namespace) -> SwarmConfig:
    saved = Path(args.run_dir) / "swarm_config.yaml" if getattr(args, "run_dir", None) else None
    if args.config:
        cfg = SwarmConfig.from_yaml(args.config)
    elif saved is not None and saved.exists():
        cfg = SwarmConfig.from_yaml(saved)  # resuming a run: its own config, unless told otherwise
    else:
        cfg = SwarmConfig()
    overrides = {}
    if getattr(args, "model", None):
        overrides["model"] = {**cfg.model.model_dump(), "name": args.model}
    if getattr(args, "run_dir", None):
        overrides["run_dir"] = str(args.run_dir)
    if getattr(args, "backend", None):
        overrides["backend"] = args.backend
    if getattr(args, "ray_address", None):
        overrides["verl"] = {**cfg.verl.model_dump(), "ray_address": args.ray_address}
    out = SwarmConfig.model_validate({**cfg.model_dump(), **overrides}) if overrides else cfg
    if getattr(args, "ray_address", None) and out.backend != "verl":
        raise ConfigError(f"--ray-address is for backend verl (this config's backend is {out.backend!r}); add --backend verl")
    return out


def _cmd_serve(args: argparse.Namespace) -> int:
    from engine.server.serve import serve

    serve(
        _load_config(args),
        host=args.host,
        port=args.port,
        admin_token=args.token,
        token_file=Path(args.token_file) if args.token_file else None,
        autostart=args.start,
        log_level=args.log_level,
    )
    return 0


def _cmd_audit(args: argparse.Namespace) -> int:
    """Exit 0 when the history holds, 1 with the violations listed otherwise."""
    from engine.training.audit import audit_run_dir, format_report

    report = audit_run_dir(args.run_dir, eval_items=args.eval_items)
    print(json.dumps(report.as_dict(), indent=2) if args.json else format_report(report, args.run_dir))
    return 0 if report.ok else 1


def _cmd_top(args: argparse.Namespace) -> int:
    from engine.client.top import top

    top(args.url, args.token, interval=args.interval, once=args.once)
    return 0


def _add_plugin_commands(sub: argparse._SubParsersAction) -> None:
    """Subcommands that packages above the engine contribute through the entry-point group `swarm.commands`
    (each entry: a function that adds its parser to `sub`). The engine is the ground floor and imports none of
    them; the a3r package adds `swarm dashboard` this way. A broken contributor costs its command, not `swarm`."""
    for ep in entry_points(group="swarm.commands"):
        try:
            ep.load()(sub)
        except Exception as e:  # noqa: BLE001 - any failure of a third party's code
            print(f"swarm: the command {ep.name!r} from {ep.value} is unavailable ({e})", file=sys.stderr)


def _is_builtin(argv: list[str] | None, sub: argparse._SubParsersAction) -> bool:
    """Whether the command line names one of the engine's own subcommands: then plugin commands are not
    loaded, since argparse never reaches them (`swarm --help` and a plugin's name still load them all)."""
    words = sys.argv[1:] if argv is None else argv
    first = next((w for w in words if not w.startswith("-")), None)
    return first in sub.choices


def _cmd_train(args: argparse.Namespace) -> int:
    import httpx

    from engine.jobs import TrainJob, read_job_yaml
    from engine.launch import train

    # Overrides that can make the file's job valid (a team's method, the task) apply before validation.
    raw = read_job_yaml(args.config) if args.config else {}
    if args.task:
        raw["task"] = args.task
    if args.method or args.sync:
        if not raw.get("team"):
            raise ConfigError("--method/--sync choose how a team trains; give a job config with `team: {agents: ...}`")
        raw["team"] = {**raw["team"], **{k: v for k, v in (("method", args.method), ("sync", args.sync)) if v}}
    data = TrainJob.model_validate(raw).model_dump()
    if args.model:
        data["swarm"]["model"]["name"] = args.model
    if args.no_eval0_cache:
        data["eval0_cache"] = False
    training = data["swarm"]["training"]
    training["max_steps"] = args.steps or training["max_steps"] or 10
    job = TrainJob.model_validate(data)
    run_dir = Path(args.run_dir or os.environ.get("A3R_RUN_DIR") or f"runs/{job.task}-{int(time.time())}")
    try:
        summary = train(job, run_dir)
    except ServerLost as e:
        print(f"swarm train: {e}", file=sys.stderr)
        return 1
    except httpx.TransportError as e:
        # The server is running but stopped answering (train() restarts only a server that exited).
        print(
            f"swarm train: lost the connection to the training server ({type(e).__name__}: {e}) while it "
            f"still runs (its log: {run_dir / 'server.log'}). Rerun the same command with --run-dir {run_dir} "
            "to resume from the last checkpoint.",
            file=sys.stderr,
        )
        return 1
    print(json.dumps({k: v for k, v in summary.items() if k != "final_status"}, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="swarm", description="Swarm training engine")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("serve", help="host one trainable model behind an OpenAI-compatible endpoint")
    s.add_argument("--config", help="SwarmConfig YAML (defaults: tiny model, GRPO)")
    s.add_argument("--model", help="override model.name (tiny, smollm2-135m, gemma3-270m, a HF dir or .gguf)")
    s.add_argument("--run-dir", help="checkpoints, metrics and the pool journal; reuse it to resume")
    s.add_argument(
        "--backend", choices=["torch", "vllm", "verl"], help="override backend (vllm: one CUDA host; see docs/engine.md)"
    )
    s.add_argument(
        "--ray-address",
        help="backend verl: the Ray cluster to join ('auto' or the head's address); default: start one here",
    )
    s.add_argument("--host", default="127.0.0.1", help="bind address (default loopback only)")
    s.add_argument("--port", type=int, default=10086)
    s.add_argument("--token", help="admin token (default: $SWARM_ADMIN_TOKEN, else read/minted in --token-file)")
    s.add_argument("--token-file", help="where the admin token is kept (default <run-dir or .swarm>/admin_token)")
    s.add_argument("--start", action="store_true", help="load the model immediately instead of waiting for a client")
    s.add_argument("--log-level", default="warning")
    s.set_defaults(fn=_cmd_serve)

    t = sub.add_parser("top", help="live view of a server's state, pool fill and training metrics")
    t.add_argument("--url", default="http://127.0.0.1:10086")
    t.add_argument("--token", help="admin token (default $SWARM_ADMIN_TOKEN)")
    t.add_argument("--interval", type=float, default=1.0)
    t.add_argument("--once", action="store_true", help="print one snapshot and exit")
    t.set_defaults(fn=_cmd_top)

    tr = sub.add_parser(
        "train", help="train a built-in task end to end (starts the server(s) and the client): one model, "
        "a task mix (mix:), or a team of models (team:)",
    )
    tr.add_argument("--config", help="TrainJob YAML (task or mix, swarm: SwarmConfig, team, eval_size, ...)")
    tr.add_argument("--task", help="a built-in task: " + ", ".join(task_names()))
    tr.add_argument("--model", help="override swarm.model.name")
    tr.add_argument("--steps", type=int, help="override swarm.training.max_steps (default 10)")
    tr.add_argument(
        "--method", choices=[m.value for m in TeamMethod],
        help="override team.method: independent (multi-role, non-shared), hacpo, naive, gspo or gspox2",
    )
    tr.add_argument("--sync", choices=[m.value for m in SyncMode], help="override team.sync (lockstep or free)")
    tr.add_argument(
        "--no-eval0-cache", action="store_true",
        help="measure the untrained model's held-out accuracy even if an earlier run cached it (step-0 cache)",
    )
    tr.add_argument("--run-dir", help="where checkpoints, metrics and summary.json go (default runs/<task>-<time>)")
    tr.set_defaults(fn=_cmd_train)

    au = sub.add_parser("audit", help="check a run dir's training history: each batch trained once, steps contiguous, evaluations complete")
    au.add_argument("run_dir", help="the run dir of `swarm train` / `swarm serve --run-dir`")
    au.add_argument("--eval-items", type=int, help="the held-out set size every evaluation must have scored")
    au.add_argument("--json", action="store_true", help="print the report as JSON")
    au.set_defaults(fn=_cmd_audit)

    if not _is_builtin(argv, sub):  # a server's start should not pay for importing other packages' commands
        _add_plugin_commands(sub)

    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except (ConfigError, ValidationError) as e:
        print(f"swarm: {e}", file=sys.stderr)
        return 2
    except SwarmError as e:  # a server that would not start, a group left in doubt, ...: the message says why
        print(f"swarm: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        if e.filename is None:
            raise  # not a file the user named: a bug, keep its trace
        # A read-only or missing run dir, token file or config: the path and the reason are the message.
        print(f"swarm: {e.filename}: {e.strerror}; give a writable --run-dir (or --token-file)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
