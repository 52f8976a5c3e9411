"""cuda_graphs: the record/replay policy of GraphedRun, and which inputs a program writes.

CUDA graphs need a GPU; the policy around them (which inputs are recorded in place,
which are copied in and out, when to record again, when a held output forbids a
replay, when to give up) does not. It runs here with a stand-in recorder whose
replay, like a graph's, re-runs the program on the very tensors it was recorded with
and writes into the outputs it handed out at recording time. The real recorder is
exercised against eager on the GPU (tests/test_nvfuser_gpu.py::test_cuda_graphs_match_eager).
"""
from __future__ import annotations

import gc

import pytest
import torch

import trace_lab
from trace_lab.executors.cuda_graphs import MAX_RECORDINGS, GraphedRun, written_inputs

from examples.workloads import WORKLOADS


def stand_in_recorder(run, static):
    """Record = learn the outputs' shapes on copies (a graph executes nothing while recording);
    replay = run on the recorded inputs and write into the recorded outputs."""
    probe = run([s.clone() if isinstance(s, torch.Tensor) else s for s in static])
    outs = [torch.empty_like(o) for o in probe]

    def replay():
        for o, r in zip(outs, run(static)):
            o.copy_(r)

    return replay, outs, 0


def program(args):
    """out = a * b + k; c += 1 (c is written in place)."""
    a, b, c, k = args
    c.add_(1)
    return (a * b + k,)


def reference(a, b, k):
    return a * b + k


def make(n=4):
    return torch.randn(n), torch.randn(n), torch.zeros(n)


def test_replays_after_warm_up_and_updates_in_place_inputs():
    g = GraphedRun(program, written={2}, recorder=stand_in_recorder)
    a, b, c = make()
    for step in range(4):
        (out,) = g([a, b, c, 2.0])
        torch.testing.assert_close(out, reference(a, b, 2.0))
        assert torch.equal(c, torch.full_like(c, step + 1.0)), "the in-place update must land on the caller's tensor"
        del out
    assert (g.ungraphed, g.recordings, g.replays) == (1, 1, 3)


@pytest.mark.parametrize("guarded", [False, True], ids=["full-check", "addresses-only"])
def test_moving_input_is_copied_in_after_one_more_recording(guarded):
    """Also where the caller guards the inputs' layouts (``metadata_guarded``, as jit does): a new address is a
    move all the same."""
    g = GraphedRun(program, written={2}, recorder=stand_in_recorder, metadata_guarded=guarded)
    a, b, c = make()
    g([a, b, c, 1.0])
    g([a, b, c, 1.0])  # recorded with b in place
    for _ in range(3):
        b = torch.randn(4)  # moves every call from now on
        (out,) = g([a, b, c, 1.0])
        torch.testing.assert_close(out, reference(a, b, 1.0))
        del out
    assert g.recordings == 2 and g.replays == 4 and g.ungraphed == 1


def test_a_replay_says_what_it_copies():
    """Issue 27 item 2: the moving input is copied into its static buffer on every replay, and the summary the
    Report shows names it with its bytes; inputs recorded in place are not copied."""
    g = GraphedRun(program, written={2}, recorder=stand_in_recorder, names=["a", "b", "c", "k"])
    a, b, c = make(256)
    g([a, b, c, 1.0])
    g([a, b, c, 1.0])
    assert g.replay_copies() == {"in": [], "out": []}
    assert "a replay copies nothing" in g.summary()
    b = torch.randn(256)  # moves: the next recording gives it a static buffer
    g([a, b, c, 1.0])
    b = torch.randn(256)
    (out,) = g([a, b, c, 1.0])
    torch.testing.assert_close(out, reference(a, b, 1.0))
    assert g.replay_copies() == {"in": [("b", 256 * 4)], "out": []}
    assert "the last replay copied 1 input copied in (1.0 KiB: b)" in g.summary(), g.summary()


@pytest.mark.parametrize("guarded", [False, True], ids=["full-check", "addresses-only"])
def test_written_input_that_moves_is_copied_back(guarded):
    g = GraphedRun(program, written={2}, recorder=stand_in_recorder, metadata_guarded=guarded)
    a, b, _ = make()
    for _ in range(4):
        c = torch.full((4,), 5.0)  # a fresh tensor each call: it gets a static buffer
        g([a, b, c, 0.0])
        assert torch.equal(c, torch.full((4,), 6.0)), "the program's write must reach the caller's tensor"
    # c moved between calls 1 and 2, so call 2 warmed up once more; it moved again: recorded with a buffer
    assert (g.ungraphed, g.recordings, g.replays) == (2, 1, 2)
    assert g.replay_copies() == {"in": [("input 2", 16)], "out": [("input 2", 16)]}


def test_an_input_that_moves_once_during_warm_up_is_read_in_place():
    """A backward's saved tensors move once, when their forward leaves its un-graphed warm-up for its graph's memory,
    and then stay: recorded after that move they are read in place, and a replay copies nothing (issue 27 item 2:
    recording at the second call copied 130 saved tensors, 1.3 GB, on every replay of llama 8's backward)."""
    g = GraphedRun(program, written={2}, recorder=stand_in_recorder, names=["saved", "b", "c", "k"])
    a, b, c = make()
    g([a, b, c, 1.0])  # warm-up: the forward ran un-graphed, its output lives elsewhere
    a = a.clone()  # from now on the forward's graph hands out the same storage every call
    for _ in range(4):
        (out,) = g([a, b, c, 1.0])
        torch.testing.assert_close(out, reference(a, b, 1.0))
        del out
    assert (g.ungraphed, g.recordings, g.replays) == (2, 1, 3)
    assert g.replay_copies() == {"in": [], "out": []} and "a replay copies nothing" in g.summary()


