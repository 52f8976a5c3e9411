"""How long a set of runs should take on N parallel workers, from seconds measured before.

Both the GPU check (its pytest-xdist scopes, handed out longest first by its plugin) and bench.py (its
processes, taken in round order by ``--jobs`` threads) give each next piece of work to the worker that is free
first; ``makespan`` replays that to say when the last worker ends. Start-up, contention and anything the earlier
seconds did not see are not in it: a forecast, printed beside the budget, not a promise."""
from __future__ import annotations


def makespan(seconds: list[float], workers: int, longest_first: bool = False) -> float:
    """When the last of ``workers`` ends if each piece of work (``seconds``, in order, or longest first) goes to
    the worker that is free first."""
    loads = [0.0] * max(1, workers)
    for s in (sorted(seconds, reverse=True) if longest_first else seconds):
        loads[loads.index(min(loads))] += s
    return max(loads)
