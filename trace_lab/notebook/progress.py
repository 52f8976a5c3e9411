"""Progress of one cell run, as the notebook shows it: the step, what is compiling, the time so far.

Design. A run reports two kinds of things: ``trace_lab.inspect``'s steps (a message each: "running
eager reference", "compiling and running the first call", "measuring peak memory", ...) and, while
the first call compiles, jit's compile events (:func:`trace_lab.run.jit.compile_progress`: a program
part starts compiling; region ``done`` of ``total`` of that part is next). :class:`RunProgress` is a
callable (``progress(msg)``, what inspect takes) that also takes those events (``compile_event``) and
turns both into one line and one fraction for a bar::

    compiling and running the first call · forward #0: region 3 of 12 (fusion2) · 42 s

A long compile moves: each region moves the bar within the step's share, and a ticker thread
(``start``/``stop``, run by :func:`trace_lab.notebook.runner.inspect_cell`) refreshes the elapsed
seconds once a second while nothing else is said, except while a program is timed or measured
(:func:`trace_lab.runtime.measure.timing_active`): then nothing is drawn, so the front end renders nothing
on the CPUs the program is timed on. ``check`` is called on every step and event (the
thread that runs the cell): the notebook's Stop raises there. ``show(text, fraction)`` draws; it
is called from the cell's thread and from the ticker, so it only sets widget values.
"""
from __future__ import annotations

import threading
import time
from typing import Callable

from ..runtime.measure import timing_active

__all__ = ["RunProgress", "STEPS"]

# inspect's steps in order (a step not in the list keeps the fraction where it is); compiling happens
# during the first call, so its regions fill that step's share of the bar
STEPS = ("running eager reference", "compiling and running the first call", "measuring peak memory", "timing")


class RunProgress:
    """``progress(msg)`` for inspect plus ``compile_event(event)`` for jit; see the module docstring."""

    def __init__(self, show: Callable[[str, float], None], *, check: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, tick_seconds: float = 1.0):
        self.show = show
        self.check = check or (lambda: None)
        self.clock = clock
        self.tick_seconds = tick_seconds
        self.started = clock()
        self.step = ""
        self.step_index = 0
        self.part = None  # the program part compiling now ('forward #0')
        self.regions = None  # (done, total, current region name) of that part
        self.parts_done = 0
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._lock = threading.Lock()

    # -- what the run says ---------------------------------------------------------------------
    def __call__(self, msg: str) -> None:
        self.check()
        with self._lock:
            self.step = msg
            self.part = self.regions = None
            self.parts_done = 0
            for k, name in enumerate(STEPS):
                if msg.startswith(name):
                    self.step_index = k
                    break
        self.refresh()

    def compile_event(self, event: dict) -> None:
        """A jit compile event: {"event": "part", "part": label} or {"event": "region", "part": label,
        "done": k, "total": n, "region": name}."""
        self.check()
        with self._lock:
            if event.get("event") == "part":
                if self.part is not None:
                    self.parts_done += 1
                self.part, self.regions = event.get("part"), None
            elif event.get("event") == "region":
                self.part = event.get("part", self.part)
                self.regions = (event["done"], event["total"], event.get("region"))
        self.refresh()

    # -- what is shown ---------------------------------------------------------------------------
    def text(self) -> str:
        with self._lock:
            words = [self.step] if self.step else []
            if self.part is not None:
                if self.regions is None:
                    words.append(f"{self.part}: passes")
                else:
                    done, total, name = self.regions
                    if done < total:
                        words.append(f"{self.part}: region {done + 1} of {total}" + (f" ({name})" if name else ""))
                    else:
                        words.append(f"{self.part}: {total} region{'s' if total != 1 else ''} compiled")
            words.append(f"{self.clock() - self.started:.0f} s")
            return " · ".join(words)

    def fraction(self) -> float:
        """The step's place in STEPS, plus, while compiling, a share that grows with every part and region
        and never reaches the next step (how many parts a call compiles is not known in advance): half the
        step for the first part, a quarter for the second, ..."""
        with self._lock:
            within = 0.0
            if self.part is not None:
                regions = min(self.regions[0] / self.regions[1], 1.0) if self.regions and self.regions[1] else 0.0
                within = 1.0 - 0.5 ** (self.parts_done + regions)
            return min((self.step_index + within) / (len(STEPS) + 1), 1.0)

    def refresh(self) -> None:
        """Draw the line and the bar, except while a program is timed or measured (in any thread): a widget
        update makes the front end render, on the CPUs the program is timed on (issue 26 item 3)."""
        if timing_active():
            return
        try:
            self.show(self.text(), self.fraction())
        except Exception:  # noqa: BLE001 - a view that cannot draw must not stop the run
            pass

    # -- the ticker ------------------------------------------------------------------------------
    def start(self) -> None:
        """Refresh once every ``tick_seconds`` (the elapsed time moves during a long compile) until :meth:`stop`."""
        if self._ticker is not None:
            return
        self._stop.clear()

        def tick():
            while not self._stop.wait(self.tick_seconds):
                self.refresh()

        self._ticker = threading.Thread(target=tick, name="trace_lab-progress", daemon=True)
        self._ticker.start()

    def stop(self) -> None:
        self._stop.set()
        ticker, self._ticker = self._ticker, None
        if ticker is not None and ticker is not threading.current_thread():
            ticker.join(2 * self.tick_seconds)
