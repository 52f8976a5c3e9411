"""benchmarks/steady_interleaved.py: every configuration checked against eager, every round times each once, ratios
of medians; a configuration that cannot run is a row that says why (no assertion on time)."""
from __future__ import annotations

import statistics

from script_loader import load_script


def _module():
    return load_script("benchmarks/steady_interleaved.py")


def test_interleaved_rounds_check_every_configuration_against_eager():
    si = _module()
    result = si.measure(["eager", "dataflow-eager", "layers-nvfuser"], "cpu", "small", layers=2, rounds=3, warmup=1,
                        log=lambda m: None)
    rows = {r["config"]: r for r in result["rows"]}
    assert list(rows) == ["eager", "dataflow-eager", "layers-nvfuser"]
    # nvFuser runs on CUDA only (and is not installed on a CPU machine): a row saying why
    assert "MissingDependencyError" in rows["layers-nvfuser"]["error"] and "steady_ms" not in rows["layers-nvfuser"]
    for name in ("eager", "dataflow-eager"):
        r = rows[name]
        assert r["matches_eager_first_step"] and r["matches_eager_last_step"] and r["matches_eager"]
        assert len(r["host_ms"]) == 3 and r["device_ms"] == []  # one timed step per round; no CUDA events on the CPU
        assert r["steady_ms"] == round(statistics.median(r["host_ms"]), 4)
        assert r["profile"]["host_events"] > 0
    assert rows["dataflow-eager"]["vs_eager"] == round(rows["dataflow-eager"]["steady_ms"] / rows["eager"]["steady_ms"], 3)
    text = si.table(result)
    assert "| layers-nvfuser | failed: MissingDependencyError" in text and text.count("| yes |") == 2
