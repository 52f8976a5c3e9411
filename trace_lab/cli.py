"""Command line: the headless lab.

``python -m trace_lab.cli report --out reports`` inspects every example workload
(and, unless ``--no-notebooks``, executes the teaching notebooks), writing for
each a standalone HTML report and its JSON, plus ``index.html`` with one row per
run (every file is written from the report's plain data and view model,
:mod:`trace_lab.report.view_model`). It prints a line per step, so long compiles show progress. A workload that
fails is reported in the index with its error; the others still run. Exit
status 1 when any run failed or differs from eager.
"""
from __future__ import annotations

import argparse
import html
import json
import os
import sys
import time
from pathlib import Path

from .options import EXECUTOR_CHOICES, FUSION_STRATEGIES, OPTIONS

__all__ = ["main"]


def _say(msg: str) -> None:
    print(f"[trace_lab] {msg}", flush=True)


def run_workloads(names, out: Path, device: str, size: str, fusion: str, executor: str, runs: int) -> list[dict]:
    from examples.workloads import get

    from .lab.inspection import inspect

    rows = []
    for name in names:
        started = time.perf_counter()
        _say(f"{name}: compiling and measuring ({device}, {size}, fusion={fusion}, executor={executor})")
        try:
            fn, args = get(name).make(device, size)
            report = inspect(fn, *args, fusion=fusion, executor=executor, runs=runs, name=name,
                             progress=lambda m, n=name: _say(f"{n}: {m}"))
            report.save_html(out / f"{name}.html")
            report.save_json(out / f"{name}.json")
            (out / f"{name}.txt").write_text(str(report) + "\n\n" + "\n\n".join(
                s.text for s in report.view.stages("forward")[-1:] + report.view.stages("backward")[-1:]))
            rows.append({"workload": name, "ok": report.ok, "summary": dict(report.summary_rows()),
                         "options": {"device": device, "size": size, "fusion": fusion, "executor": executor,
                                     "runs": runs},
                         "seconds": time.perf_counter() - started})
            _say(f"{name}: done, {'matches eager' if report.ok else 'DIFFERS from eager'}")
        except Exception as e:  # noqa: BLE001 - one failure must not stop the others
            rows.append({"workload": name, "ok": False, "error": f"{type(e).__name__}: {e}",
                         "seconds": time.perf_counter() - started})
            _say(f"{name}: FAILED: {type(e).__name__}: {e}")
    return rows


def execute_notebook(nb, workdir: Path, timeout: int):
    """Run ``nb`` top to bottom in a python3 kernel started in ``workdir``; returns it with its outputs.

    No widget state is stored with it: nbconvert (and GitHub) then show each output's static text/html;
    with the state saved, nbconvert picks the widget view, which needs require.js and a CDN and is blank
    offline (issue 18 item 3)."""
    import os

    from nbclient import NotebookClient

    # the kernel's OpenMP threads sleep at a barrier instead of spinning: on a busy machine (the front end
    # rendering the last outputs) spinning threads made a 15 ms program time at 0.5-1 s (issue 26 item 3)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    for attempt in range(1, KERNEL_START_TRIES + 1):
        try:
            NotebookClient(nb, timeout=timeout, kernel_name="python3", store_widget_state=False,
                           resources={"metadata": {"path": str(workdir)}}).execute()
            return nb
        except RuntimeError as e:
            if KERNEL_DIED_AT_START not in str(e) or attempt == KERNEL_START_TRIES:
                raise
            _say(f"the notebook's kernel died while starting, before any cell ran ({e}): starting another "
                 f"(attempt {attempt + 1} of {KERNEL_START_TRIES})")
    raise AssertionError("unreachable: the last attempt returns or raises")


# jupyter_client's message when a kernel exits before it answers its first request (kernel_info): no cell has
# run. Seen once in the GPU check (2dcfa3a, 10 workers starting kernels at once); a second start is safe.
KERNEL_DIED_AT_START = "Kernel died before replying to kernel_info"
KERNEL_START_TRIES = 2


SLOW_CELL_SECONDS = 60.0  # a teaching notebook's cell should finish within this on a 2-core CPU (issue 26)


def cell_seconds(nb) -> list[tuple[int, float]]:
    """(index, seconds) of each executed code cell, from the timing nbclient records in its metadata."""
    import datetime

    out = []
    for i, cell in enumerate(nb.cells):
        t = cell.get("metadata", {}).get("execution", {})
        start, end = t.get("iopub.execute_input"), t.get("shell.execute_reply")
        if cell.cell_type == "code" and start and end:
            read = lambda s: datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))  # noqa: E731
            out.append((i, (read(end) - read(start)).total_seconds()))
    return out


