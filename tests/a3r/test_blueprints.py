"""Blueprint schema validation, content hashing and rendering into a run directory."""

import os
import subprocess

import pytest
import yaml

from a3r.blueprints import DEFAULT_LAUNCH_COMMAND, Blueprint, render_files, write_files
from a3r.exceptions import BlueprintError

BASE = dict(
    purpose="find the smallest batch that trains",
    hypothesis="batch 4 is enough",
    engine_config={"training": {"micro_batch_size": 4, "lr": 1e-5}, "model": {"name": "tiny", "seed": 0}},
    task="arithmetic",
    seeds=[1, 2, 3],
    budget={"steps": 20, "wall_time_s": 600},
    metrics=["reward", "loss"],
    success_criteria="reward > 0.5 at step 20",
)


def test_defaults_and_primary_metric():
    bp = Blueprint.parse(BASE)
    assert (
        bp.launch_command
        == DEFAULT_LAUNCH_COMMAND
        == 'swarm train --config config.yaml --run-dir "$A3R_RUN_DIR"'
    )
    assert bp.primary_metric == "reward"
    assert bp.label.startswith("arithmetic-")


def test_hash_is_stable_across_key_order_and_copies():
    a = Blueprint.parse(BASE)
    shuffled = dict(reversed(list(BASE.items())))
    shuffled["engine_config"] = {
        "model": {"seed": 0, "name": "tiny"},
        "training": {"lr": 1e-5, "micro_batch_size": 4},
    }
    b = Blueprint.parse(shuffled)
    assert a.content_hash() == b.content_hash()
    assert a.content_hash() == Blueprint.model_validate_json(a.model_dump_json()).content_hash()
    c = Blueprint.parse({**BASE, "seeds": [1, 2]})
    assert c.content_hash() != a.content_hash()


def test_frozen():
    bp = Blueprint.parse(BASE)
    with pytest.raises(ValueError):
        bp.task = "other"


@pytest.mark.parametrize(
    "patch,needle",
    [
        ({"seeds": []}, "seeds"),
        ({"seeds": [1, 1]}, "repeated: [1]"),
        ({"metrics": []}, "metrics"),
        ({"metrics": ["step"]}, "not 'step'"),
        ({"metrics": ["bad name"]}, "is invalid"),
        ({"purpose": ""}, "purpose"),
        ({"budget": {"steps": 0, "wall_time_s": 1}}, "budget.steps"),
        ({"budget": {"steps": 1}}, "budget.wall_time_s"),
        ({"engine_config": {"lr": float("nan")}}, "plain JSON"),
        ({"seed_path": "model.nope"}, "seed_path"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_validation_errors_name_the_field(patch, needle):
    with pytest.raises(BlueprintError, match="invalid") as e:
        Blueprint.parse({**BASE, **patch})
    assert needle in str(e.value)


def test_yaml_roundtrip(tmp_path):
    bp = Blueprint.parse(BASE)
    p = tmp_path / "bp.yaml"
    p.write_text(bp.to_yaml())
    assert Blueprint.from_yaml(p) == bp
    (tmp_path / "bad.yaml").write_text("purpose: [unclosed")
    with pytest.raises(BlueprintError, match="cannot read"):
        Blueprint.from_yaml(tmp_path / "bad.yaml")


def test_render_run_dir_quotes_paths_and_applies_overrides(tmp_path):
    bp = Blueprint.parse(
        {**BASE, "seed_path": "model.seed", "launch_command": 'echo "$A3R_RUN_DIR|$A3R_SEED|$(pwd)"'}
    )
    run_dir = tmp_path / 'it\'s a "dir" $HOME'
    files = render_files(
        bp, run_id=7, seed=3, run_dir=str(run_dir), overrides={"training": {"micro_batch_size": 2}}
    )
    assert set(files) == {"blueprint.md", "config.yaml", "run.sh"}
    write_files(run_dir, files)
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert cfg == {"training": {"micro_batch_size": 2, "lr": 1e-5}, "model": {"name": "tiny", "seed": 3}}
    md = (run_dir / "blueprint.md").read_text()
    for needle in (
        "find the smallest batch",
        "batch 4 is enough",
        "`reward` (primary)",
        "A3R_CHECKPOINT_DIR",
        "micro_batch_size",
    ):
        assert needle in md
    assert os.access(run_dir / "run.sh", os.X_OK)
    out = subprocess.run(
        ["bash", str(run_dir / "run.sh")], capture_output=True, text=True, env={"PATH": os.environ["PATH"]}
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"{run_dir}|3|{run_dir}"
    assert (run_dir / "checkpoints").is_dir()


def test_effective_config_does_not_mutate_blueprint():
    bp = Blueprint.parse(BASE)
    cfg = bp.effective_config(5, {"training": {"lr": 1.0}})
    assert cfg["training"]["lr"] == 1.0 and bp.engine_config["training"]["lr"] == 1e-5
