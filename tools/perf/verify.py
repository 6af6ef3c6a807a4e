"""Is a candidate's output the format's linear? Checked against dispatch.reference before anything is timed.

The reference is computed with out_dtype=float32 (float64 accumulation on GPUs), so the measured error is
the candidate's own: for a correct kernel, fp32 accumulation order plus the final bf16 rounding (~1e-3).
Three checks, each catching what the others miss:
- shape, dtype and device of the output;
- no non-finite value where the reference is finite;
- relative Frobenius error <= rel_fro, and every element within atol_rms * rms(ref) + rtol * |ref|.
  The elementwise bound catches one wrong row or block (e.g. a masked tail set to zero) that barely moves
  the Frobenius norm of a large output.
"""

from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass(frozen=True)
class Tolerance:
    rel_fro: float = 1e-2
    rtol: float = 2e-2
    atol_rms: float = 2e-2


@dataclasses.dataclass(frozen=True)
class Verdict:
    ok: bool
    rel_err: float | None
    reason: str = ""


def check_output(out: object, ref: torch.Tensor, out_dtype: torch.dtype, tol: Tolerance = Tolerance()) -> Verdict:
    if not isinstance(out, torch.Tensor):
        return Verdict(False, None, f"returned {type(out).__name__}, not a tensor")
    if tuple(out.shape) != tuple(ref.shape):
        return Verdict(False, None, f"output shape {tuple(out.shape)} != expected {tuple(ref.shape)}")
    if out.dtype != out_dtype:
        return Verdict(False, None, f"output dtype {out.dtype} != requested {out_dtype}")
    if out.device != ref.device:
        return Verdict(False, None, f"output on {out.device}, expected {ref.device}")
    o, r = out.double(), ref.double()
    fin_r = torch.isfinite(r)
    bad = fin_r & ~torch.isfinite(o)
    if bool(bad.any()):
        idx = bad.nonzero()[0].tolist()
        return Verdict(False, None, f"{int(bad.sum())} non-finite outputs where the reference is finite "
                                    f"(first at {idx})")
    d = torch.where(fin_r, o - r, torch.zeros_like(r))
    rf = torch.where(fin_r, r, torch.zeros_like(r))
    den = float(rf.norm())
    rel = float(d.norm()) / den if den > 0 else float(d.norm())
    if not rel <= tol.rel_fro:
        return Verdict(False, rel, f"relative error {rel:.3e} > {tol.rel_fro:.1e}")
    rms = den / max(rf.numel(), 1) ** 0.5
    excess = d.abs() - (tol.atol_rms * rms + tol.rtol * rf.abs())
    if bool((excess > 0).any()):
        i = int(torch.argmax(excess).item())
        where = list(torch.unravel_index(torch.tensor(i), tuple(d.shape)))
        return Verdict(False, rel, f"{int((excess > 0).sum())} elements outside {tol.atol_rms:g}*rms+{tol.rtol:g}*|ref| "
                                   f"(worst at {[int(v) for v in where]}: got {float(o.flatten()[i]):.4g}, "
                                   f"ref {float(r.flatten()[i]):.4g})")
    return Verdict(True, rel)
