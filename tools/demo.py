"""The main job's demo: quantize real weight matrices in all four formats, report layout, bytes and error, then
run them through dispatch.linear (on the GPU when there is one, else on the CPU path) and say which
implementation the dispatcher chose and why.

    python -m tools.demo [--data DIR] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import torch

import dispatch
from dispatch.formats import describe_layout

FORMATS = ["fp8_block", "fp8_tensor", "fp8_row", "mxfp8"]
DEFAULT_DATA = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data" / "weights"


def _load(data: pathlib.Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for f in sorted(data.glob("*.safetensors")):
        for k, v in load_file(str(f)).items():
            out[k] = v
    return out


def _synthetic() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    w = torch.randn(1536, 576, generator=g) * 0.02
    w[torch.randint(0, 1536, (20,), generator=g), torch.randint(0, 576, (20,), generator=g)] = 0.5
    return {"synthetic.outliers (1536x576)": w}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=pathlib.Path, default=DEFAULT_DATA)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args(argv)

    if args.data.is_dir():
        mats = _load(args.data)
        print(f"real weight matrices from {args.data}: {len(mats)}")
    else:
        print(f"NOTE: real weight matrices not found at {args.data} (pass --data DIR); "
              "using one synthetic matrix with planted outliers instead")
        mats = _synthetic()

    dev = torch.device(args.device)
    print(f"device: {dev} | torch {torch.__version__}\n")
    print(f"{'matrix':44s} {'format':10s} {'act':4s} {'bytes saved':>11s} {'rel err W':>9s} "
          f"{'rel err y':>9s}  scale layout")
    have_linear = hasattr(dispatch, "linear")
    for name, w in mats.items():
        w = w.to(dev)
        x = torch.randn(4, w.shape[1], generator=torch.Generator().manual_seed(1)).to(dev, torch.bfloat16)
        y_full = x.float() @ w.float().T
        for fmt in FORMATS:
            qw = dispatch.quantize(w, fmt)
            saved = 1 - qw.nbytes / (w.numel() * 2)  # against the bf16 checkpoint
            err_w = float((dispatch.dequantize(qw) - w.float()).norm() / w.float().norm())
            y = dispatch.linear(x, qw) if have_linear else dispatch.reference.linear(x, qw)
            err_y = float((y.float() - y_full).norm() / y_full.norm())
            print(f"{name[:44]:44s} {fmt:10s} {qw.act.value:4s} {saved:>10.1%} {err_w:>9.4f} {err_y:>9.4f}  "
                  f"{describe_layout(qw)}")
    if have_linear:
        w = next(iter(mats.values())).to(dev)
        print(f"\nwhat dispatch.linear chose here ({dev}) and would choose on other GPUs, for "
              f"{next(iter(mats))} {tuple(w.shape)}:")
        targets = [("here", None)] + [(a, dispatch.Target.simulated_for(a)) for a in ("sm_90", "sm_89", "sm_80",
                                                                                      "gfx1201")]
        print(f"{'format':10s} {'M':>5s}  " + "  ".join(f"{name:26s}" for name, _ in targets))
        for fmt in FORMATS:
            qw = dispatch.quantize(w, fmt)
            for m in (1, 16, 4096):
                picks = [dispatch.explain((m, w.shape[1]), qw, target=t).candidate_id for _, t in targets]
                print(f"{fmt:10s} {m:>5d}  " + "  ".join(f"{p:26s}" for p in picks))
        qw = dispatch.quantize(w, "fp8_block")
        print("\none decision in full (fp8_block, M=16, simulated H200):")
        print(dispatch.explain((16, w.shape[1]), qw, target=dispatch.Target.simulated_for("sm_90")))
    else:
        print("\n(dispatch.linear is not available in this build; the rows above used dispatch.reference.linear)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
