"""One Triton kernel config compiled ahead of time (no GPU), its main loop read from the SASS: the numbers the
session-14 notes quote (kernels_triton/README: layout conversions, spills, wgmma serialization).

    python -m tools.sass_loop gemv ROW 0 1,16,512,0,4          # scale layout, A_MODE (0 bf16 x, 1 fp8 x, 2 fused),
    python -m tools.sass_loop gemv MX32 0 16,64,128,0,4,3      #   GemvConfig fields in order
    python -m tools.sass_loop gemm ROW '{"block_m": 64, "block_n": 128, "block_k": 128, "num_warps": 4,
        "num_stages": 4, "split_k": 0, "swap_ab": true, "tma": true}'     # W8A16 GEMM (bf16 x), GemmConfig JSON
    python -m tools.sass_loop gemm8 GROUP_BLOCK '{"block_m": 128, "block_n": 128, "block_k": 128, "num_warps": 8,
        "num_stages": 4, "tma": true}'                                      # W8A8 GEMM: A8Scales name, GemmConfig
    [--arch sm_90] [--top 12] [--show] [--no-mx-fold] [--no-drain]         # --show: print the loop's instructions;
                                                                           # --no-mx-fold: MX32's unfolded decode;
                                                                           # --no-drain: WGMMA_DRAIN off (racy)
    TRITON_PTXAS_PATH=/path/to/ptxas python -m tools.sass_loop ...         # another ptxas (session 18: 13.4)

Prints registers, spill bytes (ptxas -v), whether ptxas serialized the wgmmas, the wgmma register hazards in the PTX
and in the SASS (dispatch.isa), and for the largest loop body its instruction count, barriers and most frequent
opcodes.
"""

from __future__ import annotations

import argparse
import collections
import json


def _compile(kind: str, layout: str, spec: list[str], arch: str, mx_fold: bool = True, drain: bool = True):
    from dispatch.target import Target
    from kernels_triton import isa as I
    from kernels_triton._gemm_layouts import WScale

    if kind == "gemv":
        from kernels_triton.configs import GemvConfig
        a_mode, fields = int(spec[0]), [int(v) for v in spec[1].split(",")]
        v = I.gemv_variant("gemv", arch, WScale[layout], a_mode, GemvConfig(*fields))
    elif kind == "gemm8":
        from kernels_triton._gemm_config import GemmConfig
        from kernels_triton._gemm_isa import _w8a8_variant
        from kernels_triton._gemm_layouts import A8Scales
        v = _w8a8_variant(Target.simulated_for(arch), A8Scales[layout], GemmConfig(**json.loads(spec[0])))
    else:
        from kernels_triton._gemm_config import GemmConfig
        from kernels_triton._gemm_isa import _w8a16_variant
        v = _w8a16_variant(Target.simulated_for(arch), WScale[layout], "bf16", GemmConfig(**json.loads(spec[0])),
                           mx_fold=mx_fold)
    if not drain and "WGMMA_DRAIN" in v.constexprs:
        import dataclasses
        v = dataclasses.replace(v, constexprs={**v.constexprs, "WGMMA_DRAIN": False})
    return I.compile_variant(v)


def main(argv=None) -> int:
    from dispatch.isa import main_loop_barriers, main_loop_instructions, ptx_wgmma_register_hazards, wgmma_register_hazards
    from kernels_triton import isa as I

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=("gemv", "gemm", "gemm8"))
    ap.add_argument("layout", help="gemv, gemm: WScale name (TENSOR, ROW, BLOCK128, MX32); gemm8: A8Scales name "
                    "(TENSOR_TENSOR, TOKEN_ROW, GROUP_BLOCK)")
    ap.add_argument("spec", nargs="+", help="gemv: A_MODE and GemvConfig fields; gemm, gemm8: GemmConfig as JSON")
    ap.add_argument("--arch", default="sm_90", help="sm_80, sm_89 or sm_90")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--show", action="store_true", help="also print the main loop's instructions")
    ap.add_argument("--no-mx-fold", action="store_true",
                    help="gemm MX32: the unfolded decode (scale codes > 134), not the folded one the launcher picks")
    ap.add_argument("--no-drain", action="store_true",
                    help="WGMMA_DRAIN off (gemm, gemv on sm_90): the register race the drain prevents, for the record")
    a = ap.parse_args(argv)
    ck = _compile(a.kind, a.layout, a.spec, a.arch, mx_fold=not a.no_mx_fold, drain=not a.no_drain)
    sass = I.sass_of(ck.asm["cubin"])
    info = I.ptxas_verbose(ck.asm["ptx"], a.arch)
    loop = main_loop_instructions(sass)
    ops = collections.Counter(t.split()[0] for t in loop)
    print(f"registers {info.registers or '?'}, spills {info.spill_bytes} bytes, wgmma serialized: "
          f"{info.serialized or 'no'}")
    print(f"wgmma register hazards: {len(ptx_wgmma_register_hazards(ck.asm['ptx']))} in the PTX, "
          f"{len(wgmma_register_hazards(sass))} in the SASS")
    print(f"main loop: {len(loop)} instructions, {main_loop_barriers(sass)} barriers")
    print("  " + " ".join(f"{k}={v}" for k, v in ops.most_common(a.top)))
    if a.show:
        print("\n".join(loop))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
