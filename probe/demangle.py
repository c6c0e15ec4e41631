"""C++ kernel names, readable: ``__cxa_demangle`` from libstdc++ through ctypes, cached per name.

Why not a package: the demangler is already in every process that runs CUDA C++ code
(libstdc++ is loaded by PyTorch, cuBLAS and the CUDA runtime), and a window has at most a
few hundred distinct names, each demangled once. The parameter list and a leading ``void``
are cut (``void at::native::f<float>(int, float*)`` reads ``at::native::f<float>``): the
template arguments tell kernels apart, the parameters repeat them. A name that does not
demangle (a C kernel, Triton's ``triton_poi_fused_add_0``) is kept as it is.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any

from telemetry.kernels import MAX_NAME_CHARS


@functools.cache
def _cxa() -> Any:
    for name in ("libstdc++.so.6", ctypes.util.find_library("stdc++")):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            fn = lib.__cxa_demangle
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        return fn
    return None


@functools.cache
def _free() -> Any:
    libc = ctypes.CDLL(None)
    fn = libc.free
    fn.argtypes = [ctypes.c_void_p]
    return fn


@functools.lru_cache(maxsize=4096)
def demangle(name: str) -> str:
    """The readable form of a (possibly) mangled kernel name, at most MAX_NAME_CHARS long."""
    text = name
    fn = _cxa() if name.startswith("_Z") else None
    if fn is not None:
        status = ctypes.c_int(0)
        ptr = fn(name.encode(), None, None, ctypes.byref(status))
        if ptr and status.value == 0:
            try:
                text = ctypes.string_at(ptr).decode(errors="replace")
            finally:
                _free()(ptr)
    return shorten(text)[:MAX_NAME_CHARS] or name[:MAX_NAME_CHARS]


def shorten(text: str) -> str:
    """``void ns::kernel<T>(args)`` -> ``ns::kernel<T>`` (the outermost parameter list cut)."""
    if text.startswith("void "):
        text = text[5:]
    depth = 0
    for i, ch in enumerate(text):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif (ch == "(" and depth == 0 and i > 0 and not text.startswith("(anonymous namespace)", i)
              and not text[:i].endswith(("operator", "operator()"))):
            return text[:i]
    return text
