"""Protocol-buffer wire format, written by hand where a message is small and fixed: a varint and a field."""
from __future__ import annotations

__all__ = ["varint", "field"]


def varint(value: int) -> bytes:
    """``value`` as a base-128 varint (a negative int64 as protobuf writes it: ten bytes, two's complement)."""
    value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def field(number: int, payload: bytes | int) -> bytes:
    """Field ``number``: an int as a varint (wire type 0), bytes as length-delimited (wire type 2)."""
    if isinstance(payload, int):
        return varint(number << 3) + varint(payload)
    return varint(number << 3 | 2) + varint(len(payload)) + payload
