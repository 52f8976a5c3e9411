"""What every HTML fragment of the report shares: escaping, and packing data into a page.

:func:`esc` escapes anything that can come from user code; :func:`pack` stores plain data
(or text) gzip + base64 in an attribute, and :data:`INFLATE_JS` is the page script that
unpacks it (``DecompressionStream``, no network). The trace view (:mod:`.html`), the graph
renderer (:mod:`.dot_render`) and the optional views all use them, so they live below all
three; :mod:`.html` re-exports them.
"""
from __future__ import annotations

import base64
import gzip
import html
import json

__all__ = ["esc", "pack", "unpack", "INFLATE_JS"]


def esc(s) -> str:
    return html.escape(str(s), quote=True)


def pack(obj) -> str:
    """Plain data -> gzip + base64 text (the browser unpacks it with :data:`INFLATE_JS`)."""
    raw = json.dumps(obj, separators=(",", ":")).encode("utf-8") if not isinstance(obj, (bytes, str)) else (
        obj.encode("utf-8") if isinstance(obj, str) else obj)
    return base64.b64encode(gzip.compress(raw, compresslevel=9, mtime=0)).decode("ascii")


def unpack(text: str, as_json: bool = True):
    """The inverse of :func:`pack` (tests, tools)."""
    raw = gzip.decompress(base64.b64decode(text)).decode("utf-8")
    return json.loads(raw) if as_json else raw


# window.__tlInflate(base64) -> Promise of the text; defined once per page, used by the trace and graph scripts
INFLATE_JS = r"""window.__tlInflate = window.__tlInflate || function (b64) {
  if (!window.DecompressionStream) { return Promise.reject(new Error('this browser cannot unpack gzip (DecompressionStream)')); }
  var bin = atob(b64), u = new Uint8Array(bin.length);
  for (var i = 0; i < bin.length; i++) { u[i] = bin.charCodeAt(i); }
  return new Response(new Blob([u]).stream().pipeThrough(new DecompressionStream('gzip'))).text();
};
"""
