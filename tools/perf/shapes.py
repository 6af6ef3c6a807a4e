"""Which [N, K] linear shapes a model runs, given directly or derived from a Hugging Face config.json.

Shapes are written N x K (out_features x in_features), as in shared/perf/h200_baseline.md ("N=4096 K=14336").
Tensor parallelism shards them as vLLM/SGLang do: column-parallel layers (qkv, gate_up, lm_head) split N,
row-parallel layers (o, down) split K. When there are fewer KV heads than ranks, each rank keeps one
replicated KV head (vLLM's rule), so qkv's N per rank is (heads/tp + 2 * max(kv_heads/tp, 1)) * head_dim.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any, Mapping

# The shapes measured in shared/perf/h200_baseline.md (Llama-3-8B, Llama-3-70B-ish, a 2560-hidden model).
BASELINE_SHAPES = ("6144x4096", "4096x4096", "28672x4096", "4096x14336", "128256x4096", "8192x8192",
                   "6656x2560", "8192x2560")
# Shapes in no shipped table: the bench compares the dispatcher's fallback choice with autotuning them.
UNTABLED_SHAPES = ("2112x7168", "7168x2304", "5120x25600", "3000x1000")
DEFAULT_M = (1, 4, 16, 64, 256, 1024, 4096)


class ShapeError(ValueError):
    """A shape list or model config the tools cannot use; the message says what to change."""


@dataclasses.dataclass(frozen=True)
class LinearShape:
    name: str
    n: int  # out_features
    k: int  # in_features

    def __str__(self) -> str:
        return f"{self.name} {self.n}x{self.k}" if self.name else f"{self.n}x{self.k}"


def parse_shapes(spec: str) -> list[LinearShape]:
    """"4096x4096,qkv=6144x4096" -> shapes; "baseline" / "untabled" name the lists above."""
    out: list[LinearShape] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        if part == "baseline":
            out += parse_shapes(",".join(BASELINE_SHAPES))
            continue
        if part == "untabled":
            out += parse_shapes(",".join(UNTABLED_SHAPES))
            continue
        name, _, dims = part.rpartition("=")
        try:
            n_s, k_s = dims.lower().split("x")
            n, k = int(n_s), int(k_s)
        except ValueError:
            raise ShapeError(f"bad shape {part!r}: write NxK (out_features x in_features), e.g. 4096x14336") from None
        if n <= 0 or k <= 0:
            raise ShapeError(f"bad shape {part!r}: N and K must be positive")
        out.append(LinearShape(name, n, k))
    return dedupe(out)


def parse_ints(spec: str, what: str = "M") -> list[int]:
    try:
        vals = [int(p) for p in spec.split(",") if p.strip()]
    except ValueError:
        raise ShapeError(f"bad {what} list {spec!r}: write comma-separated integers, e.g. 1,16,256") from None
    if not vals or any(v <= 0 for v in vals):
        raise ShapeError(f"bad {what} list {spec!r}: needs positive integers")
    return vals


def dedupe(shapes: list[LinearShape]) -> list[LinearShape]:
    """One entry per (N, K); names of identical shapes are joined ("o+down")."""
    by_nk: dict[tuple[int, int], LinearShape] = {}
    for s in shapes:
        prev = by_nk.get((s.n, s.k))
        if prev is None:
            by_nk[(s.n, s.k)] = s
        elif s.name and s.name not in prev.name.split("+"):
            by_nk[(s.n, s.k)] = LinearShape(f"{prev.name}+{s.name}" if prev.name else s.name, s.n, s.k)
    return list(by_nk.values())


def _get(cfg: Mapping[str, Any], *names: str, default: Any = None) -> Any:
    for n in names:
        if cfg.get(n) is not None:
            return cfg[n]
    if default is not None:
        return default
    raise ShapeError(f"model config has none of {list(names)}; pass --shapes instead")


def shapes_from_config(cfg: Mapping[str, Any], tp: int = 1) -> list[LinearShape]:
    """qkv, o, gate_up, down, lm_head of a decoder config (per rank under tensor parallelism `tp`)."""
    if "text_config" in cfg and "hidden_size" not in cfg:  # multimodal wrappers keep the LM inside
        cfg = cfg["text_config"]
    if tp < 1:
        raise ShapeError(f"--tp must be >= 1, got {tp}")
    hidden = int(_get(cfg, "hidden_size", "n_embd", "d_model"))
    inter = int(_get(cfg, "intermediate_size", "ffn_dim", "n_inner", default=4 * hidden))
    heads = int(_get(cfg, "num_attention_heads", "n_head"))
    kv = int(_get(cfg, "num_key_value_heads", "num_kv_heads", default=heads))
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    vocab = int(_get(cfg, "vocab_size"))

    def split(total: int, what: str) -> int:
        if total % tp:
            raise ShapeError(f"{what} = {total} is not divisible by --tp {tp}")
        return total // tp

    q_heads = split(heads, "num_attention_heads")
    if kv >= tp:
        kv_heads = split(kv, "num_key_value_heads")
    else:
        if tp % kv:
            raise ShapeError(f"--tp {tp} is not a multiple of num_key_value_heads {kv} (KV heads cannot be replicated)")
        kv_heads = 1  # replicated: each rank holds one KV head
    inter_r = split(inter, "intermediate_size")
    vocab_r = math.ceil(vocab / tp)  # engines pad the vocabulary to a multiple of tp
    return dedupe([
        LinearShape("qkv", (q_heads + 2 * kv_heads) * head_dim, hidden),
        LinearShape("o", hidden, q_heads * head_dim),
        LinearShape("gate_up", 2 * inter_r, hidden),
        LinearShape("down", hidden, inter_r),
        LinearShape("lm_head", vocab_r, hidden),
    ])


def shapes_from_config_file(path: "str | os.PathLike", tp: int = 1) -> list[LinearShape]:
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ShapeError(f"cannot read model config {path}: {e}") from None
    return shapes_from_config(cfg, tp)
