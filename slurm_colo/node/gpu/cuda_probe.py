"""A minimal CUDA client for ``slurm-colo node selftest``: the CUDA driver API through
ctypes, so a GPU node needs nothing beyond its driver (``libcuda.so.1``).

``python -m slurm_colo.node.gpu.cuda_probe [--alloc-gib A] [--more-gib B] [--hold]`` opens
device 0's primary context (under MPS: connects to the server its environment names),
reads the SM count and free memory the context sees, allocates A GiB and then B GiB more,
and prints one JSON line. With ``--hold`` it prints the line and then keeps running (its
context open) until its stdin closes, so the caller can look at the MPS daemon's client
list meanwhile.
Exit status 2 when no CUDA driver can be loaded, 1 when CUDA itself fails.
"""

from __future__ import annotations

import ctypes
import json
import sys
from typing import Any

GIB = 1 << 30
ATTR_MULTIPROCESSOR_COUNT = 16


class CudaError(Exception):
    pass


class Driver:
    def __init__(self, lib: Any) -> None:
        self.lib = lib

    def _name(self, code: int) -> str:
        s = ctypes.c_char_p()
        if self.lib.cuGetErrorName(code, ctypes.byref(s)) == 0 and s.value:
            return s.value.decode()
        return f"CUDA error {code}"

    def call(self, fn: str, *args: Any) -> None:
        code = getattr(self.lib, fn)(*args)
        if code != 0:
            raise CudaError(f"{fn}: {self._name(code)}")

    def alloc(self, nbytes: int) -> str:
        """``ok`` or the CUDA error name (the allocation is kept until exit)."""
        ptr = ctypes.c_uint64()
        code = self.lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes))
        return "ok" if code == 0 else self._name(code)


def probe(lib: Any, alloc_gib: float, more_gib: float) -> dict[str, Any]:
    d = Driver(lib)
    d.call("cuInit", 0)
    dev = ctypes.c_int()
    d.call("cuDeviceGet", ctypes.byref(dev), 0)
    ctx = ctypes.c_void_p()
    d.call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
    d.call("cuCtxSetCurrent", ctx)
    sms = ctypes.c_int()
    d.call("cuDeviceGetAttribute", ctypes.byref(sms), ATTR_MULTIPROCESSOR_COUNT, dev)
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    d.call("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
    out: dict[str, Any] = {
        "sm_count": sms.value,
        "free_gib": round(free.value / GIB, 3),
        "total_gib": round(total.value / GIB, 3),
    }
    if alloc_gib > 0:
        out["alloc"] = d.alloc(int(alloc_gib * GIB))
    if more_gib > 0:
        out["alloc_more"] = d.alloc(int(more_gib * GIB))
    return out


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m slurm_colo.node.gpu.cuda_probe")
    ap.add_argument("--alloc-gib", type=float, default=0.0)
    ap.add_argument("--more-gib", type=float, default=0.0)
    ap.add_argument("--hold", action="store_true")
    args = ap.parse_args(argv)
    rc = 0
    try:
        out = probe(ctypes.CDLL("libcuda.so.1"), args.alloc_gib, args.more_gib)
    except OSError as e:
        out, rc = {"error": f"no CUDA driver: {e}"}, 2
    except (CudaError, AttributeError) as e:
        out, rc = {"error": str(e)}, 1
    print(json.dumps(out), flush=True)
    if args.hold:
        sys.stdin.read()
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
