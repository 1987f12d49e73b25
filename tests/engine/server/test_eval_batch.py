"""A held-out evaluation fills the server's decode batch (issue 31: evaluation at the server's best batch size).

The job's `concurrency` is sized for training episodes; an evaluation's items are independent, so it sends
as many at once as the server decodes in one pass (its /health `max_batch_rows`). Checked on a real
`swarm serve` subprocess with the tiny model, by the biggest batch the server itself reports forming.
"""

from __future__ import annotations

from tests_support import tiny_train_job

from engine.jobs import ServerProcess, TrainJob, eval_concurrency, evaluate
from engine.tasks import get_task
from engine.tasks.base import split_items
from engine.training.metrics import MetricsLog


def test_eval_concurrency_fills_the_batch_within_the_items():
    assert eval_concurrency(4, 64, 24) == 24  # all items: fewer than the batch holds
    assert eval_concurrency(4, 64, 100) == 64  # one full batch
    assert eval_concurrency(32, 64, 100, episodes_per_item=2) == 32  # 2 rows an item: 32 items fill 64 rows
    assert eval_concurrency(4, 64, 100, episodes_per_item=2) == 32
    assert eval_concurrency(80, 64, 100) == 80  # never fewer than the job asked for
    assert eval_concurrency(4, None, 100) == 4  # a server that reports no bound: the job's concurrency


def test_evaluation_is_batched_past_the_job_concurrency(tmp_path):
    # Replies of 64 tokens keep each request decoding for 64 passes, long enough for the other requests to
    # arrive even when a loaded machine delays them; with 6 tokens they could finish one by one.
    job = TrainJob.model_validate(tiny_train_job(eval_size=24, max_tokens=64, concurrency=2))
    _, held = split_items(get_task(job.task), 4, job.eval_size, job.seed, job.eval_seed)
    server = ServerProcess(tmp_path, log_path=tmp_path / "server.log")
    try:
        client = server.client()
        client.configure(job.server_config(tmp_path))
        client.start(wait=True)
        info = client.health()["inference"]
        assert info["max_batch_rows"] >= len(held) > job.concurrency
        evaluate(client, job, held, "before", 0, MetricsLog(tmp_path))
        after = client.health()["inference"]
        # With the job's 2 episodes in flight the server never decodes more than 2 rows at once; 24 sent
        # together reach a batch well past that (not exactly 24: a few finish or join between passes).
        assert after["max_rows"] > 2 * job.concurrency, after
        assert after["tokens_generated"] > 0
        client.close()
    finally:
        server.stop()
