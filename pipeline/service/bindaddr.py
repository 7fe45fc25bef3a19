"""The address a tf.data service server listens on.

TensorFlow's ``DispatchServer`` and ``WorkerServer`` have no bind option: their gRPC server always listens on
``0.0.0.0:PORT`` (``GrpcDataServerBase::Start``), which gRPC opens as a dual-stack ``[::]:PORT``, every interface
of the host. To listen on one address only, :func:`bound_to` wraps the start of a server: for that moment, the
``bind`` that TensorFlow's library calls (its entry in the library's table of imported functions, which the
dynamic linker fills) is replaced by one that turns a wildcard address into the chosen one (an IPv4 address on
gRPC's IPv6 socket as ``::ffff:a.b.c.d``); every other ``bind`` passes unchanged. :func:`listen_addresses` then
reads the listening sockets of this process from the kernel, and the caller refuses a server that listens
anywhere else (``servers.start_dispatcher`` / ``start_worker``): no server is left open by a build where the
replacement cannot be made (another platform, a TensorFlow without the import), it fails with the reason.
Linux, x86-64 and aarch64 ELF builds of TensorFlow."""
from __future__ import annotations

import contextlib
import ctypes
import errno
import ipaddress
import mmap
import os
import socket
import struct
import threading

from converters.util.errors import ServiceError

__all__ = ["resolve_bind", "bound_to", "listen_addresses", "is_wildcard", "interface_address", "plain_ip",
           "LOOPBACK"]

LOOPBACK = "127.0.0.1"
_LIBS = ("libtensorflow_cc.so", "libtensorflow_framework.so", "_pywrap_tensorflow_internal.so")
_R_JUMP_SLOT = {62: 7, 183: 1026}   # x86-64, aarch64
_R_GLOB_DAT = {62: 6, 183: 1025}
_lock = threading.Lock()
_slots: dict[str, int | None] = {}


def is_wildcard(address: str) -> bool:
    """``0.0.0.0`` or ``::``: every interface."""
    return ipaddress.ip_address(address).is_unspecified


def resolve_bind(text: str, what: str = "--bind") -> str:
    """The IP address ``text`` names (an address, or a host name resolved here); ``ServiceError`` naming it."""
    if not isinstance(text, str) or not text or len(text) > 253 or not text.isascii():
        raise ServiceError(f"{what}: expected an IP address or host name of this host, got {str(text)[:80]!r}")
    try:
        return plain_ip(text.strip("[]"))
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(text, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise ServiceError(f"{what} {text}: cannot resolve it: {exc}") from None
    found = [i[4][0] for i in infos if i[0] == socket.AF_INET] or [i[4][0] for i in infos]
    if not found:
        raise ServiceError(f"{what} {text}: names no address")
    return plain_ip(found[0])


def plain_ip(text: str) -> str:
    """The IP address ``text`` names (``ValueError`` if none), without a scope (``%eth0``), an IPv4-mapped IPv6
    address (``::ffff:a.b.c.d``) as its IPv4 address: the same address to the kernel."""
    ip = ipaddress.ip_address(text.split("%")[0])
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip)


