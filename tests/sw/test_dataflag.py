"""Data-as-Flag block formats (sw/dataflag.py)."""

import numpy as np
import pytest

from epfabric.sw import dataflag as df


def payload(seed, n=df.TFF_PAYLOAD_BYTES):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def test_tff_roundtrip_and_layout():
    p = payload(1)
    block = df.tff_pack(0x0D0D, p)
    assert len(block) == 512
    flag, got = df.tff_unpack(block)
    assert got == p
    assert flag[0] == 0x0D0D and not flag[1:].any()
    assert block[:4] == (0x0D0D).to_bytes(4, "little")
    assert df.tff_arrived(block, 0x0D0D) and not df.tff_arrived(block, 0x0D0E)


def test_tff_rejects_wrong_sizes():
    with pytest.raises(ValueError, match=r"TFF payload must be 480 bytes, not 481"):
        df.tff_pack(1, bytes(481))
    with pytest.raises(ValueError, match=r"flag must be a 32-bit int or eight 32-bit words"):
        df.tff_pack(1 << 32, bytes(480))


def test_dc_checksum_detects_missing_or_stale_block():
    blocks = [payload(s, 512) for s in range(5)]
    cs = df.dc_checksum(blocks)
    assert df.dc_verify(blocks, cs)
    assert not df.dc_verify(blocks[:4] + [bytes(512)], cs)   # one block not yet arrived
    manual = sum(int.from_bytes(b[4 * k:4 * k + 4], "little") for b in blocks for k in range(8))
    assert cs == manual % 2**32


def test_sp_detects_arrival_and_rejects_collision():
    buf = df.sp_fill()
    assert not df.sp_arrived(buf)
    data = bytes(512)
    assert df.sp_arrived(data)                                 # zeros differ from the reserved sentinel
    assert not df.sp_arrived(data, df.ZERO_SENTINEL)           # ... but collide with a zero sentinel
    with pytest.raises(ValueError, match=r"equal the sentinel"):
        df.sp_check_payload(data, df.ZERO_SENTINEL)
    assert df.sp_check_payload(data) == data


def test_reserved_sentinel_not_produced_by_fp16_arithmetic():
    """The half-words of RESERVED_SENTINEL itself (not a copy of its value) never come out of
    FP16 arithmetic, NaNs included; a payload that does equal it is refused."""
    reserved = set(np.asarray(df.RESERVED_SENTINEL, dtype="<u4").view("<u2").tolist())
    assert df.RESERVED_SENTINEL.shape == (df.FLAG_BYTES // 4,)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(1 << 16).astype(np.float16)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 6e-8], dtype=np.float16)
    with np.errstate(all="ignore"):
        produced = np.concatenate([x, x * x, x / np.float16(0), np.sqrt(x), x - x, specials,
                                   specials * x[:7], np.float16(np.inf) - np.float16(np.inf)
                                   + np.zeros(1, np.float16)])
    halves = set(produced.view(np.uint16).tolist())
    assert not reserved & halves
    with pytest.raises(ValueError, match="equal the sentinel"):
        df.sp_check_payload(df.sp_fill())          # a payload that is the reserved sentinel


def test_block_int_roundtrip():
    block = df.tff_pack(7, payload(3))
    row = df.block_to_int(block, 64)
    assert df.int_to_block(row, 64)[:64] == block[:64]
    assert df.block_to_int(df.int_to_block(row, 64), 64) == row
