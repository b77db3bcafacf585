"""Data-as-Flag DataBlock formats (UBEP §3.4, Figure 6).

Three ways to let a receiver detect that a 512 B DataBlock has arrived
without a separate barrier, all relying on the UB port writing a block
atomically (UBEP §3.4 "Correctness and safety assumptions"):

* **Token-Flag Fusion (TFF)**: the leading 32 B of the block are a flag, the
  remaining 480 B carry payload; the receiver polls the flag.
* **Data-for-Checksum (DC)**: blocks carry 512 B of raw payload; the sender
  sums the leading 32 B markers of a batch and sends the sum as a separate
  checksum packet; the receiver waits for a checksum equal to the sum of the
  markers it holds.
* **Sentinel Polling (SP)**: the receiver pre-fills its buffer with a sentinel;
  a block has arrived when its leading 32 B differ from the sentinel. A
  payload equal to the sentinel is never detected, so SP reserves an encoding
  that normal data cannot produce (:data:`RESERVED_SENTINEL`) and the sender
  rejects payloads that contain it.

Blocks are ``bytes`` of :data:`BLOCK_BYTES`; the 32 B fields are viewed as
eight little-endian 32-bit words (``numpy.uint32``), the same word order the
hardware's :class:`~epfabric.hw.hbm.HBMSlice` rows use (word *k* = bytes
4k .. 4k+3).
"""

import numpy as np

from ..hw.hbm import BLOCK_BYTES, FLAG_BYTES
from ..hw.validate import UserError

__all__ = ["BLOCK_BYTES", "FLAG_BYTES", "TFF_PAYLOAD_BYTES", "TFF_TAG", "SENTINEL_WORD",
           "RESERVED_SENTINEL",
           "ZERO_SENTINEL", "tff_pack", "tff_unpack", "tff_arrived", "dc_marker",
           "dc_checksum", "dc_verify", "sp_fill", "sp_arrived", "sp_check_payload",
           "block_to_int", "int_to_block", "leading_words"]

TFF_PAYLOAD_BYTES = BLOCK_BYTES - FLAG_BYTES
#: The TFF flag word's tag: word 0 of a Token-Flag-Fused block is ``TFF_TAG | epoch``
#: (UBEP Fig. 6a "F == 0x0d0d", plus an epoch; docs/spec/kernels.md §1.7).
TFF_TAG = 0x0D0D0000
#: A word that normal FP16/BF16 data never produce: every half-word is
#: 0x7E5A, a signalling-free NaN payload outside what arithmetic generates
#: (the canonical NaN is 0x7E00), UBEP §3.4 "reserve a sentinel encoding".
SENTINEL_WORD = 0x7E5A7E5A
#: The reserved sentinel: the flag field's words all :data:`SENTINEL_WORD`.
RESERVED_SENTINEL = np.full(FLAG_BYTES // 4, SENTINEL_WORD, dtype=np.uint32)
#: The naive sentinel (all zeros) that real payloads hit.
ZERO_SENTINEL = np.zeros(FLAG_BYTES // 4, dtype=np.uint32)
_MASK32 = 0xFFFFFFFF


def _as_bytes(data, length, what):
    buf = bytes(np.asarray(data, dtype=np.uint8).tobytes()) if not isinstance(data, (bytes, bytearray)) \
        else bytes(data)
    if len(buf) != length:
        raise UserError(f"{what} must be {length} bytes, not {len(buf)}")
    return buf


def _flag_words(flag):
    arr = np.asarray(flag, dtype=np.uint64)
    if arr.ndim == 0:
        arr = np.array([int(arr)] + [0] * 7, dtype=np.uint64)
    if arr.shape != (8,) or np.any(arr > _MASK32):
        raise UserError(f"flag must be a 32-bit int or eight 32-bit words, not {flag!r}")
    return arr.astype(np.uint32)


def leading_words(block):
    """The leading 32 B of ``block`` as eight little-endian ``uint32`` words."""
    block = _as_bytes(block, BLOCK_BYTES, "block")
    return np.frombuffer(block[:FLAG_BYTES], dtype="<u4").astype(np.uint32)


def block_to_int(block, data_bytes=BLOCK_BYTES):
    """The leading ``data_bytes`` of ``block`` as a little-endian int (an HBM row)."""
    block = _as_bytes(block, BLOCK_BYTES, "block")
    return int.from_bytes(block[:data_bytes], "little")


def int_to_block(row, data_bytes=BLOCK_BYTES):
    """A 512 B block whose leading ``data_bytes`` are ``row`` (rest zero)."""
    return row.to_bytes(data_bytes, "little") + bytes(BLOCK_BYTES - data_bytes)


# --- Token-Flag Fusion ------------------------------------------------------

def tff_pack(flag, payload):
    """Build a TFF block: 32 B ``flag`` (int or 8 words) then 480 B ``payload``."""
    payload = _as_bytes(payload, TFF_PAYLOAD_BYTES, "TFF payload")
    return _flag_words(flag).astype("<u4").tobytes() + payload


def tff_unpack(block):
    """Split a TFF block into (flag words, payload bytes)."""
    block = _as_bytes(block, BLOCK_BYTES, "block")
    return leading_words(block), block[FLAG_BYTES:]


def tff_arrived(block, expected_flag):
    """True when the block's flag equals ``expected_flag``."""
    return bool(np.array_equal(leading_words(block), _flag_words(expected_flag)))


# --- Data-for-Checksum ------------------------------------------------------

def dc_marker(block):
    """A block's marker: its leading 32 B summed as eight uint32 words, mod 2**32."""
    return int(leading_words(block).astype(np.uint64).sum() & _MASK32)


def dc_checksum(blocks):
    """The checksum packet of a batch: the sum of the blocks' markers, mod 2**32."""
    return sum(dc_marker(b) for b in blocks) & _MASK32


def dc_verify(blocks, checksum):
    """True when the received ``blocks`` match the batch ``checksum``."""
    return dc_checksum(blocks) == (int(checksum) & _MASK32)


# --- Sentinel Polling ------------------------------------------------------

def sp_fill(sentinel=RESERVED_SENTINEL):
    """A receive block pre-filled with ``sentinel`` in its leading 32 B."""
    return _flag_words(sentinel).astype("<u4").tobytes() + bytes(TFF_PAYLOAD_BYTES)


def sp_arrived(block, sentinel=RESERVED_SENTINEL):
    """True when the block's leading 32 B differ from ``sentinel``."""
    return not np.array_equal(leading_words(block), _flag_words(sentinel))


def sp_check_payload(block, sentinel=RESERVED_SENTINEL):
    """Return ``block``; raise if its leading 32 B equal ``sentinel`` (never detectable)."""
    if not sp_arrived(block, sentinel):
        raise UserError("payload's leading 32 B equal the sentinel: its arrival could never "
                        "be detected (use RESERVED_SENTINEL, UBEP §3.4)")
    return block
