"""Result file names say where a run ran (benchmarks/_results.py: ``device_slug``, ``result_stem``).

A GPU machine lent as one kind may be another (2026-11-28: a call for two H100s ran on two H200s, and a
hand-written ``--name`` said h100x2). bench.py, gpu_check.py and fsdp_bench.py take the device part of their
names from the device the run saw; fsdp_bench's ``--name`` is a template whose wrong GPU is replaced."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from script_loader import load_script

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _results import device_slug, result_stem  # noqa: E402


@pytest.mark.parametrize("name, count, slug", [
    ("NVIDIA H100 80GB HBM3", 1, "h100"),
    ("NVIDIA H200", 2, "h200x2"),
    ("NVIDIA H100 80GB HBM3", 4, "h100x4"),
    ("cpu", 1, "cpu"),
    (None, 1, "nogpu"),
    ("Tesla T4", 1, "teslat4"),
])
def test_device_slug_names_the_card_and_how_many(name, count, slug):
    assert device_slug(name, count) == slug


def test_the_three_scripts_share_one_device_slug():
    import bench

    gpu_check = load_script("benchmarks/gpu_check.py")
    for card in ("NVIDIA H100 80GB HBM3", "NVIDIA H200"):
        assert bench._slug(card) == gpu_check.slug(card) == device_slug(card)
    assert bench._slug("cpu") == "cpu"


def test_a_template_is_filled_in():
    stem, note = result_stem("{date}-{device}-{commit}-fsdp", "h200x2", "2637a6f", dirty=True, date="2026-11-28")
    assert (stem, note) == ("2026-11-28-h200x2-2637a6f-dirty-fsdp", None)
    assert result_stem("{commit}", "h100", None)[0] == "nogit"


def test_a_name_that_claims_another_gpu_is_corrected_with_a_note():
    stem, note = result_stem("2026-11-28-h100x2-2637a6f-fsdp-peerfree", "h200x2", "2637a6f")
    assert stem == "2026-11-28-h200x2-2637a6f-fsdp-peerfree"
    assert "h100x2" in note and "h200x2" in note


@pytest.mark.parametrize("template", ["2026-11-28-h200x2-x-fsdp", "fsdp_run", "h200x2", "rh100x2b-not-a-card"])
def test_a_name_naming_the_right_gpu_or_none_is_kept(template):
    assert result_stem(template, "h200x2", "abc") == (template, None)


def test_an_unknown_placeholder_is_a_clear_error():
    with pytest.raises(ValueError, match=r"only \{date\}, \{device\} and \{commit\}"):
        result_stem("{date}-{gpu}", "h100", "abc")


def test_a_part_of_the_gpu_check_is_named_a_subset(tmp_path):
    """A check given -k (2026-11-28: notebook 02 again at 4dd6773) wrote `...-gpu-check.json`, the name of a whole
    check, which latest_full_check_items (the forecasts' list of items) would have taken for the whole check."""
    gpu_check = load_script("benchmarks/gpu_check.py")
    dev = load_script("dev.py")
    whole = dev.gpu_check_args(["--workers", "2"])
    part = dev.gpu_check_args(["--workers", "2", "-k", "02_compile_time"])
    pytest_args = (lambda args: [a for a in args[args.index("--") + 1:]] if "--" in args else args)
    assert not gpu_check.is_subset([]) and not gpu_check.is_subset(pytest_args(whole))
    assert gpu_check.is_subset(["-k", "02_compile_time", "--full", "-m", "(gpu or teaching) or (full and not browser)"])
    assert gpu_check.is_subset(["tests/test_x.py"])
    assert part[part.index("-k"):part.index("-k") + 2] == ["-k", "02_compile_time"]
    env = {"date": "2026-11-28", "gpu": "NVIDIA H100 80GB HBM3", "commit": "4dd6773", "torch": "t", "cuda": "c",
           "nvfuser": "n", "nvfuser_missing": None, "python": "p"}
    run = {"wall_s": 1.0, "workers": 2, "budget_s": 10.0, "returncode": 0, "timed_out": False}
    items = [{"item": "tests/test_a.py::test_a@g", "group": "g", "status": "passed", "reason": "", "seconds": 1.0,
              "finished": True}]
    gpu_check.write(env, items, run, True, [], tmp_path)
    gpu_check.write(env, [dict(items[0], item="tests/test_b.py::test_b@g")], run, True, [], tmp_path, subset=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "2026-11-28-h100-4dd6773-gpu-check-subset.json", "2026-11-28-h100-4dd6773-gpu-check-subset.txt",
        "2026-11-28-h100-4dd6773-gpu-check.json", "2026-11-28-h100-4dd6773-gpu-check.txt"]
    assert gpu_check.latest_full_check_items(tmp_path) == ["tests/test_a.py::test_a"]
