"""The Regions tab's tools: a fused region's generated code, and its repro file, from the notebook.

Beside the Regions view (why each region ends) the user picks a region of the selected program
part and presses **show code** (the executor's generated code: Inductor's output code with its
kernels, nvFuser's FusionDefinition; :meth:`CompiledProgram.code_of`, issue 17 item 6) or
**export repro** (a standalone Python file of that region, its inputs and the executor call,
checked against eager when run: :func:`trace_lab.export_repro`, item 5), written to the working
directory. Both read the part's compilation record (``Report.compilation``; a report loaded from JSON or sent
back by a ``--nproc`` worker has none) and say so otherwise. Everything shown is escaped.
"""
from __future__ import annotations

import re

from ..report.packing import esc

__all__ = ["RegionTools"]


def _live_part(report, part):
    """The compilation record of the run's program part (``part`` is the view model's PartView), or None."""
    record = report.compilation(part.kind, part.program) if hasattr(report, "compilation") else None
    return record if record is not None and record.kind == part.kind else None


class RegionTools:
    """A region picker with **show code** and **export repro**; ``widget`` goes in the Regions tab."""

    NEEDS_LIVE = ("needs the run's live program: this report was loaded from a file or came back from a "
                  "--nproc worker")

    def __init__(self, W):
        self.pick = W.Dropdown(description="region", layout=W.Layout(width="220px"))
        self.code_button = W.Button(description="show code", icon="code",
                                    tooltip="the code the executor generated for this region")
        self.repro_button = W.Button(description="export repro", icon="download",
                                     tooltip="write a standalone file that runs this region eagerly and through "
                                             "its executor and compares them")
        self.out = W.HTML()
        self.widget = W.VBox([W.HBox([self.pick, self.code_button, self.repro_button]), self.out])
        self.code_button.on_click(lambda _b: self.show_code())
        self.repro_button.on_click(lambda _b: self.export())
        self.report = self.part = None

    def show(self, report, part) -> None:
        """Offer the fused regions of ``part``'s final stage (in program order)."""
        self.report, self.part, self.out.value = report, part, ""
        regions = [] if part is None or not part.stages else list(dict.fromkeys(
            ln.region for ln in part.stages[-1].lines if ln.role == "op" and ln.region))
        self.pick.options = regions
        self.pick.value = regions[0] if regions else None
        for w in (self.pick, self.code_button, self.repro_button):
            w.disabled = not regions

    def _say(self, html: str) -> str:
        self.out.value = f'<div class="tl-report">{html}</div>'
        return self.out.value

    def show_code(self) -> str:
        live = _live_part(self.report, self.part) if self.part is not None else None
        if live is None or live.compiled is None:
            return self._say(f'<div class="tl-placeholder">show code {esc(self.NEEDS_LIVE)}</div>')
        region = self.pick.value
        try:
            code = live.compiled.code_of(region)
        except KeyError as e:
            return self._say(f'<div class="tl-warn">{esc(e.args[0])} (executor {esc(live.compiled.executor)})</div>')
        return self._say(f"<b>{esc(region)}</b> ({esc(live.compiled.executor)}):<pre class='tl-gen'>{esc(code)}</pre>")

    def export(self, folder: str = ".") -> str:
        from ..errors import TraceLabError
        from ..run.repro import export_repro

        live = _live_part(self.report, self.part) if self.part is not None else None
        if live is None:
            return self._say(f'<div class="tl-placeholder">export repro {esc(self.NEEDS_LIVE)}</div>')
        region = self.pick.value
        name = re.sub(r"\W+", "_", f"repro_{self.report.name}_{self.part.kind}{self.part.program}_{region}").strip("_")
        path = f"{folder.rstrip('/')}/{name}.py"
        try:
            export_repro(live.traces[-1], path, region=region)
        except TraceLabError as e:
            return self._say(f'<div class="tl-warn">export repro: {esc(e)}</div>')
        return self._say(f"wrote <code>{esc(path)}</code>: run <code>python {esc(path)}</code> (it prints "
                         "<code>repro: matches eager</code> or raises with the difference)")
