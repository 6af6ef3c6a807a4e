"""Host cost of one Triton launch, piece by piece, for the launches an eager `dispatch.linear` call makes (GPU).

    python -m tools.perf.probe_triton_launch [--cases fp8_row:4096x4096:64=triton.w8a16_gemm,...]

Records the launches of one call (the JITFunction's `run` wrapped for the call), then times each again, host time
per launch (perf_counter, median of 1000; a sync every 100):
  jit        `kernel[grid](...)` as the launcher calls it (Triton's JIT path: bind, specialize, cache key, launch);
  binder     the binder alone (arguments -> specialization), and `compute_cache_key`;
  direct     the CompiledKernel's `run` with the bound arguments (what is left: argument packing, TMA descriptors,
             cuLaunchKernelEx);
  stream     `driver.active.get_current_stream` and torch's current stream.
Prints a table last.
"""

from __future__ import annotations

import argparse

import torch

from tools.perf.host_profile import forced_case, host_us

DEFAULT = ("fp8_row:4096x4096:64=triton.w8a16_gemm,fp8_block:4096x4096:256=triton.w8a8_gemm,"
           "fp8_tensor:4096x4096:256=torch.scaled_mm_tensorwise")


def _host(fn, n: int = 1000) -> float:
    return host_us(fn, n, sync_every=100)


def main(argv: list[str] | None = None) -> None:
    import triton
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction, compute_cache_key

    import dispatch

    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=DEFAULT)
    args = ap.parse_args(argv)
    dev = torch.device("cuda")
    rows = []
    for case in args.cases.split(","):
        name, w, qw, x = forced_case(case, dev)
        m, n = x.shape[0], w.shape[0]
        records = []
        orig = JITFunction.run

        def rec(self, *a, grid, warmup, **kw):
            kern = orig(self, *a, grid=grid, warmup=warmup, **kw)
            records.append((self, a, kw, grid, kern))
            return kern

        with dispatch.force(name):
            dispatch.linear(x, qw)
            torch.cuda.synchronize()
            JITFunction.run = rec
            try:
                dispatch.linear(x, qw)
            finally:
                JITFunction.run = orig
            total = _host(lambda: dispatch.linear(x, qw))
        rows.append((case, "dispatch.linear total", total))
        device = driver.active.get_current_device()
        for fn, a, kw, grid, kern in records:
            label = fn.fn.__name__
            rows.append((case, f"{label} jit", _host(lambda: fn.run(*a, grid=grid, warmup=False, **kw))))
            kernel_cache, key_cache, target, backend, binder = fn.device_caches[device]
            kw2 = dict(kw, debug=False, instrumentation_mode=kw.get("instrumentation_mode", ""))
            bound, specialization, options = binder(*a, **kw2)
            rows.append((case, f"{label} binder", _host(lambda: binder(*a, **kw2))))
            rows.append((case, f"{label} cache key", _host(lambda: compute_cache_key(key_cache, specialization, options))))
            stream = driver.active.get_current_stream(device)
            vals = tuple(bound.values())
            g = tuple(grid) + (1,) * (3 - len(grid))
            rows.append((case, f"{label} direct", _host(
                lambda: kern.run(g[0], g[1], g[2], stream, kern.function, kern.packed_metadata, None, None, None,
                                 *vals))))
            rows.append((case, f"{label} get_current_stream", _host(lambda: driver.active.get_current_stream(device))))
        rows.append((case, "torch current_stream", _host(lambda: torch.cuda.current_stream().cuda_stream)))
        rows.append((case, "torch.empty", _host(lambda: torch.empty((m, n), device=dev, dtype=torch.bfloat16))))
        rows.append((case, "bf16 F.linear", _host(lambda: torch.nn.functional.linear(x, w))))
    print(f"triton {triton.__version__}, torch {torch.__version__}")
    print(f"{'case':<48} {'piece':<44} {'host us':>8}")
    for case, piece, us in rows:
        print(f"{case:<48} {piece:<44} {us:8.2f}")


if __name__ == "__main__":
    main()
