"""`swarm`: serve a model, watch a server, train a built-in task end to end."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.config import SwarmConfig
from engine.errors import ConfigError


def _load_config(args: argparse.Namespace) -> SwarmConfig:
    cfg = SwarmConfig.from_yaml(args.config) if args.config else SwarmConfig()
    overrides = {}
    if getattr(args, "model", None):
        overrides["model"] = {**cfg.model.model_dump(), "name": args.model}
    if getattr(args, "run_dir", None):
        overrides["run_dir"] = str(args.run_dir)
    return SwarmConfig.model_validate({**cfg.model_dump(), **overrides}) if overrides else cfg


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


def _cmd_top(args: argparse.Namespace) -> int:
    from engine.client.top import top

    top(args.url, args.token, interval=args.interval, once=args.once)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="swarm", description="Swarm training engine")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("serve", help="host one trainable model behind an OpenAI-compatible endpoint")
    s.add_argument("--config", help="SwarmConfig YAML (defaults: tiny model, GRPO)")
    s.add_argument("--model", help="override model.name (tiny, smollm2-135m, a HF dir or .gguf)")
    s.add_argument("--run-dir", help="checkpoints, metrics and the pool journal; reuse it to resume")
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

    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except ConfigError as e:
        print(f"swarm: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
