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
