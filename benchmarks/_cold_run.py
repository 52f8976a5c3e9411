"""One probe mode in a fresh process with Inductor's and Triton's caches empty (a cold first call), its result read
back from the ``RESULT <json>`` line the child prints (regional_capture_probe, front_end_floor, module_regions_probe)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile


def run_cold(cmd: list[str], timeout: float | None = None) -> tuple[dict | None, str]:
    """(the child's RESULT dict, "") or (None, why it gave none: its last output line, or the timeout)."""
    cache = tempfile.mkdtemp(prefix="cold-run-cache-")
    env = dict(os.environ, TORCHINDUCTOR_FORCE_DISABLE_CACHES="1", TORCHINDUCTOR_CACHE_DIR=cache,
               TRITON_CACHE_DIR=os.path.join(cache, "triton"))
    try:
        done = subprocess.run([sys.executable, *cmd], capture_output=True, text=True, env=env, timeout=timeout)
        out, err = done.stdout, done.stderr
    except subprocess.TimeoutExpired:
        out, err = "", f"over {timeout:.0f} s"
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    if not line:
        return None, str((err or out).strip().splitlines()[-1:])
    return json.loads(line[-1][7:]), ""
