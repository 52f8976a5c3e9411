"""The names the generated cell function is built with, and the marker of an unbound name.

Design. :mod:`.cell` rebuilds a cell as ``__thunder_trace_cell__`` inside a factory whose
parameters are the helpers the body calls (the :data:`UNBOUND` marker, the line-magic
runner); every helper name starts with ``__thunder_trace`` so that no cell name can clash
with it. :data:`UNBOUND` is one object in every process (it pickles by name), so a rank
that unpickles a cell's result compares it by identity. Shared by :mod:`.cell` and
:mod:`.cell_line_magics`; imports nothing of trace_lab.
"""
from __future__ import annotations

CELL_FUNCTION_NAME = "__thunder_trace_cell__"
_UNBOUND_NAME = "__thunder_trace_unbound__"
_MAGIC_NAME = "__thunder_trace_line_magic__"


class _Unbound:
    """Marks a cell name that no statement bound during the run (or that ``del`` removed)."""

    def __repr__(self) -> str:
        return "<unbound>"

    def __reduce__(self):  # one marker in every process: a rank that unpickles the cell compares by identity
        return "UNBOUND"


UNBOUND = _Unbound()