def test_held_output_is_not_overwritten():
    g = GraphedRun(program, written=set(), recorder=stand_in_recorder)
    a, b, c = make()
    g([a, b, c, 0.0])
    (kept,) = g([a, b, c, 0.0])  # a replay's output, still held below
    expected = kept.clone()
    b.mul_(3)  # same tensor, new values
    (second,) = g([a, b, c, 0.0])
    torch.testing.assert_close(kept, expected)  # not overwritten ...
    torch.testing.assert_close(second, reference(a, b, 0.0))  # ... because this call ran without the graph
    assert g.ungraphed == 2
    del kept, second
    gc.collect()
    (third,) = g([a, b, c, 0.0])
    torch.testing.assert_close(third, reference(a, b, 0.0))
    assert g.replays == 2


def test_changing_constant_records_again_then_gives_up():
    g = GraphedRun(program, written=set(), recorder=stand_in_recorder)
    a, b, c = make()
    for k in range(MAX_RECORDINGS + 3):
        (out,) = g([a, b, c, float(k)])
        torch.testing.assert_close(out, reference(a, b, float(k)))
        del out
    assert g.recordings == MAX_RECORDINGS
    assert any("runs without a CUDA graph" in n and "recordings" in n for n in g.notes), g.notes


def test_recording_failure_runs_ungraphed_and_says_why():
    def broken(run, static):
        raise RuntimeError("operation not permitted when stream is capturing")

    g = GraphedRun(program, written={2}, recorder=broken)
    a, b, c = make()
    for _ in range(3):
        (out,) = g([a, b, c, 1.0])
        torch.testing.assert_close(out, reference(a, b, 1.0))
    assert g.replays == 0 and g.ungraphed == 3
    assert any("recording failed (RuntimeError: operation not permitted" in n for n in g.notes), g.notes



def test_host_tensor_input_is_refused_by_the_cuda_recorder():
    """A CPU tensor read by a recorded graph would be frozen at its recording value."""
    g = GraphedRun(program, written={2})  # the real recorder: it refuses before touching CUDA
    a, b, c = make()
    for k in range(3):
        (out,) = g([a, b, c, float(k)])
        torch.testing.assert_close(out, reference(a, b, float(k)))
    assert g.replays == 0 and any("is a cpu tensor" in n for n in g.notes), g.notes

def test_written_inputs_are_the_inputs_the_program_changes():
    """Checked against what running the compiled program actually changes, fused regions included."""
    for fusion in ("none", "dataflow"):
        fn, args = WORKLOADS["adam_step"].make("cpu", "small")
        jfn = trace_lab.jit(fn, fusion=fusion, executor="eager")
        jfn(*args)
        part = jfn.programs[0].parts[0]
        trace = part.traces[-1]
        placeholders = [n for n in trace.gm.graph.nodes if n.op == "placeholder"]
        g = torch.Generator().manual_seed(1)
        ins = [torch.randn(tuple(p.meta["val"].shape), generator=g).to(p.meta["val"].dtype) for p in placeholders]
        before = [t.clone() for t in ins]
        part.compiled.run(ins)
        changed = {i for i, (x, y) in enumerate(zip(ins, before)) if not torch.equal(x, y)}
        assert changed and written_inputs(trace) == changed, (fusion, sorted(changed), sorted(written_inputs(trace)))


def test_cpu_program_says_it_runs_without_graphs():
    fn, args = WORKLOADS["memory_peak"].make("cpu", "small")
    ref = fn(*args)
    jfn = trace_lab.jit(fn, fusion="memory", executor="eager", cuda_graphs=True)
    torch.testing.assert_close(jfn(*args), ref)
    (record,) = jfn.compilations()  # the run stage's note is on the part's compilation record
    assert record.graphs is None and any("CUDA graphs need a CUDA device" in n for n in record.all_notes()), \
        record.all_notes()
    assert not any("cuda_graphs" in n for n in record.compiled.notes)  # the compiled program is not patched


def test_magic_flag_reaches_the_options():
    from trace_lab.notebook.runner import RunOptions

    opts = RunOptions(cuda_graphs=True).validate()
    assert "CUDA graphs" in opts.describe()



def test_an_input_seen_at_its_address_with_other_strides_is_not_replayed_as_recorded():
    """``a.t()`` starts where ``a`` does: a graph recorded on ``a`` would read it with ``a``'s strides. The run
    must still compute with the transpose: a second recording, with a static buffer that every later call copies
    ``x`` into (whatever its layout), every call against eager."""
    g = GraphedRun(program, written={2}, recorder=stand_in_recorder)
    a, b, c = torch.randn(4, 4), torch.randn(4, 4), torch.zeros(4, 4)
    for x in (a, a, a, a.t(), a.t(), a):
        (out,) = g([x, b, c, 1.0])
        torch.testing.assert_close(out, reference(x, b, 1.0))
        del out
    assert (g.recordings, g.replays, g.ungraphed) == (2, 5, 1)
