"""Race tops (sim/tb/race.py): parameters, interface, and signal names a waveform can show as they are.

The scenarios' outcomes are the catalog's (tests/sim/test_races.py); these
tests pin what the hardware promises a waveform: every displayed signal has
its design name in its variant's scope (no generated ``$N``), and the top's
interface is the two variants' ports themselves. One more race: a Token-Flag-Fusion
reader polling every cycle, which sees a flag word committed even one cycle early.
"""

import pytest
from rejected import rejected
from amaranth.hdl import Fragment, Value
from amaranth.lib.wiring import In

from epfabric.sim.tb.race import (BLOCKS, NEW_FLAG, NO_CYCLE, OUTPUTS, Case, RaceCase, RaceTop,
                                  Step, marker, row)
from epfabric.hw.ub_port import UBOp
from epfabric.sw import dataflag
from utils import ComponentSpec, run


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
        rejected(RaceCase, case=3)


def test_top_interface_is_the_variants_ports():
    top = RaceTop(unsafe=case(), safe=case(reader="checksum", batch=2, expect=(0, 0)))
    Fragment.get(top, None)
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


# --- a TFF reader that consumes the very read that showed it the flag -------------------------

TFF_WORDS = 16          # 64 B modelled per block
TFF_BLOCK = 1


def tff_block(epoch):
    """A TFF block of ``epoch``: word 0 the flag ``NEW_FLAG + epoch``, word k ``epoch << 16 | k``."""
    return row([NEW_FLAG + epoch] + [epoch << 16 | k for k in range(1, TFF_WORDS)])


async def tff_poll_every_cycle(bench, *, epochs, gap):
    """Write TFF blocks ``1 .. epochs`` to one block, ``gap`` cycles apart, while a reader reads
    that block in every cycle (read latency 1: the tightest poll loop there is).

    Returns ``(seen, torn)``: the epochs whose flag a read showed, and the reads that showed
    an epoch's flag with any other payload word than that epoch's.
    """
    comp = bench.component
    for path, member, _value in comp.signature.flatten(comp):
        if member.flow == In:
            bench.set(".".join(str(p) for p in path), 0)
    bench.set("o_resp.ready", 1)
    bench.set("read.0.req.payload", {"addr": TFF_BLOCK, "word": 0})
    bench.set("read.0.req.valid", 1)
    seen, torn = set(), []
    written = 0
    for cycle in range(gap * (epochs + 1)):
        offer = written < epochs and cycle >= gap * (written + 1)
        if offer:
            bench.set("i_req.payload", {"op": UBOp.BLOCK_WRITE, "addr": TFF_BLOCK, "word": 0,
                                        "data": tff_block(written + 1)})
        bench.set("i_req.valid", int(offer))
        took = offer and await bench.get("i_req.ready")
        if await bench.get("read.0.resp.valid"):
            got = bench.decode("read.0.resp.payload", await bench.get("read.0.resp.payload"))
            block = int(got.block)
            epoch = (block & 0xFFFFFFFF) - NEW_FLAG
            if 1 <= epoch <= epochs:
                seen.add(epoch)
                if block != tff_block(epoch):
                    torn.append((bench.cycle, epoch, hex(block)))
        await bench.tick()
        written += bool(took)
    return sorted(seen), torn


def test_tff_reader_polling_every_cycle_never_sees_a_torn_block():
    """UBEP §3.4: whoever sees a block's flag sees its whole payload, even reading every cycle.

    The race catalog's readers leave two cycles between the poll and the payload read; this one
    uses the read that showed the flag, so a port that commits the flag word even one cycle
    before the rest of the block is seen.
    """
    spec = ComponentSpec("epfabric.hw.ub_port:UBMemory",
                         {"blocks": BLOCKS, "data_bytes": 4 * TFF_WORDS, "latency": 1,
                          "read_ports": 1})
    epochs = 6
    (seen, torn), _ = run(spec, tff_poll_every_cycle, {"epochs": epochs, "gap": 4})
    assert seen == list(range(1, epochs + 1))      # the reader saw every epoch's flag ...
    assert torn == []                              # ... and only ever with its payload
