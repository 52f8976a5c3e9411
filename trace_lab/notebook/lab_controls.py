"""The LabView's option controls and progress bar: one widget per schema option, and its value back.

Design. :data:`WIDGET_OPTIONS` are the options trace_lab.options offers to widgets, in
schema order; :func:`_control` makes each one's control (dropdown, checkbox, number, or a
text box where empty means None) and :func:`_control_value` reads it back as the option's
type. :func:`progress_widget` is the bar + label a first run shows, driven through a
:class:`.progress.RunProgress` (:func:`_shower` never moves the bar backwards).
ipywidgets is passed in or imported inside the functions, so importing this needs none.
"""
from __future__ import annotations

from ..options import SCHEMA
from .progress import RunProgress

_BAR_MAX = 1000  # the progress bars' resolution (RunProgress gives a fraction)


def progress_widget(text: str = "starting"):
    """(box, callback): a progress bar + label, and the ``progress(msg)`` callback that drives it (a
    :class:`.progress.RunProgress`: inspect's steps, jit's compile events, the elapsed time)."""
    import ipywidgets as W

    bar = W.IntProgress(min=0, max=_BAR_MAX, value=0, layout=W.Layout(width="180px"))
    label = W.Label(text)
    return W.HBox([W.Label("trace_lab:"), bar, label]), RunProgress(_shower(bar, label))


def _shower(bar, label):
    """show(text, fraction) for a RunProgress: sets the label and the bar (never backwards)."""
    def show(text: str, fraction: float) -> None:
        bar.value = max(bar.value, min(int(fraction * _BAR_MAX), _BAR_MAX))
        label.value = text

    return show


WIDGET_OPTIONS = [o for o in SCHEMA if "widget" in o.surfaces]  # one control each, in schema order


def _control(W, opt, value):
    """The control of one schema option: a dropdown of its choices, a checkbox, a number, or (an
    optional number) a text box where empty means None."""
    label = opt.label or opt.name
    if opt.choices is not None:
        return W.Dropdown(options=list(opt.choices), value=value, description=label, layout=W.Layout(width="190px"))
    if opt.type is bool:
        return W.Checkbox(value=value, description=label, indent=False, layout=W.Layout(width="auto"))
    # a number box: its label at its own width (ipywidgets cuts a description at 80 px: "profiled c..."), then
    # room for a few digits
    style, width = {"description_width": "initial"}, f"{70 + 8 * len(label)}px"
    if opt.none_ok or opt.default is None:
        return W.Text(value="" if value is None else str(value), placeholder="none", description=label,
                      style=style, layout=W.Layout(width=width))
    return W.BoundedIntText(value=value, min=opt.minimum or 0, max=10000, description=label, style=style,
                            layout=W.Layout(width=width))


def _control_value(opt, control):
    value = control.value
    if isinstance(value, str) and opt.type is int:
        return int(value) if value.strip() else None
    return opt.type(value)
