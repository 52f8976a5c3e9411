"""Shared test set-up: small thread count, fresh Dynamo state per module, helpers."""
import pytest
import torch

torch.set_num_threads(2)


@pytest.fixture(autouse=True, scope="module")
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def pytest_collection_modifyitems(config, items):
    # a marker-less test that needs a GPU would silently skip: make the gpu marker explicit
    for item in items:
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device (run on the GPU machine)"))


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
