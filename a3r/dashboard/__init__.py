"""The dashboard (`a3r dashboard`, `swarm dashboard`): a read-only web app over the run stores and the swarm
servers' status API. Campaigns and stage progress, the run table, live learning curves, run pages, the
campaign's report, comparison of runs by config, a swarm server's pool at token level and benchmarks.

Layout: `config` (typed settings), `sources` (stores found under the workspace, opened read-only),
`queries` (what the pages show, via the store's query methods), `metric_kinds` (primary metric first, the
rest by kind), `compare` (runs against config values: scores, t intervals, importance), `bench`
(benchmark matrix), `bench_reports` (written `a3r bench` reports), `swarm` (server-side reads of swarm
servers), `security` (token, Host check, headers), `app` (routes), `serve`.
"""

from a3r.dashboard.app import create_app
from a3r.dashboard.config import DashboardConfig, SwarmTarget
from a3r.dashboard.serve import build_config, serve

__all__ = ["DashboardConfig", "SwarmTarget", "build_config", "create_app", "serve"]
