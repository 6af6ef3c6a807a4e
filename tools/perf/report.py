"""Output helpers: markdown tables, JSON files written atomically, an optional PNG plot."""

from __future__ import annotations

import json
import math
import os
import pathlib
import tempfile
from typing import Any, Sequence


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            if math.isnan(v):
                return "nan"
            return f"{v:.3g}" if abs(v) < 10 else f"{v:.1f}"
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def write_atomic(path: "str | os.PathLike", text: str) -> pathlib.Path:
    p = pathlib.Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=p.name + ".", suffix=".tmp", dir=str(p.parent))
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, p)
    return p


def write_json(path: "str | os.PathLike", data: Any) -> pathlib.Path:
    return write_atomic(path, json.dumps(data, indent=1, sort_keys=False, default=str) + "\n")


def fmt_us(v: float | None) -> str:
    return "-" if v is None else (f"{v:.2f}" if v < 100 else f"{v:.1f}")


def plot_speedups(path: "str | os.PathLike", series: dict[str, list[tuple[str, float]]], title: str) -> str | None:
    """Bar groups of speedup over bf16 per problem label; returns None when written, else why not."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # matplotlib is optional
        return f"no plot: matplotlib not importable ({type(e).__name__})"
    labels: list[str] = []
    for pts in series.values():
        for lab, _ in pts:
            if lab not in labels:
                labels.append(lab)
    if not labels:
        return "no plot: nothing to plot"
    width = 0.8 / max(len(series), 1)
    fig, ax = plt.subplots(figsize=(max(8.0, 0.35 * len(labels) * max(len(series), 1) ** 0.5), 5))
    for j, (name, pts) in enumerate(series.items()):
        d = dict(pts)
        xs = [i + j * width for i, lab in enumerate(labels) if lab in d]
        ys = [d[lab] for lab in labels if lab in d]
        ax.bar(xs, ys, width, label=name)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(labels))])
    ax.set_xticklabels(labels, rotation=90, fontsize=6)
    ax.set_ylabel("speedup over bf16 F.linear (graph replay)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None
