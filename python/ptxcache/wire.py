# SPDX-License-Identifier: Apache-2.0
"""The daemon's framing and message encoding (proto/PROTOCOL.md).

A frame is an 8-byte header (magic ``PX``, version 1, type, big-endian body
length) and a body that is one msgpack map. Bodies are encoded with the
``msgpack`` module when it is installed (Debian: python3-msgpack) and
otherwise with the small codec below, which covers exactly what the
protocol uses: maps, arrays, str, bin, ints, bools, nil and floats. Both
decode str as ``str`` and bin as ``bytes``.

Nothing here does I/O.
"""
from __future__ import annotations

import struct

TYPE_CHECKING = False
if TYPE_CHECKING:      # typing: 5 ms of an import; the names are annotations only
    from typing import Any

__all__ = ["MAGIC", "VERSION", "HEADER", "T_HELLO", "T_PING", "T_STATS", "T_ARTIFACT_GET",
           "T_ARTIFACT_PUT", "T_ARTIFACT_RELEASE", "T_PROGRESS", "T_ERROR", "REPLY",
           "frame", "frame_parts", "parse_header", "pack", "unpack", "codec_name", "WireError"]

MAGIC = b"PX"
VERSION = 1
HEADER = 8

# Request types; the reply to type T has type T | REPLY.
T_HELLO = 1
T_PING = 2
T_STATS = 4
T_ARTIFACT_GET = 10
T_ARTIFACT_PUT = 11
T_ARTIFACT_RELEASE = 12
T_PROGRESS = 0xFE       # daemon to client, while a request waits
T_ERROR = 0xFF
REPLY = 0x80


class WireError(ValueError):
    """Bytes that are not a frame or message of the protocol."""


try:  # the C-accelerated codec, when the system has it
    import msgpack as _msgpack
except ImportError:  # pragma: no cover - depends on the machine
    _msgpack = None


def codec_name() -> str:
    """Which msgpack codec this process uses: "msgpack X.Y.Z" or "built-in"."""
    if _msgpack is not None:
        return "msgpack " + ".".join(str(x) for x in _msgpack.version)
    return "built-in"


# A bin field at least this long is sent from the caller's buffer, not
# copied into the frame (frame_parts()).
TAIL_MIN = 64 << 10


def frame(ftype: int, body: dict) -> bytes:
    """One whole frame of type ftype whose body is the map body."""
    return b"".join(frame_parts(ftype, body))


def frame_parts(ftype: int, body: dict) -> list[bytes | memoryview]:
    """The frame of frame(), as buffers to send one after the other: a
    large bin field goes last in the map and is its own buffer, the
    caller's bytes themselves (a 64 MB put is not copied twice to be
    framed). The daemon reads a map's fields in any order."""
    tail = [k for k, v in body.items()
            if isinstance(v, (bytes, bytearray, memoryview)) and len(v) >= TAIL_MIN]
    if not tail:
        data = pack(body)
        return [MAGIC + bytes((VERSION, ftype)) + struct.pack(">I", len(data)) + data]
    name = tail[0]
    value = memoryview(body[name]).cast("B")
    head: list[bytes] = [_head(len(body), 0x80, 0x0f, None, 0xde, 0xdf)]
    for k, v in body.items():
        if k != name:
            head.append(pack(k))
            head.append(pack(v))
    head.append(pack(name))
    head.append(b"\xc6" + struct.pack(">I", len(value)))
    data = b"".join(head)
    return [MAGIC + bytes((VERSION, ftype)) + struct.pack(">I", len(data) + len(value)) + data,
            value]


def parse_header(hdr: bytes, limit: int) -> tuple[int, int]:
    """(type, body length) of an 8-byte header; WireError if it is not one
    of ours or announces more than limit bytes."""
    if hdr[:2] != MAGIC or hdr[2] != VERSION:
        raise WireError("not a ptxcache frame (header %r)" % hdr[:4])
    n = struct.unpack(">I", hdr[4:8])[0]
    if n > limit:
        raise WireError("frame of %d bytes is over the limit of %d" % (n, limit))
    return hdr[3], n


def pack(obj: Any) -> bytes:
    if _msgpack is not None:
        return _msgpack.packb(obj, use_bin_type=True)
    out: list[bytes] = []
    _pack(obj, out)
    return b"".join(out)


def unpack(data: bytes | bytearray) -> Any:
    """The one msgpack object that is the whole of data."""
    if _msgpack is not None:
        try:
            return _msgpack.unpackb(data, raw=False, strict_map_key=False)
        except Exception as e:  # msgpack raises several types
            raise WireError("malformed message: %s" % e) from None
    try:
        obj, end = _unpack(memoryview(data), 0)
    except (IndexError, UnicodeDecodeError, struct.error, TypeError, RecursionError) as e:
        raise WireError("malformed message: %s" % e) from None
    if end != len(data):
        raise WireError("malformed message: trailing bytes")
    return obj


