"""Rendering DOT graphs (any DOT source or ``graphviz`` graph): SVG through ``dot``, or in the browser through vendored WebAssembly.

Design: :func:`render_svg` runs the ``dot`` binary when it is on PATH, with a
timeout (a layout that runs too long returns None, it never hangs the caller).
:func:`graph_html` returns a self-contained HTML snippet: the inline SVG when
``dot`` rendered it, otherwise the DOT source plus the vendored Viz.js build
(``trace_lab/static/viz-global.js``, see extension/README.md) inline, which lays
the graph out in the browser offline. Both get the same small pan/zoom script
(wheel to zoom at the cursor, drag to pan, buttons to fit / reset) and a
collapsible DOT source, so a page whose scripts are blocked still shows
something useful. The before/after view of one program
(:func:`trace_lab.report.graph.graph_view_html`) builds on these; :mod:`.render` re-exports
both, so this module imports no graph code.

Everything from user code reaches the page escaped: labels are escaped when the
DOT is built (:func:`trace_lab.report.graph.dot_escape`), the DOT embedded for
the browser is a JSON string with ``<``, ``>`` and ``&`` as ``\\uXXXX``.

Size (``compress=True``, what the report's Graph tab uses): an SVG or DOT source
above ``COMPRESS_MIN`` characters is stored gzip + base64 in a hidden element
and unpacked by the page's script (``DecompressionStream``), the renderer is
stored the same way (about 0.65 MB instead of 1.3 MB) and
:func:`viz_loader_html` puts it once on a page for every graph on it (the
graphs wait on ``window.__tlVizP``); likewise the CSS and scripts every graph shares
(:func:`graph_assets_html`, ``shared_assets=False``), and ``dot``'s SVG is stored compacted
(:mod:`.svg_compact`) without its DOT source beside it (``save_graphs`` writes the ``.dot``;
without ``dot`` the DOT is what the browser lays out, so it stays). The defaults keep the plain
inline forms.
"""
from __future__ import annotations

import html
import json
import shutil
import subprocess
import uuid
from functools import lru_cache
from pathlib import Path

from .packing import INFLATE_JS, pack
from .svg_compact import compact_svg

__all__ = ["dot_available", "render_svg", "graph_html", "graph_assets_html", "vendored_viz_js", "VIZ_JS_PATH",
           "DOT_TIMEOUT_S", "viz_loader_html", "COMPRESS_MIN"]

VIZ_JS_PATH = Path(__file__).resolve().parent.parent / "static" / "viz-global.js"
DOT_TIMEOUT_S = 30.0
COMPRESS_MIN = 16_000  # with compress=True, an SVG or DOT source longer than this is stored packed

CSS = """
.tl-graph{position:relative;border:1px solid #d1d5db;border-radius:4px;background:#fff;margin:4px 0}
.tl-graph-viewport{overflow:hidden;cursor:grab;position:relative}
.tl-graph-viewport:active{cursor:grabbing}
.tl-graph-canvas{transform-origin:0 0;display:inline-block}
.tl-graph-canvas svg{display:block}
.tl-graph-tools{position:absolute;top:4px;right:4px;z-index:2;display:flex;gap:2px}
.tl-graph-tools button{font:12px system-ui,sans-serif;padding:1px 6px;border:1px solid #9ca3af;background:#f9fafb;
 border-radius:3px;cursor:pointer}
.tl-graph-msg{font:12px system-ui,sans-serif;color:#6b7280;padding:6px}
.tl-graph-notes{font:12px system-ui,sans-serif;color:#9a3412;margin:2px 6px}
.tl-graph details{font:11px system-ui,sans-serif;margin:2px 6px}
.tl-graph details pre{max-height:200px;overflow:auto;background:#f7f7f9}
.tl-gv-bar{font:13px system-ui,sans-serif;margin:4px 0}
.tl-gv-bar label{margin-right:10px;cursor:pointer}
.tl-gv-panes{display:flex;gap:8px}
.tl-gv-pane{flex:1 1 0;min-width:0}
.tl-gv-pane h4{font:600 13px system-ui,sans-serif;margin:2px 0}
.tl-graph .tl-z{display:none}
"""

