"""The notebook layer: the ``%%thunder_trace`` magic, its widgets and the comparison session.

* :mod:`.cell`    - a cell as a function of the notebook's names (write-back on success only)
* :mod:`.runner`  - one run of a cell under RunOptions -> Report
* :mod:`.session` - runs feeding the Compare table (per output, and kernel-wide for ``--compare``)
* :mod:`.widgets` - LabView: controls, Rerun in a background thread, tabs, static HTML twin
* :mod:`.magics`  - the IPython extension (``%load_ext trace_lab``)

Only plain data (Reports) flows from the compiler to these modules.
"""
from .session import Run, Session, kernel_session

__all__ = ["Run", "Session", "kernel_session"]
