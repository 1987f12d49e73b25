"""`swarm top` renders what several-model training needs to watch: per-task rewards, groups in doubt."""


def test_swarm_top_shows_per_task_rewards_and_groups_in_doubt():
    from rich.console import Console

    from engine.client.top import render_status

    st = {
        "state": "ROLLING", "model": "tiny", "global_step": 3, "episodes_live": 0, "episodes_live_eval": 0,
        "episode_counts": {}, "groups_in_doubt": ["grp-abc12345"], "error": None,
        "pool": {"episodes": 2, "complete_tasks": 0, "target_tasks": 4, "by_client": {"arithmetic": 2}},
        "last_metrics": {"reward/arithmetic": 0.25, "reward/countdown": 0.5, "pg_loss": 0.1},
    }
    console = Console(record=True, width=120)
    console.print(render_status(st))
    text = console.export_text()
    assert "per client (task)" in text and "countdown" in text and "0.500" in text
    assert "grp-abc12345" in text