def _pack(obj: Any, out: list[bytes]) -> None:
    if obj is None:
        out.append(b"\xc0")
    elif obj is True:
        out.append(b"\xc3")
    elif obj is False:
        out.append(b"\xc2")
    elif isinstance(obj, int):
        if 0 <= obj < 0x80:
            out.append(bytes((obj,)))
        elif -32 <= obj < 0:
            out.append(struct.pack(">b", obj))
        elif 0 <= obj < 1 << 64:
            out.append(b"\xcf" + struct.pack(">Q", obj))
        elif -(1 << 63) <= obj < 0:
            out.append(b"\xd3" + struct.pack(">q", obj))
        else:
            raise OverflowError("integer %d does not fit in 64 bits" % obj)
    elif isinstance(obj, float):
        out.append(b"\xcb" + struct.pack(">d", obj))
    elif isinstance(obj, str):
        b = obj.encode("utf-8")
        out.append(_head(len(b), 0xa0, 0x1f, 0xd9, 0xda, 0xdb))
        out.append(b)
    elif isinstance(obj, (bytes, bytearray, memoryview)):
        b = bytes(obj)
        out.append(_head(len(b), None, 0, 0xc4, 0xc5, 0xc6))
        out.append(b)
    elif isinstance(obj, (list, tuple)):
        out.append(_head(len(obj), 0x90, 0x0f, None, 0xdc, 0xdd))
        for x in obj:
            _pack(x, out)
    elif isinstance(obj, dict):
        out.append(_head(len(obj), 0x80, 0x0f, None, 0xde, 0xdf))
        for k, v in obj.items():
            _pack(k, out)
            _pack(v, out)
    else:
        raise TypeError("cannot encode %s in a ptxcache message" % type(obj).__name__)


def _head(n: int, fix: int | None, fixmax: int, b8: int | None, b16: int, b32: int) -> bytes:
    if fix is not None and n <= fixmax:
        return bytes((fix | n,))
    if b8 is not None and n < 0x100:
        return bytes((b8, n))
    if n < 0x10000:
        return bytes((b16,)) + struct.pack(">H", n)
    return bytes((b32,)) + struct.pack(">I", n)


_INTS = {0xcc: ">B", 0xcd: ">H", 0xce: ">I", 0xcf: ">Q",
         0xd0: ">b", 0xd1: ">h", 0xd2: ">i", 0xd3: ">q"}
_LENS = {0xc4: (1, "bin"), 0xc5: (2, "bin"), 0xc6: (4, "bin"),
         0xd9: (1, "str"), 0xda: (2, "str"), 0xdb: (4, "str"),
         0xdc: (2, "arr"), 0xdd: (4, "arr"), 0xde: (2, "map"), 0xdf: (4, "map")}


def _unpack(d: memoryview, p: int) -> tuple[Any, int]:
    c = d[p]
    p += 1
    if c < 0x80:
        return c, p
    if c >= 0xe0:
        return c - 0x100, p
    if c < 0x90:
        return _seq(d, p, c & 0x0f, True)
    if c < 0xa0:
        return _seq(d, p, c & 0x0f, False)
    if c < 0xc0:
        n = c & 0x1f
        return _take(d, p, n).tobytes().decode("utf-8"), p + n
    if c == 0xc0:
        return None, p
    if c in (0xc2, 0xc3):
        return c == 0xc3, p
    if c in _INTS:
        fmt = _INTS[c]
        w = struct.calcsize(fmt)
        return struct.unpack(fmt, _take(d, p, w))[0], p + w
    if c == 0xca:
        return struct.unpack(">f", _take(d, p, 4))[0], p + 4
    if c == 0xcb:
        return struct.unpack(">d", _take(d, p, 8))[0], p + 8
    if c in _LENS:
        w, kind = _LENS[c]
        n = int.from_bytes(_take(d, p, w), "big")
        p += w
        if kind == "bin":
            return _take(d, p, n).tobytes(), p + n
        if kind == "str":
            return _take(d, p, n).tobytes().decode("utf-8"), p + n
        return _seq(d, p, n, kind == "map")
    raise WireError("malformed message: msgpack type 0x%02x is not used by the protocol" % c)


def _take(d: memoryview, p: int, n: int) -> memoryview:
    if p + n > len(d):
        raise WireError("malformed message: truncated")
    return d[p:p + n]


def _seq(d: memoryview, p: int, n: int, as_map: bool) -> tuple[Any, int]:
    if n > len(d) - p:      # every element takes at least one byte
        raise WireError("malformed message: %d elements in %d bytes" % (n, len(d) - p))
    if as_map:
        m: dict = {}
        for _ in range(n):
            k, p = _unpack(d, p)
            v, p = _unpack(d, p)
            m[k] = v
        return m, p
    a = []
    for _ in range(n):
        v, p = _unpack(d, p)
        a.append(v)
    return a, p