# Pan/zoom: trace_lab's own, ~35 lines; state kept on the root element; 'fit' fits the width and is
# redone when the viewport resizes until the user zooms or drags.
PANZOOM_JS = r"""
window.__tlPanZoom = window.__tlPanZoom || function (root) {
  var vp = root.querySelector('.tl-graph-viewport'), cv = root.querySelector('.tl-graph-canvas');
  if (!vp || !cv || root.__tlpz) { return; }
  var st = root.__tlpz = {s: 1, x: 0, y: 0, moved: false};
  function apply() { cv.style.transform = 'translate(' + st.x + 'px,' + st.y + 'px) scale(' + st.s + ')'; }
  function fit() {
    var svg = cv.querySelector('svg'); if (!svg) { return; }
    var w = svg.width.baseVal.value || svg.clientWidth, vw = vp.clientWidth;
    if (!vw) { return; }
    st.s = Math.min(1, vw / (w || vw)); st.x = Math.max(0, (vw - w * st.s) / 2); st.y = 0; st.moved = false; apply();
  }
  function zoom(k, mx, my) {
    st.x = mx - (mx - st.x) * k; st.y = my - (my - st.y) * k; st.s *= k; st.moved = true; apply(); }
  vp.addEventListener('wheel', function (e) {
    e.preventDefault(); var r = vp.getBoundingClientRect();
    zoom(Math.exp(-e.deltaY * 0.0015), e.clientX - r.left, e.clientY - r.top);
  }, {passive: false});
  var drag = null;
  vp.addEventListener('pointerdown', function (e) { drag = {x: e.clientX - st.x, y: e.clientY - st.y}; });
  window.addEventListener('pointermove', function (e) {
    if (drag) { st.x = e.clientX - drag.x; st.y = e.clientY - drag.y; st.moved = true; apply(); } });
  window.addEventListener('pointerup', function () { drag = null; });
  root.querySelectorAll('.tl-graph-tools button').forEach(function (b) {
    b.addEventListener('click', function () {
      var a = b.getAttribute('data-act'), w = vp.clientWidth / 2, h = vp.clientHeight / 2;
      if (a === 'in') { zoom(1.25, w, h); } else if (a === 'out') { zoom(0.8, w, h); }
      else if (a === 'fit') { fit(); } else { st.s = 1; st.x = 0; st.y = 0; st.moved = true; apply(); }
    });
  });
  // refit while the user has not moved the picture (the page may still be laying out)
  if (window.ResizeObserver) { new ResizeObserver(function () { if (!st.moved) { fit(); } }).observe(vp); }
  root.__tlFit = fit; fit();
};
"""

RENDER_JS = r"""
(function () {
  var root = document.getElementById(%(id)s), cv = root.querySelector('.tl-graph-canvas');
  var msg = root.querySelector('.tl-graph-msg');
  var ready = window.__tlVizP || (window.Viz ? Promise.resolve(window.Viz) : null);
  if (!ready) { msg.textContent = 'graph renderer (Viz.js) not loaded'; return; }
  window.__tlViz = window.__tlViz || ready.then(function (Viz) { return Viz.instance(); });
  window.__tlViz.then(function (viz) {
    %(body)s
  }).catch(function (e) { msg.textContent = 'could not lay out the graph: ' + e; });
})();
"""
_RENDER_INLINE = "var svg = viz.renderSVGElement(%(dot)s);\n    cv.appendChild(svg); msg.remove(); window.__tlPanZoom(root);"
# the DOT is stored packed in the source <pre>'s data-tlz; unpacked once for the layout and for the <pre>
_RENDER_PACKED = ("return window.__tlDot(root).then(function (dot) {\n"
                  "      cv.appendChild(viz.renderSVGElement(dot)); msg.remove(); window.__tlPanZoom(root); });")

# packed SVG (dot rendered it): unpack into the canvas, then pan/zoom
SVG_PACKED_JS = r"""
(function () {
  var root = document.getElementById(%(id)s), cv = root.querySelector('.tl-graph-canvas');
  var msg = root.querySelector('.tl-graph-msg');
  window.__tlInflate(root.querySelector('.tl-svg-z').getAttribute('data-tlz')).then(function (svg) {
    cv.innerHTML = svg; msg.remove(); window.__tlPanZoom(root);
  }).catch(function (e) { msg.textContent = 'could not unpack the graph: ' + e; });
})();
"""

