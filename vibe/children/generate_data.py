"""Sandboxed child: call make_data.generate(seed) and write data/train.jsonl and data/test.jsonl."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from vibe.layout import GENERATOR_FILE, TEST_FILE, TRAIN_FILE
from vibe.loader import contract_function, load_module


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="write the data/ files under this folder instead (to compare with the client's)")
    p.add_argument("--result", required=True)
    args = p.parse_args()
    root = Path(args.root)
    data = contract_function(load_module(root, GENERATOR_FILE), GENERATOR_FILE)(args.seed)
    if not isinstance(data, dict) or not {"train", "test"} <= data.keys():
        raise SystemExit(f"{GENERATOR_FILE}: generate(seed) must return {{'train': [...], 'test': [...]}}")
    counts = {}
    for split, rel in (("train", TRAIN_FILE), ("test", TEST_FILE)):
        path = Path(args.out or root) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(t) + "\n" for t in data[split]))
        counts[split] = len(data[split])
    Path(args.result).write_text(json.dumps(counts))


if __name__ == "__main__":
    main()
