"""Shared test set-up: small thread count, fresh Dynamo state per module, helpers."""
from pathlib import Path

import pytest
import torch

torch.set_num_threads(2)


@pytest.fixture(autouse=True, scope="module")
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


# Seconds each scope (a module, or a teaching notebook's tests) took on a 2-core CPU with two pytest-xdist
# workers (the suite at 53af39e, its teaching notebooks' figures after they were executed once). Only the order
# of the run comes from it: the longest scopes start first, so that the short ones fill the end of both
# workers' time (pytest-xdist hands out scopes in collection order with --no-loadscope-reorder, dev.py).
# A scope not listed counts one second a test. `dev.py test` on this 2-core machine (shared with other work):
# 2,326 s of pytest at 53af39e (--dist loadscope, each notebook run twice or three times), 2,005 s at b90a1fe.
SCOPE_SECONDS = {
    "tests/test_opinfo_corpus.py": 480, "tests/test_inductor_executor.py": 375,
    "teaching-05_wait_sorting": 235, "teaching-01_fusion_and_peak_memory": 145,
    "teaching-04_backward_with_checkpointing": 145, "teaching-02_compile_time_and_fusion_cache": 130,
    "tests/notebook/test_magic_distributed.py": 125, "tests/test_distributed.py": 125,
    "tests/test_report_size.py": 117, "teaching-07_where_the_bytes_go": 112, "tests/test_view_model.py": 101,
    "tests/test_depth_views.py": 97, "teaching-06_where_the_time_goes": 90, "tests/test_fusion_passes.py": 90,
    "tests/test_workloads.py": 82, "teaching-03_copy_heavy_adam": 82, "tests/test_random_ops.py": 76,
    "tests/test_predict.py": 69, "tests/test_op_scratch.py": 68, "tests/test_fsdp_one_call.py": 67,
    "tests/notebook/test_issue26_widths.py": 65, "tests/notebook/test_issue26_timing.py": 64,
    "tests/test_repro_export.py": 59, "tests/notebook/test_browser_notebook7.py": 56,
    "tests/notebook/test_static_graph_browser.py": 56, "tests/test_comm_measure.py": 54,
    "tests/test_issue26_predict.py": 54, "tests/notebook/test_browser_views.py": 50, "tests/test_diff.py": 50,
    "tests/notebook/test_views_peak_plot_progress.py": 48,
}
TEACHING = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.ipynb"))
# the modules whose tests of one teaching notebook share its one execution (tests/notebook/teaching_runs.py)
TEACHING_MODULES = {f"tests/notebook/{m}.py" for m in (
    "test_browser", "test_browser_teaching", "test_teaching_notebooks", "test_notebooks_06_07")}


def scope_of(nodeid: str) -> str:
    """The unit of work one pytest-xdist worker runs whole: the tests of one teaching notebook
    (``teaching-<stem>``: its test id names it, or the test is named test_<NN>_... / test_notebook_<NN>_...),
    else the test's module (its module-scoped fixtures are made once)."""
    module = nodeid.split("::")[0]
    if module in TEACHING_MODULES:
        for stem in TEACHING:
            if any(key in nodeid for key in (f"[{stem}]", f"::test_{stem[:2]}_", f"::test_notebook_{stem[:2]}_")):
                return f"teaching-{stem}"
    return module


@pytest.hookimpl(optionalhook=True)  # `pytest -p no:xdist` (a debugger, one process) has no such hook
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadscope`` (dev.py) with scope_of's scopes: pytest-xdist's own ``loadgroup`` cannot group with
    pytest 9 (it rewrites ``item._nodeid``, which pytest 9's nodeid no longer reads), so a teaching notebook's
    tests are grouped here by their ids, which tests/conftest.py checks against their xdist_group marks."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class TeachingScopeScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return TeachingScopeScheduling(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # a marker-less test that needs a GPU would silently skip: make the gpu marker explicit
    for item in items:
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device (run on the GPU machine)"))
    scopes: dict = {}
    for item in items:
        scope = scope_of(item.nodeid)
        mark = item.get_closest_marker("xdist_group")
        group = mark and str(mark.args[0] if mark.args else mark.kwargs.get("name"))
        if (group or "").startswith("teaching-") != scope.startswith("teaching-") or \
                (group and group.startswith("teaching-") and group != scope):
            raise pytest.UsageError(f"{item.nodeid}: its xdist_group mark {group!r} and tests/conftest.py's "
                                    f"scope_of ({scope!r}) disagree: name the test after its notebook")
        scopes.setdefault(scope, []).append(item)
    # the longest scopes first, each scope's tests together and in their order
    order = sorted(scopes.values(), key=lambda its: -SCOPE_SECONDS.get(scope_of(its[0].nodeid), len(its)))
    items[:] = [item for its in order for item in its]


def pytest_sessionfinish(session, exitstatus):
    # Cells run through the in-process IPython shell leave Dynamo's '__compiled_fn_*' globals in
    # its namespace, each removed by a weakref hook when its compiled code dies. Let that happen
    # now, while the namespace still holds the names, not at interpreter exit (where the hooks
    # print a KeyError after pytest's summary).
    import gc

    torch._dynamo.reset()
    gc.collect()
    try:
        from torch._dynamo.utils import CleanupManager

        for idx in list(CleanupManager.instance.values):
            try:
                CleanupManager.instance._remove_id(idx)
            except KeyError:
                pass
    except Exception:  # noqa: BLE001 - best effort clean-up only
        pass
