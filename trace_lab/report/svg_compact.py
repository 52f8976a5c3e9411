"""Smaller SVG text with the same picture, for SVGs stored in notebooks (issue 18: executed notebooks < 2 MB).

Every output is stored in the .ipynb, and matplotlib and ``dot`` write generous SVG:
coordinates to 6 decimals, one path command per line, an RDF metadata block (every line a
JSON string of its own in the notebook file). :func:`compact_svg` rewrites the geometry only:

* numbers in path data (``d``), ``points`` and the position / size attributes are rounded to
  ``decimals`` places (0.01 pt by default: far below a pixel; ``dot``'s graphs, hundreds of points
  wide and shown scaled to fit, are stored in whole points), path commands lose their spaces
  and line breaks;
* whitespace between tags and the ``<metadata>`` block go; comments stay (matplotlib writes each
  text it draws as paths under a comment naming it: the tests and a reader find the labels there)
  unless ``drop_comments`` (``dot`` repeats each node's ``<title>`` in a comment).

Scale factors (``transform="scale(0.015625)"`` of matplotlib's glyphs) and styles are left as
they are. A dedicated optimiser (scour) does more, but it parses the whole DOM in Python and
takes seconds on a large graph; this is a regular-expression pass over the attributes both
producers write, a few milliseconds per plot.
"""
from __future__ import annotations

import re

__all__ = ["compact_svg"]

# a decimal number as SVG writes it: "120", "120.25", "-.5", "1.5e+02", "3E-4"
_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_GEOMETRY = re.compile(r'(\s(?:x|y|x1|y1|x2|y2|cx|cy|rx|ry|r|width|height|points|viewBox)=")([^"]*)"')
_PATH = re.compile(r'(\sd=")([^"]*)"')
_TRANSLATE = re.compile(r"translate\(([^)]*)\)")


def _rounder(decimals: int):
    def num(m) -> str:
        s = f"{float(m.group(0)):.{decimals}f}"
        if "." in s:  # only a fraction's trailing zeros go: 120 stays 120 (decimals=0 made it 12)
            s = s.rstrip("0").rstrip(".")
        return "0" if s in ("-0", "") else s

    return lambda text: _NUMBER.sub(num, text)


def compact_svg(svg: str, decimals: int = 2, drop_comments: bool = False) -> str:
    """``svg`` with its geometry rounded to ``decimals`` places and its layout whitespace removed."""
    rnd = _rounder(decimals)
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)
    if drop_comments:
        svg = re.sub(r"<!--.*?-->", "", svg, flags=re.S)

    def path(m) -> str:
        d = " ".join(re.sub(r"\s*([MLHVCSQTAZmlhvcsqtaz])\s*", r"\1", rnd(m.group(2))).split())
        return f'{m.group(1)}{d}"'

    svg = _PATH.sub(path, svg)
    svg = _GEOMETRY.sub(lambda m: f'{m.group(1)}{" ".join(rnd(m.group(2)).split())}"', svg)
    svg = _TRANSLATE.sub(lambda m: f"translate({rnd(m.group(1))})", svg)
    return re.sub(r">\s+<", "><", svg).strip()
