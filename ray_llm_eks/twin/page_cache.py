"""The page cache over the model's files: how much of them it holds, and dropping them from it.

A drill's weight reload reads the checkpoint from the page cache when the node has read it
before (warm) and from the disk when it has not (cold); AWS's one published figure for a Ray
Serve LLM weight reload is about 145 s cold and about 2 s from the page cache (docs/verification.md,
"Drills"). :func:`evict` asks the kernel to drop the files' clean pages
(``posix_fadvise(POSIX_FADV_DONTNEED)``, no privilege needed and nothing else on the machine
touched); :func:`resident_fraction` reads back what stayed (``mincore(2)`` over a read-only map),
so a cold reload is proven cold, not assumed.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from pathlib import Path

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte))
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)


def model_files(folder: Path) -> list[Path]:
    """The checkpoint's weight files (what a reload reads)."""
    return sorted(p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin", ".pt") and p.is_file())


def _resident_pages(path: Path) -> tuple[int, int]:
    size = path.stat().st_size
    if size == 0:
        return 0, 0
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    fd = os.open(path, os.O_RDONLY)
    try:
        address = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap {path}")
        try:
            vector = (ctypes.c_ubyte * pages)()
            if _libc.mincore(address, size, vector) != 0:
                raise OSError(ctypes.get_errno(), f"mincore {path}")
            return sum(1 for flag in vector if flag & 1), pages
        finally:
            _libc.munmap(address, size)
    finally:
        os.close(fd)


def resident_fraction(paths: list[Path]) -> float:
    """The share of the files' pages in the page cache now (0 to 1)."""
    resident = total = 0
    for path in paths:
        held, pages = _resident_pages(path)
        resident, total = resident + held, total + pages
    return resident / total if total else 0.0


def evict(paths: list[Path]) -> float:
    """Drop the files' pages from the page cache; returns the share still resident (0 when it worked)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return resident_fraction(paths)


def warm(paths: list[Path]) -> float:
    """Read the files once, so the next reload finds them in the page cache; returns the share resident."""
    for path in paths:
        with path.open("rb") as handle:
            while handle.read(1 << 20):
                pass
    return resident_fraction(paths)
