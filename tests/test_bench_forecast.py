"""bench.py says at its start about how long its runs take, from earlier result files of the same GPU kind.

2026-11-28 (H100): an Adam run of 5 configurations x 3 runs, 3 at a time, under a 520 s budget kept one run of
torch.compile and of each capped configuration: the earlier files already said those runs take 180-250 s each.
The forecast replays the runs in round order on ``--jobs`` slots (``_forecast.makespan``) with each
configuration's median wall in the newest file that ran it."""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench  # noqa: E402
from _forecast import makespan  # noqa: E402


def test_makespan_gives_each_piece_to_the_worker_free_first():
    assert makespan([10, 10, 10], 2) == 20  # 10 | 10, then the third after the first
    assert makespan([1, 9, 5, 5], 2) == 11  # in order: 1 | 9, then 5 -> 6 (free first), 5 -> 11
    assert makespan([1, 9, 5, 5], 2, longest_first=True) == 10  # 9 | 5, 5 -> 10, 1 -> 10
    assert makespan([], 3) == 0


def _file(directory: Path, name: str, measured_at: str, rows: list[dict]) -> None:
    (directory / name).write_text(json.dumps({"schema": 2, "kind": "bench", "benches": ["adam"], "device": "GPU",
                                              "measured_at": measured_at, "rows": rows}))


def test_the_newest_file_of_this_gpu_kind_gives_each_configurations_median_wall(tmp_path):
    row = dict(bench="adam", ok=True)
    _file(tmp_path, "2026-11-27-h100-aaaaaaa-adam.json", "2026-11-27T10:00:00",
          [dict(row, name="eager", wall_s=50.0), dict(row, name="torch.compile", wall_s=100.0)])
    _file(tmp_path, "2026-11-28-h100-bbbbbbb-adam.json", "2026-11-28T10:00:00",
          [dict(row, name="torch.compile", wall_s=200.0), dict(row, name="torch.compile", wall_s=240.0),
           dict(row, name="torch.compile", wall_s=220.0),
           dict(row, name="eager", ok=False, skipped="time budget (520 s)")])  # not run: no time
    _file(tmp_path, "2026-11-28-h200-ccccccc-adam.json", "2026-11-28T11:00:00",
          [dict(row, name="eager", wall_s=5.0)])  # another GPU kind
    walls = bench.earlier_walls([tmp_path], "h100")
    assert walls == {("adam", None, "eager"): 50.0, ("adam", None, "torch.compile"): 220.0}


def test_the_forecast_line_counts_what_it_knows_and_says_when_the_budget_is_short():
    walls = {("adam", None, "eager"): 50.0, ("adam", None, "torch.compile"): 220.0}
    tasks = [dict(bench="adam", layers=None, name=n) for _ in range(2) for n in ("eager", "torch.compile", "new")]
    # in round order on 2 slots: eager 50 | tc 220, eager -> 100, tc -> 320: the last slot ends at 320 s
    line = bench.forecast(tasks, walls, jobs=2, budget=300)
    assert line.startswith("forecast: about 320 s for the 4 runs timed before") and "2 runs with no earlier" in line
    assert "MORE than the budget (300 s)" in line
    assert "(budget 400 s)" in bench.forecast(tasks, walls, jobs=2, budget=400)
    assert bench.forecast(tasks, {}, jobs=2, budget=400).startswith("forecast: no earlier run")


def test_a_configuration_that_ran_long_before_gets_twice_its_wall_as_its_timeout():
    configs = [{"bench": "adam", "layers": None, "name": "torch.compile"}, {"bench": "adam", "layers": None,
                                                                             "name": "default"}]
    walls = {("adam", None, "torch.compile"): 207.5, ("adam", None, "default"): 90.0}
    limits = bench.run_timeouts(configs, walls, 300.0)
    assert limits == {("adam", None, "torch.compile"): 415.0, ("adam", None, "default"): 300.0}
    assert bench.run_timeouts(configs, {}, 120.0) == {("adam", None, "torch.compile"): 120.0,
                                                      ("adam", None, "default"): 120.0}