# a packed DOT source: unpacked when its <details> opens (or for the layout)
DOT_FN_JS = r"""
window.__tlDot = window.__tlDot || function (root) {
  var pre = root.querySelector('pre.tl-dot-z');
  pre.__tlText = pre.__tlText || window.__tlInflate(pre.getAttribute('data-tlz')).then(function (t) {
    pre.textContent = t; return t; });
  return pre.__tlText;
};
"""
DOT_PACKED_JS = r"""
(function () {
  var root = document.getElementById(%(id)s), d = root.querySelector('details.tl-dot-src');
  d.addEventListener('toggle', function () { if (d.open) { window.__tlDot(root); } });
})();
"""


def dot_available() -> bool:
    """True when the Graphviz ``dot`` binary is on PATH."""
    return shutil.which("dot") is not None


def _source(digraph) -> str:
    src = getattr(digraph, "source", digraph)
    if not isinstance(src, str):
        raise TypeError(f"expected a graphviz graph or DOT text, got {type(digraph).__name__}")
    return src


def render_svg(digraph, timeout: float = DOT_TIMEOUT_S) -> str | None:
    """SVG text through ``dot -Tsvg``; None when ``dot`` is absent, fails or runs past ``timeout`` s."""
    exe = shutil.which("dot")
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, "-Tsvg"], input=_source(digraph).encode("utf-8"), capture_output=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:  # subprocess.run kills the child before raising
        return None
    if done.returncode != 0:
        return None
    return done.stdout.decode("utf-8", errors="replace")


@lru_cache(maxsize=1)
def vendored_viz_js() -> str:
    """The vendored Viz.js standalone build (see extension/README.md)."""
    if not VIZ_JS_PATH.is_file():
        from ..errors import TraceLabError

        raise TraceLabError(f"the vendored graph renderer {VIZ_JS_PATH} is missing; run extension/fetch_viz.sh "
                            "or install Graphviz so that `dot` is on PATH")
    return VIZ_JS_PATH.read_text(encoding="utf-8")


def _viz_loader() -> str:
    # Hide AMD/CommonJS loaders from the UMD header so that it always sets window.Viz.
    return ("if(!window.Viz){(function(define,module,exports){\n" + vendored_viz_js()
            + "\n}).call(window,undefined,undefined,undefined);}")


@lru_cache(maxsize=1)
def _viz_packed() -> str:
    return pack(vendored_viz_js())


def viz_loader_html(compressed: bool = True) -> str:
    """The in-browser renderer as one <script>: packed (unpacked asynchronously into ``window.__tlVizP``,
    about half the size) or plain (defines ``window.Viz`` at once). Put it once before the graphs of a page."""
    if not compressed:
        return f"<script>{_viz_loader()}</script>"
    # the packed text is base64: it cannot close the script element
    return ("<script>" + INFLATE_JS + "if(!window.__tlVizP){window.__tlVizP = window.Viz ? Promise.resolve(window.Viz) : "
            f"window.__tlInflate(\"{_viz_packed()}\").then(function (src) {{\n"
            "  (new Function('define', 'module', 'exports', src)).call(window); return window.Viz; });}</script>")


def _js_string(s: str) -> str:
    """A JS string literal that cannot end a <script> element or open markup."""
    return json.dumps(s).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _strip_xml_header(svg: str) -> str:
    i = svg.find("<svg")
    return svg[i:] if i >= 0 else svg


def _notes_html(digraph) -> str:
    notes = getattr(digraph, "notes", None) or []
    return "".join(f'<div class="tl-graph-notes">{html.escape(n)}</div>' for n in notes)


def graph_assets_html() -> str:
    """What every graph snippet of a page shares (its CSS, the unpacker, pan/zoom, the DOT unpacker), for a
    page that draws several graphs with ``shared_assets=False``: put it once, before them."""
    return f"<style>{CSS}</style><script>{INFLATE_JS}{PANZOOM_JS}{DOT_FN_JS}</script>"


