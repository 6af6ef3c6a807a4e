"""Registers, spills and SASS instruction counts of CUDA kernel modules, optionally against the same modules compiled
with one more define: the static numbers a kernel-source change is checked with before it costs device time (NVRTC and
cuobjdump, no GPU).

    python -m tools.perf.cuda_module_counts --source gemv_w8a16.cu --scale 3 --archs sm_90,sm_89,sm_80
        # session 31: every MX W8A16 GEMV module of the spaces compiles without spills
    python -m tools.perf.cuda_module_counts --source gemv_w8a16.cu,gemv_w8a8.cu --define FP8D_ROWS_CLAMPED=1
        # with docs/perf/h200_s31_rows_clamped.patch applied: instructions with the define / without

The modules are those `tools.perf.precompile_cuda.variants` lists for each arch (native path; compute_80 PTX has no
SASS), filtered by source file and, with --scale, by FP8D_CFG_SCALE. Instructions: every SASS instruction but NOP.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os


def _counts(item: tuple) -> tuple[str, dict, dict, dict | None]:
    from kernels_cuda import compiler, isa

    name, defines, arch, extra = item

    def one(d: dict) -> dict:
        built = compiler.compile_module(name, arch, d)
        ops = isa.sass_opcodes(built.path)
        res = compiler.ptxas_resources(built.log)
        return {"registers": res.get("registers"), "spill_bytes": res.get("spill_bytes", 0),
                "instructions": sum(1 for op in ops if not op.startswith("NOP"))}

    base = one(dict(defines))
    return arch, dict(defines), base, one({**dict(defines), **extra}) if extra else None


def main(argv: list[str] | None = None) -> int:
    from tools.perf.precompile_cuda import variants

    ap = argparse.ArgumentParser(prog="python -m tools.perf.cuda_module_counts", description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", default="gemv_w8a16.cu", help="comma list of kernel sources")
    ap.add_argument("--scale", type=int, help="only modules with this FP8D_CFG_SCALE (0 tensor, 1 row, 2 block, 3 mx)")
    ap.add_argument("--archs", default="sm_90")
    ap.add_argument("--define", metavar="FP8D_NAME=V", help="also compile each module with this define and compare")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args(argv)
    sources = set(a.source.split(","))
    extra = {}
    if a.define:
        key, _, value = a.define.partition("=")
        extra = {key: int(value)}
    items, seen = [], set()
    for arch in a.archs.split(","):
        for _, name, defines, target in variants(arch, ("native",)):
            d = dict(defines)
            if name in sources and (a.scale is None or d.get("FP8D_CFG_SCALE") == a.scale) \
                    and (name, defines, target) not in seen:
                seen.add((name, defines, target))
                items.append((name, defines, target, extra))
    with concurrent.futures.ProcessPoolExecutor(max_workers=a.jobs) as pool:
        rows = list(pool.map(_counts, items))
    ratios, spilling = [], []
    for arch, d, base, other in rows:
        cfg = ",".join(f"{k.removeprefix('FP8D_CFG_')}={v}" for k, v in sorted(d.items()))
        line = f"{arch} {cfg}: {base['registers']} regs, {base['spill_bytes']} B spilled, {base['instructions']} instr"
        if base["spill_bytes"]:
            spilling.append((arch, cfg, ""))
        if other:
            ratios.append(other["instructions"] / base["instructions"])
            line += (f" | {a.define}: {other['registers']} regs, {other['spill_bytes']} B spilled, "
                     f"{other['instructions']} instr ({ratios[-1]:.3f}x)")
            if other["spill_bytes"]:
                spilling.append((arch, cfg, a.define))
        print(line)
    print(f"{len(rows)} modules; spilling: {len(spilling)}" + "".join(f"\n  {s[0]} {s[1]} {s[2]}" for s in spilling))
    if ratios:
        ratios.sort()
        print(f"instructions with {a.define} / without: median {ratios[len(ratios) // 2]:.3f}, "
              f"range {ratios[0]:.3f}-{ratios[-1]:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
