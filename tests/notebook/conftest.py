"""The notebook tests' shared runs: each teaching notebook is executed once per session (teaching_runs.py)."""
import pytest

from teaching_runs import TeachingRuns


@pytest.fixture(scope="session")
def teaching(request, tmp_path_factory):
    """The session's runs of the teaching notebooks: ``teaching.browser(stem)`` (JupyterLab, Run All, the views)
    and ``teaching.executed(stem)`` (the executed notebook the prose is checked against)."""
    runs = TeachingRuns(request.session, tmp_path_factory)
    yield runs
    runs.close()