def run_notebooks(out: Path, timeout: int) -> list[dict]:
    root = Path(__file__).resolve().parent.parent / "notebooks"
    rows = []
    notebooks = sorted(root.glob("*.ipynb")) if root.is_dir() else []
    if not notebooks:
        return rows
    try:
        import nbclient  # noqa: F401 - execute_notebook's
        import nbformat
        from nbconvert import HTMLExporter
    except ImportError as e:
        _say(f"notebooks skipped: {e.name} is not installed (pip install 'trace_lab[lab]')")
        return rows
    for path in notebooks:
        _say(f"notebook {path.name}: executing")
        nb = nbformat.read(path, as_version=4)
        try:
            execute_notebook(nb, root, timeout)
            ok, error = True, None
        except Exception as e:  # noqa: BLE001 - keep the partial notebook
            ok, error = False, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        nbformat.write(nb, out / path.name)
        body, _ = HTMLExporter().from_notebook_node(nb)
        (out / (path.stem + ".html")).write_text(body, encoding="utf-8")
        cells = cell_seconds(nb)
        slowest = max(cells, key=lambda c: c[1], default=None)
        rows.append({"notebook": path.name, "ok": ok, "error": error, "cell_seconds": cells,
                     "slowest_cell": slowest and {"index": slowest[0], "seconds": round(slowest[1], 2)}})
        took = f" (slowest cell {slowest[0]}: {slowest[1]:.1f} s)" if slowest else ""
        _say(f"notebook {path.name}: {'done' if ok else 'FAILED: ' + str(error)}{took}")
    return rows


_INDEX_CSS = ("body{font:14px/1.45 -apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:24px;color:#1f2328}"
              "table{border-collapse:collapse;margin:8px 0 20px}th,td{border:1px solid #d0d7de;padding:4px 8px;"
              "text-align:left;vertical-align:top}th{background:#f6f8fa}td.num{text-align:right;white-space:nowrap}"
              ".bad{color:#b00020;font-weight:600}.ok{color:#1a7f37}small{color:#57606a}"
              # a table wider than the window scrolls inside its own box, the report column in view
              ".tl-scroll{overflow-x:auto;max-width:100%}.tl-scroll table{margin:0}"
              ".tl-scroll tr>:first-child{position:sticky;left:0;z-index:1;background:#fff;box-shadow:1px 0 0 #d0d7de}"
              ".tl-scroll tr>th:first-child{background:#f6f8fa}"
              ".tl-scroll td{overflow-wrap:anywhere}.tl-scroll td.wrap{min-width:14em;max-width:32em}"
              # a workload's name and its check stay whole (they were squeezed to "memo ry_pe ak", 2026-11-28)
              ".tl-scroll td.name{white-space:nowrap}")
_SUMMARY_COLUMNS = ("compile", "first run", "steady state", "vs eager")  # and every "peak ..." row


