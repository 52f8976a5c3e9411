"""Rendering DOT graphs: SVG through ``dot``, or in the browser through vendored WebAssembly.

The renderer itself is :mod:`.dot_render` (:func:`render_svg`, :func:`graph_html`,
:func:`viz_loader_html`, ...), which knows nothing of traces; the before/after view of one
program, :func:`graph_view_html`, is :mod:`.graph`'s. This module gathers both under their
old names (``from trace_lab.report.render import graph_html, graph_view_html``).
"""
from __future__ import annotations

import shutil  # noqa: F401 - the module dot_render finds ``dot`` with (tests patch ``render.shutil.which``)

from .dot_render import (COMPRESS_MIN, DOT_TIMEOUT_S, VIZ_JS_PATH, _viz_packed, dot_available,  # noqa: F401
                         graph_html, render_svg, vendored_viz_js, viz_loader_html)
from .graph import graph_view_html

__all__ = ["dot_available", "render_svg", "graph_html", "graph_view_html", "vendored_viz_js", "VIZ_JS_PATH",
           "DOT_TIMEOUT_S", "viz_loader_html", "COMPRESS_MIN"]
