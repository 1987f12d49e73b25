"""Entry points that run client code, each in its own sandboxed subprocess (`vibe.sandbox`).

Only these modules import a client's files. Each is started as `python -m vibe.children.<name>` and
writes its JSON answer to `--result`; a parent (check, data, train) reads it back:

    generate_data     `vibe data`: make_data.generate(seed) -> data/train.jsonl, data/test.jsonl
    import_and_probe  `vibe check`: import the modules, check the contract, probe reward.score
    play_episodes     `vibe check`'s dry run: play N tasks x K episodes against a debug server
    play_scripted     `vibe check`'s whole-loop probes: run() against the scripted model
"""