def write_index(out: Path, rows: list[dict], nb_rows: list[dict], meta: dict | None = None) -> Path:
    """``index.html`` (and ``index.json``): one row per workload report (its options, whether it matches
    eager, its peaks and times, links to its HTML / JSON / text) and one per executed notebook (status,
    links to the .ipynb and its nbconvert HTML); every name escaped."""
    e = html.escape
    meta = meta or {}
    peak_keys = sorted({k for r in rows if "summary" in r for k in r["summary"] if k.startswith("peak")})
    summary_keys = [k for k in _SUMMARY_COLUMNS if any(k in r.get("summary", {}) for r in rows)]
    head = ["report", "options", "check"] + peak_keys + summary_keys + ["files"]
    trs = []
    for r in rows:
        name = r["workload"]
        link = f'<a href="{e(name)}.html">{e(name)}</a>'
        opts = ", ".join(f"{k}={v}" for k, v in r.get("options", {}).items())
        if "error" in r:
            trs.append(f"<tr><td class='name'>{link}</td><td>{e(opts)}</td><td class='bad' colspan='{len(head) - 2}'>"
                       f"{e(r['error'])}</td></tr>")
            continue
        s = r["summary"]
        check = "<span class='ok'>matches eager</span>" if r.get("ok") else "<span class='bad'>differs from eager</span>"
        cells = [f"<td class='name'>{link}</td>", f"<td class='wrap'>{e(opts)}</td>", f"<td class='name'>{check}</td>"] \
            + [f"<td class='num'>{e(str(s.get(k, '')))}</td>" for k in peak_keys + summary_keys]
        files = " · ".join(f'<a href="{e(name)}.{ext}">{ext}</a>' for ext in ("html", "json", "txt"))
        trs.append("<tr>" + "".join(c if c.startswith("<td") else f"<td>{c}</td>" for c in cells)
                   + f"<td>{files}</td></tr>")
    table = ("<div class='tl-scroll'><table><tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>"
             + "".join(trs) + "</table></div>" if rows else "<p>no workloads were run</p>")
    nb_trs = []
    for r in nb_rows:
        name = r["notebook"]
        stem = name.rsplit(".", 1)[0]
        status = "<span class='ok'>executed</span>" if r["ok"] else f"<span class='bad'>FAILED: {e(str(r['error']))}</span>"
        slow = r.get("slowest_cell")
        slow_td = "" if not slow else (f"cell {slow['index']}: {slow['seconds']:.1f} s" + (
            f" <span class='bad'>(over {SLOW_CELL_SECONDS:.0f} s)</span>" if slow["seconds"] > SLOW_CELL_SECONDS else ""))
        nb_trs.append(f"<tr><td><a href='{e(stem)}.html'>{e(stem)}</a></td><td>{status}</td>"
                      f"<td class='num'>{slow_td}</td><td><a href='{e(name)}'>{e(name)}</a></td></tr>")
    notebooks = ("<div class='tl-scroll'><table><tr><th>notebook (nbconvert HTML)</th><th>status</th>"
                 "<th>slowest cell</th><th>executed notebook</th></tr>" + "".join(nb_trs) + "</table></div>") if nb_rows else "<p>no notebooks were executed</p>"
    about = " · ".join(f"{e(k)}: {e(str(v))}" for k, v in meta.items())
    page = ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>trace_lab reports</title>"
            f"<style>{_INDEX_CSS}</style></head><body><h2>trace_lab headless lab</h2>"
            f"<p><small>{about}</small></p><h3>Workloads</h3>"
            "<p><small>Each report opens offline: Summary, Trace, Graph, Memory and Compare tabs. Peaks are "
            "above the program's inputs, as in the reports.</small></p>" + table
            + "<h3>Teaching notebooks</h3>" + notebooks + "</body></html>")
    path = out / "index.html"
    path.write_text(page, encoding="utf-8")
    (out / "index.json").write_text(json.dumps({"meta": meta, "workloads": rows, "notebooks": nb_rows}, indent=2,
                                               default=str))
    return path


def main(argv=None) -> int:
    import torch

    p = argparse.ArgumentParser(prog="trace_lab", description="trace_lab headless lab")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("report", help="inspect the example workloads and execute the notebooks, write HTML/JSON")
    r.add_argument("--out", default="reports")
    r.add_argument("--workloads", default="memory_peak,adam_step,llama2,llama2_ckpt,transformer_encoder",
                   help="comma-separated names from examples/workloads.py")
    r.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    r.add_argument("--size", default="small", choices=["small", "full"])
    r.add_argument("--fusion", default="memory", choices=FUSION_STRATEGIES,
                   help="trace_lab.jit's fusion option for every workload (default here: memory)")
    r.add_argument("--executor", default=OPTIONS["executor"].default, choices=EXECUTOR_CHOICES,
                   help="trace_lab.jit's executor option for every workload (default: auto)")
    r.add_argument("--runs", type=int, default=3)
    r.add_argument("--no-notebooks", action="store_true")
    r.add_argument("--notebook-timeout", type=int, default=900)
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    rows = run_workloads([w for w in a.workloads.split(",") if w], out, a.device, a.size, a.fusion, a.executor,
                         a.runs)
    nb_rows = [] if a.no_notebooks else run_notebooks(out, a.notebook_timeout)
    import datetime
    import platform

    meta = {"written": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "torch": torch.__version__,
            "device": a.device if a.device != "cuda" else f"cuda ({torch.cuda.get_device_name(0)})",
            "python": platform.python_version()}
    index = write_index(out, rows, nb_rows, meta)
    _say(f"wrote {index}")
    failed = [r for r in rows if not r["ok"]] + [r for r in nb_rows if not r["ok"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