def _got_offset(path: str) -> int | None:
    """Where the ELF shared library ``path`` keeps the address of its imported ``bind`` (relative to its load
    address), or None."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        if mm[:4] != b"\x7fELF" or mm[4] != 2 or mm[5] != 1:   # 64-bit little-endian only
            return None
        machine, = struct.unpack_from("<H", mm, 0x12)
        shoff, = struct.unpack_from("<Q", mm, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", mm, 0x3A)
        secs = [struct.unpack_from("<IIQQQQIIQQ", mm, shoff + i * shentsize) for i in range(shnum)]
        names = secs[shstrndx][4]

        def name(s):
            start = names + s[0]
            return mm[start:mm.find(b"\0", start)]

        rela = sorted((s for s in secs if s[1] == 4), key=lambda s: name(s) != b".rela.plt")   # SHT_RELA
        for s in rela:
            symtab = secs[s[6]]
            strtab = secs[symtab[6]][4]
            for r in range(s[4], s[4] + s[5], 24):
                r_offset, r_info = struct.unpack_from("<QQ", mm, r)
                if r_info & 0xFFFFFFFF not in (_R_JUMP_SLOT.get(machine), _R_GLOB_DAT.get(machine)):
                    continue
                st_name, = struct.unpack_from("<I", mm, symtab[4] + (r_info >> 32) * 24)
                start = strtab + st_name
                if mm[start:start + 5] == b"bind\0":
                    return r_offset
    return None


def _slot() -> int:
    """The address of the ``bind`` slot of the loaded TensorFlow library that starts the servers."""
    import tensorflow  # noqa: F401  (the library must be loaded)

    loaded = {}
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and int(parts[2], 16) == 0 and any(n in parts[5] for n in _LIBS):
                loaded.setdefault(parts[5], int(parts[0].split("-")[0], 16))
    for path in sorted(loaded, key=lambda p: [n in p for n in _LIBS].index(True)):
        if path not in _slots:
            _slots[path] = _got_offset(path)
        if _slots[path] is not None:
            return loaded[path] + _slots[path]
    raise ServiceError("this TensorFlow build offers no way to listen on one address; pass --bind 0.0.0.0 "
                       "to listen on every interface (docs/offload.md, trust model)")


@contextlib.contextmanager
def bound_to(address: str):
    """Servers started inside listen on ``address`` (an IP address) instead of every interface."""
    if is_wildcard(address):
        yield
        return
    if not os.path.exists("/proc/self/maps"):
        raise ServiceError(f"listening on {address} only needs Linux; pass --bind 0.0.0.0 to listen on every "
                           "interface (docs/offload.md, trust model)")
    target = ipaddress.ip_address(address)
    mapped = target.packed if target.version == 6 else ipaddress.IPv6Address(f"::ffff:{target}").packed
    libc = ctypes.CDLL(None, use_errno=True)
    real_bind = libc.bind
    real_bind.argtypes, real_bind.restype = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint32], ctypes.c_int
    errno_at = libc.__errno_location
    errno_at.restype = ctypes.POINTER(ctypes.c_int)

    def bind(fd, addr, length):
        raw = bytearray(ctypes.string_at(addr, length))
        family = struct.unpack_from("=H", raw)[0] if length >= 2 else -1
        if family == socket.AF_INET6 and length >= 24 and raw[8:24] == bytes(16):
            raw[8:24] = mapped
        elif family == socket.AF_INET and length >= 8 and raw[4:8] == bytes(4):
            if target.version == 6:
                errno_at()[0] = errno.EADDRNOTAVAIL   # no IPv4 wildcard for an IPv6 address
                return -1
            raw[4:8] = target.packed
        buf = ctypes.create_string_buffer(bytes(raw), len(raw))
        return real_bind(fd, buf, length)

    callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_uint32)(bind)
    with _lock:
        where = _slot()
        cell = ctypes.c_void_p.from_address(where)
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        page = where & ~(mmap.PAGESIZE - 1)
        if libc.mprotect(page, mmap.PAGESIZE, 3) != 0:   # PROT_READ | PROT_WRITE (a read-only relocated table)
            raise ServiceError(f"cannot listen on {address} only: {os.strerror(ctypes.get_errno())}; pass --bind "
                               "0.0.0.0 to listen on every interface")
        old = cell.value
        cell.value = ctypes.cast(callback, ctypes.c_void_p).value
        try:
            yield
        finally:
            cell.value = old


def listen_addresses(port: int) -> list[str]:
    """The addresses this process listens on at TCP ``port`` (``::ffff:a.b.c.d`` read as ``a.b.c.d``)."""
    import psutil

    out = []
    for c in psutil.Process().net_connections("tcp"):
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port:
            out.append(plain_ip(c.laddr.ip))
    return sorted(set(out))


def interface_address(name: str) -> str | None:
    """The IPv4 address of network interface ``name`` on this host (Linux), or None."""
    import fcntl

    if not isinstance(name, str) or not name or len(name) > 15 or not name.isascii():
        return None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()))   # SIOCGIFADDR
    except OSError:
        return None
    return socket.inet_ntoa(packed[20:24])
