"""Race tops (hw/race.py): parameters, interface, and signal names a waveform can show as they are.

The scenarios' outcomes are the catalog's (tests/sim/test_races.py); these
tests pin what the hardware promises a waveform: every displayed signal has
its design name in its variant's scope (no generated ``$N``), and the top's
interface is the two variants' ports themselves.
"""

import pytest
from amaranth.hdl import Fragment, Value

from epfabric.hw.race import (BLOCKS, NO_CYCLE, OUTPUTS, Case, RaceCase, RaceTop, Step, marker,
                              row)
from epfabric.hw.ub_port import UBOp
from epfabric.sw import dataflag


def case(**kw):
    base = dict(data_bytes=64, non_atomic=False, init=(), steps=(Step(2, 0, UBOp.WORD_WRITE, 0,
                                                                      0, 7),),
                reader="flag_then_read", flag_block=0, data_block=1, expect=0, flag=7)
    return Case(**{**base, **kw})


def test_marker_is_dataflag_dc_marker():
    r = row([0x10, 0x20, 0xFFFFFFFF, 3, 4, 5, 6, 7, 0xAAAA])       # word 8 is not in the marker
    assert marker(r) == dataflag.dc_marker(dataflag.int_to_block(r, 64))


@pytest.mark.parametrize("kw, error, message", [
    ({"reader": "nope"}, ValueError, r"reader must be one of flag_then_read, sentinel, counter, "
                                     r"checksum, not 'nope'"),
    ({"batch": 0}, ValueError, r"batch must be in \[1, 4\], not 0"),
    ({"data_block": 3, "batch": 2}, ValueError, r"data_block \+ batch must be <= 4, not 3 \+ 2"),
    ({"batch": 2, "expect": 0}, ValueError, r"expect must be one row or 2 rows"),
    ({"flag_block": BLOCKS}, ValueError, r"flag_block must be in \[0, 3\], not 4"),
    ({"steps": ("x",)}, TypeError, r"steps\[0\] must be a Step, not 'x'"),
])
def test_bad_case(kw, error, message):
    with pytest.raises(error, match=message):
        case(**kw)
    with pytest.raises(TypeError, match="case must be a Case, not 3"):
        RaceCase(case=3)


def test_top_interface_is_the_variants_ports():
    top = RaceTop(unsafe=case(), safe=case(reader="checksum", batch=2, expect=(0, 0)))
    paths = {".".join(map(str, path)): obj for path, _, obj in top.signature.flatten(top)}
    assert set(paths) == {f"{v}.{n}" for v in ("unsafe", "safe") for n in OUTPUTS}
    assert paths["unsafe.done"] is top.unsafe.done and paths["safe.stale"] is top.safe.stale
    assert top.unsafe.wrong_cycle.init == NO_CYCLE


@pytest.mark.parametrize("reader", ["flag_then_read", "checksum", "counter"])
def test_displayed_signals_have_their_design_names(reader):
    """Each gtkw trace is named in its variant's scope as it was created: no ``name$N``."""
    kw = {"reader": reader}
    if reader == "checksum":
        kw.update(batch=2, expect=(0, 0))
    if reader == "counter":
        kw.update(data_block=2, counter_reset=True)
    top = RaceTop(unsafe=case(**kw), safe=case(**kw))
    design = Fragment.get(top, None).prepare()
    for variant in ("unsafe", "safe"):
        info = next(i for i in design.fragments.values() if i.name == ("top", variant))
        traces = [Value.cast(t) for t in getattr(top, variant).gtkw_traces()]
        assert len({t.name for t in traces}) == len(traces)
        for sig in traces:
            assert info.signal_names.get(sig) == sig.name, sig.name
        assert not [n for n in info.signal_names.values() if "$" in n]
    top_info = next(i for i in design.fragments.values() if i.name == ("top",))
    assert not [n for n in top_info.signal_names.values() if "$" in n]
