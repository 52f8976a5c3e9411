"""The Summary's regions row says why there are more misses than signatures: a signature compiled again.

Inductor compiles a region that writes over its dying inputs apart from one of the same signature that does not
(llama2 small with dataflow + Inductor on the CPU: 9 misses of 8 signatures in the forward, fusion4 and fusion6
sharing one, fusion6 donating inputs 0 and 1). The region records below are written by hand.
"""
from __future__ import annotations

from trace_lab.report.report import _region_rows


def _program(regions):
    return [{"index": 0, "forward": {"regions": regions}}]


def _region(name, signature, hit=False, donated=None):
    r = {"name": name, "signature": signature, "cache_hit": hit, "compile_seconds": 0.0 if hit else 1.0}
    if donated is not None:
        r["donated"] = donated
    return r


def test_a_signature_compiled_again_for_other_donated_inputs_is_said():
    rows = dict(_region_rows(_program([_region("fusion0", "a"), _region("fusion1", "b"),
                                       _region("fusion2", "a", donated=[0, 1]), _region("fusion3", "a", hit=True)])))
    row = rows["regions forward #0"]
    assert row.startswith("4 regions, 2 unique signatures, 1 cache hit, 3 misses "
                          "(1 of them a signature compiled again for other donated inputs), 3.00 s compiling"), row


def test_as_many_misses_as_signatures_say_nothing_more():
    row = dict(_region_rows(_program([_region("fusion0", "a"), _region("fusion1", "a", hit=True)])))[
        "regions forward #0"]
    assert row.startswith("2 regions, 1 unique signature, 1 cache hit, 1 miss, 1.00 s compiling"), row


def test_the_same_signature_and_donation_compiled_twice_gives_no_reason_it_cannot_see():
    row = dict(_region_rows(_program([_region("fusion0", "a"), _region("fusion1", "a")])))["regions forward #0"]
    assert "2 misses (1 of them a signature compiled again), " in row, row  # the fusion cache off, for one