def graph_html(digraph, *, height: str = "600px", include_js: bool = True, use_dot: bool | None = None,
               compress: bool = False, shared_assets: bool = True) -> str:
    """A self-contained HTML snippet showing ``digraph`` with pan/zoom.

    ``use_dot``: None renders with ``dot`` when available and falls back to the
    vendored WebAssembly Graphviz; False forces the browser path. ``include_js``
    False leaves out the 1.3 MB renderer (for a page that already carries it:
    :func:`viz_loader_html`). ``compress``: store an SVG or DOT source longer
    than ``COMPRESS_MIN`` packed (gzip + base64), unpacked by the page's script.
    A snippet that needs the renderer carries the attribute ``data-tl-viz``. ``shared_assets`` False leaves
    out the CSS and scripts every graph shares (the page carries :func:`graph_assets_html` once). An SVG
    that ``dot`` laid out is stored through :func:`~.svg_compact.compact_svg` (whole points: under a
    pixel at 1:1; no comments) and, with ``compress``, without its DOT source (``save_graphs`` writes it).
    """
    src = _source(digraph)
    gid = "tlg-" + uuid.uuid4().hex[:12]
    svg = render_svg(src) if (use_dot is None and dot_available()) or use_dot else None
    tools = ("<div class='tl-graph-tools'><button data-act='in'>+</button><button data-act='out'>&minus;</button>"
             "<button data-act='fit'>fit</button><button data-act='reset'>1:1</button></div>")
    pack_dot = compress and len(src) > COMPRESS_MIN
    if compress and svg is not None:  # the laid-out picture is the content; its DOT is one call away
        pack_dot = False
        source = ("<details class='tl-dot-src'><summary>DOT source</summary><div>not stored "
                  "beside the laid-out graph (notebook size): <code>trace_lab.report.graph_export."
                  "save_graphs(report, folder)</code> writes each graph's <code>.dot</code> and <code>.svg</code>"
                  "</div></details>")
    elif pack_dot:
        source = (f"<details class='tl-dot-src'><summary>DOT source ({len(src) / 1024:.0f} KiB, stored packed: shown "
                  "when opened, needs the page's script)</summary>"
                  f"<pre class='tl-dot-z' data-tlz='{pack(src)}'></pre></details>")
    else:
        source = f"<details><summary>DOT source</summary><pre>{html.escape(src)}</pre></details>"
    viz_attr = " data-tl-viz='1'" if svg is None else ""
    style = f"<style>{CSS}</style>" if shared_assets else ""
    head = f"<div class='tl-graph' id='{gid}'{viz_attr}>{style}{tools}"
    viewport = f"<div class='tl-graph-viewport' style='height:{html.escape(height)}'><div class='tl-graph-canvas'>"
    dot_js = ((DOT_FN_JS if shared_assets else "") + DOT_PACKED_JS % {"id": _js_string(gid)}) if pack_dot else ""
    inflate = INFLATE_JS if (pack_dot or compress) and shared_assets else ""
    pan_zoom = PANZOOM_JS if shared_assets else ""
    if svg is not None:
        svg = compact_svg(_strip_xml_header(svg), decimals=0, drop_comments=True)
        if compress and len(svg) > COMPRESS_MIN:
            return (head + viewport + "</div><div class='tl-graph-msg'>drawing the graph (its SVG is stored packed in "
                    "this page and unpacked by the page's script)&hellip;</div>"
                    f"<div class='tl-z tl-svg-z' hidden data-tlz='{pack(svg)}'></div></div>" + _notes_html(digraph)
                    + source + f"<script>{inflate}{pan_zoom}\n{dot_js}{SVG_PACKED_JS % {'id': _js_string(gid)}}"
                    "</script></div>")
        return (head + viewport + svg + "</div></div>" + _notes_html(digraph) + source
                + f"<script>{inflate}{pan_zoom}\n{dot_js}"
                f"window.__tlPanZoom(document.getElementById({_js_string(gid)}));</script></div>")
    body = _RENDER_PACKED if pack_dot else _RENDER_INLINE % {"dot": _js_string(src)}
    scripts = ((viz_loader_html(compressed=compress) if include_js else "")
               + f"<script>{inflate}{pan_zoom}\n{dot_js}{RENDER_JS % {'id': _js_string(gid), 'body': body}}</script>")
    return (head + viewport + "</div><div class='tl-graph-msg'>laying out the graph in the browser "
            "(WebAssembly Graphviz, offline)&hellip;</div></div>" + _notes_html(digraph) + source + scripts
            + "</div>")
