"""Where benchmark scripts keep their results: benchmarks/results/<date>-<device>-<kind>.json."""
from __future__ import annotations

import datetime
import json
import os

import torch

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def write_results(kind: str, device: str, rows: list, out: str | None = None, **meta) -> str:
    """Write rows plus device name, torch version and date as JSON; print and return the path."""
    out = out or os.path.join(RESULTS, f"{datetime.date.today()}-{device}-{kind}.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    dev_name = torch.cuda.get_device_name() if device == "cuda" else device
    with open(out, "w") as f:
        json.dump({"device": dev_name, "torch": torch.__version__, **meta,
                   "date": str(datetime.date.today()), "rows": rows}, f, indent=2)
    print("wrote", out)
    return out
