"""The L2 prefetch-size hint on the CUDA decode GEMVs' row-major weight loads: shipped (128 B) against none and others.

The row-major GEMVs read each 128-wide K step of a row as two 64-byte halves from two load instructions (eight rows
per instruction, csrc/skinny_common.cuh); the decode tiles (a copy of the codes) read 512 contiguous bytes per
instruction and were 0.79-0.99x the time (session 22). PTX's `.L2::64B/128B/256B` qualifier asks L2 to fetch that
many bytes around each miss (SASS `LDG.E.NA.LTC128B.128.CONSTANT`), so a row's whole line comes at its first miss.
csrc/portability.cuh's `fp8d_load128_rows` carries it, 128 B unless FP8D_WEIGHT_L2_PREFETCH (0 = no hint, 64, 128,
256) says otherwise; the tiles' loads (fp8d_load128) never carry it.

Per cell (format/act x shape x M), at the shipped table's config for cuda.w8a16_gemv / cuda.w8a8_gemv where it holds
the key (else the default), this times, in alternating order:
  base      : the shipped launcher (W8A8: the CUDA activation quantizer, then the GEMV)
  l2_<B>    : the same launcher, its modules compiled with FP8D_WEIGHT_L2_PREFETCH=B (B in --hints; 0: no hint,
              the load before session 24)
  FP8D_X=V  : the launcher, its modules compiled with that define (--define, repeatable). Session 25 timed
              FP8D_FULL_ROWS=1 (row-major loads without bounds predicates in CTAs whose rows and steps are all in
              range: 0.995x median, 0.948-1.134, 120 cells) and then removed it from csrc/skinny_common.cuh
  tiled     : the launcher on the weight's decode tiles (the opt-in layout; not for configs with a shared-memory ring;
              --tiled-defines: also each --define variant on them)
and checks that every variant gives the base's bits. The bench's timing: graph replay over weight copies rotating
through > 3.3x L2, median. A JSON line per cell; a table last. Session 24 ran it before the hint shipped (then base
was the plain load and the variants l2_256, l2_128, tiled, tiled_l2_256; docs/perf/h200_s24_2026-11-30.md).

    python -m tools.perf.probe_l2_hint [--shapes 4096x14336,...] [--m 1,16] [--formats fp8_row,fp8_block:fp8]
        [--hints 0,256] [--define FP8D_NAME=V] [--tiled-defines] [--out probe.jsonl]
"""

from __future__ import annotations

import contextlib

from tools.perf.probe_harness import Probe, parser


@contextlib.contextmanager
def _with_defines(defines: dict[str, int] | None):
    """The CUDA launchers build their modules with these extra defines inside this block (None: as shipped). The
    launch-spec cache is emptied on the way in and out, so each side loads its own modules."""
    from kernels_cuda import _launch

    if not defines:
        yield
        return
    shipped = _launch._extra_defines

    def extended(emulate_mma: bool, force_sw_cvt: bool) -> dict:
        return {**shipped(emulate_mma, force_sw_cvt), **defines}

    _launch._gemv_spec.cache_clear()
    _launch._extra_defines = extended
    try:
        yield
    finally:
        _launch._extra_defines = shipped
        _launch._gemv_spec.cache_clear()


def _define(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not name.startswith("FP8D_") or not value.lstrip("-").isdigit():
        raise SystemExit(f"--define takes FP8D_NAME=INTEGER, got {text!r}")
    return name, int(value)


def main(argv: list[str] | None = None) -> None:
    import torch

    ap = parser(__doc__, m="1,16", formats="fp8_row,mxfp8,fp8_block:fp8,fp8_tensor:fp8")
    ap.add_argument("--hints", default="0,256", help="L2 prefetch sizes in bytes (0 = no hint, 64, 128, 256; '' none)")
    ap.add_argument("--define", action="append", default=[], metavar="FP8D_NAME=V",
                    help="one more variant: the modules compiled with this define (repeatable; e.g. FP8D_WEIGHT_L2_PREFETCH=64)")
    ap.add_argument("--tiled-defines", action="store_true",
                    help="also time each --define variant on the decode tiles (configs without a shared-memory ring)")
    a = ap.parse_args(argv)
    hints = [int(v) for v in a.hints.split(",") if v]
    if any(h not in (0, 64, 128, 256) for h in hints):
        raise SystemExit(f"--hints takes 0, 64, 128 or 256, got {a.hints}")
    extra = {f"l2_{h}": {"FP8D_WEIGHT_L2_PREFETCH": h} for h in hints}
    extra.update({d: dict([_define(d)]) for d in a.define})
    probe = Probe(a, eager_iters=3)
    for c in probe.cells("bf16"):
        q, x = c.ws.copies, c.x
        tiles, launcher, cfg = probe.gemv_cell(c)

        def variant(defines, tiled, q=q, x=x, f=launcher, cfg=cfg, tw=tiles):
            def run(i):
                with _with_defines(defines):
                    return f(x, q[i], None, None, cfg, tiles=tw[i] if tiled else None)
            return run

        variants = {"base": variant(None, False), **{n: variant(d, False) for n, d in extra.items()}}
        if not cfg.smem_ring:  # the GEMV on decode tiles keeps its ring in registers (a ring in shared memory: no)
            variants["tiled"] = variant(None, True)
            if a.tiled_defines:
                variants.update({f"tiled {d}": variant(dict([_define(d)]), True) for d in a.define})
        ref = variants["base"](0)
        row = {"fmt": c.fmt.value, "act": c.act.value, "n": c.n, "k": c.k, "m": c.m, "config": cfg.to_dict(),
               "same_bits": all(bool(torch.equal(ref, v(0))) for v in variants.values()),
               "us": probe.time_variants(variants, c.ws.ncopies)}
        row["us"]["bf16"] = probe.bf16_us(c)
        row["bytes"] = q[0].nbytes
        probe.emit(row)
    names = sorted({k for r in probe.rows for k in r["us"] if k not in ("base", "bf16")})
    print("\n| format/act | shape | M | config | same bits | base us | "
          + " | ".join(f"{n} / base" for n in names) + " | bf16 / base |")
    print("|---" * (6 + len(names)) + "|---|")
    for r in probe.rows:
        u, c = r["us"], r["config"]
        print(f"| {r['fmt']}/{r['act']} | {r['n']}x{r['k']} | {r['m']} | {c['warps']}w/{c['mtiles']}t/u{c['unroll']} | "
              f"{r['same_bits']} | {u['base']:.2f} | "
              + " | ".join(f"{u[n] / u['base']:.3f}" if n in u else "-" for n in names)
              + f" | {u['bf16'] / u['base']:.2f} |")
    for n in names:
        ratios = sorted(r["us"][n] / r["us"]["base"] for r in probe.rows if n in r["us"])
        if ratios:
            print(f"{n}: median {ratios[len(ratios) // 2]:.3f}, range {ratios[0]:.3f}-{ratios[-1]:.3f}, "
                  f"faster in {sum(v < 0.99 for v in ratios)} of {len(ratios)} (< 0.99x)")


if __name__ == "__main__":
    main()
