"""Report: plain data, text, HTML escaping, standalone file."""
import json

import torch

import trace_lab


def _evil():
    def fn(x):
        return torch.relu(x) * 2

    fn.__name__ = "<script>alert('x')</script>"
    return fn


def test_report_is_plain_data_with_every_figure():
    x = torch.randn(16, 16, requires_grad=True)
    r = trace_lab.inspect(lambda t: torch.tanh(t @ t), x, executor="eager", runs=3, name="tanh")
    d = json.loads(json.dumps(r.to_dict()))
    assert set(d["compile_seconds"]) == {"capture", "passes", "executor", "total"}
    assert len(d["run_seconds"]) == 3 and d["steady_seconds"] is not None
    kinds = {m["kind"] for m in d["memory"]}
    assert kinds == {"forward", "backward"}
    assert d["comparison"]["ok"] and d["comparison"]["checked"]["grads"] == 1
    assert r.predicted_peak("forward") == d["memory"][0]["predicted_peak_above_inputs_bytes"]
    # every stage is listed, and the final stage's per-line liveness is plain data
    fw = d["programs"][0]["forward"]
    assert fw["stages"][0]["stage"] == "as captured"
    lines = fw["liveness"]["lines"]
    assert len(lines) == fw["stages"][-1]["ops"]
    assert max(ln["high_water"] for ln in lines) == fw["liveness"]["peak_bytes"]
    text = str(r)
    assert "tanh" in text and "vs eager" in text and "predicted" in text


def test_html_escapes_names_from_user_code(tmp_path):
    r = trace_lab.inspect(_evil(), torch.randn(4), executor="eager", runs=0)
    html = r._repr_html_()
    assert "<script>alert" not in html and "&lt;script&gt;alert" in html
    path = r.save_html(tmp_path / "r.html")
    page = open(path).read()
    assert page.startswith("<!DOCTYPE html>") and "<script>alert" not in page
