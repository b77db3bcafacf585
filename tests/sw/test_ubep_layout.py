"""The dispatch/combine HBM layout (sw/ubep/layout.py): regions in order, names for addresses."""

from dataclasses import replace

from epfabric.sw.ubep.layout import Layout

LAY = Layout(ranks=2, epr=2, batch=4, topk=2, hidden_blocks=2, words=16, cap=4)


def test_regions_tile_the_layout_in_order():
    starts = [getattr(LAY, name) for name, _ in Layout.REGIONS]
    assert starts[0] == 0 and starts == sorted(starts)
    assert LAY.blocks >= starts[-1]


def test_every_block_is_named_by_its_region():
    assert LAY.where(0, 0) == "CTRL[0] (dispatch SyncAll arrivals)"
    assert LAY.where(0, 1) == "CTRL[1] (the run's epoch)"
    assert LAY.where(0, 2) == "CTRL[2] (combine SyncAll arrivals)"
    assert LAY.where(LAY.STATUS, 3) == "STATUS[3]"                 # word-addressed: by word
    assert LAY.where(LAY.EXPAND, 7) == "EXPAND[7]" and LAY.where(LAY.COUNTS + 1) == "CNT[0]"
    assert LAY.where(LAY.recv_block(1, 0, 2, 1), 5) == "RECV block 21 word 5"
    assert LAY.where(LAY.RECV_GUARD) == "RECV_GUARD block 0 word 0"
    assert LAY.where(LAY.TCNT) == "TCNT block 0 word 0"
    assert LAY.where(LAY.blocks) == f"outside the layout (block {LAY.blocks} of {LAY.blocks})"
    named = {LAY.where(b).split()[0].split("[")[0] for b in range(LAY.blocks)}
    # no SWFLAG words here, and no UBEP-INC regions (Layout inc=False)
    assert named == {name for name, _ in Layout.REGIONS} - {"SWFLAG", "IDX", "IMETA", "MCBUF",
                                                            "YOWN"}
    inc = replace(LAY, inc=True)
    # UBEP-INC's regions come after every other system's, before CANN's UpdateTokenNumsOut ones
    assert inc.IDX == LAY.IDX == LAY.SENDCNT and inc.blocks > LAY.blocks
    assert {inc.where(b).split()[0].split("[")[0] for b in range(inc.IDX, inc.SENDCNT)} == {
        "IDX", "IMETA", "MCBUF", "YOWN"}
    assert inc.where(inc.SENDCNT).startswith("SENDCNT[") and inc.where(inc.TOKNUMS) == "TOKNUMS[0]"
    assert inc.where(inc.mcbuf_block(1, 2, 1)).startswith("MCBUF block ")
