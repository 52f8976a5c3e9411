"""The CPU overhead guard (issue 14, item 6): benchmarks/overhead_guard.py at small sizes, in a subprocess.

It fails only on a gross regression: a jitted call's time over eager's rising above 2x the ratio saved
in benchmarks/overhead_baseline.json for the same sizes (or above an absolute ceiling). The baseline is
taken on a quiet machine; 2x leaves room for a CI machine busy with other work. The threshold is
relative, so a faster runtime passes; re-save the baseline after a runtime change:
``python benchmarks/overhead_guard.py --chain-ops 1000 --calls 11 --save-baseline``.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# the sizes this test runs (the script's defaults take longer: a 3,000-op chain compiles in ~30 s on 2 cores)
ARGS = ["--chain-ops", "1000", "--calls", "11", "--factor", "2.0"]


@pytest.mark.slow  # ~60-90 s on 2 cores: compiling the three programs twice
def test_overhead_guard_no_gross_regression(tmp_path):
    out = tmp_path / "guard.json"
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "overhead_guard.py"), *ARGS, "--check",
                        "--out", str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    print(p.stdout[-4000:], p.stderr[-2000:])
    assert out.exists(), p.stderr[-2000:]
    result = json.loads(out.read_text())
    assert set(result["programs"]) == {"llama", "chain", "adam"}
    for prog in result["programs"].values():
        assert set(prog["ratios"]) == {"default", "none-eager"} and all(r > 0 for r in prog["ratios"].values())
    assert result["baseline"] is not None, "no baseline saved for the test's sizes: run the command in the docstring"
    assert p.returncode == 0 and not result["failures"], "\n".join(result["failures"])
