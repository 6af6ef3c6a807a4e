"""The tensors of one benchmark problem: a weight with varied scales, its rotation copies, activations, references.

Data: weights 0.02 * N(0, 1) and activations N(0, 1), as in the baseline, but multiplied by per-row and
per-32-column-group factors spread over 2^-3..2^3. Plain randn quantizes to nearly uniform scales, which hides
scale-indexing bugs (a kernel reading the wrong block's scale would still pass); varied scales make
verification catch them. Generation is seeded per shape, so reruns measure identical data.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import torch

from dispatch.formats import Act, Format, QWeight

from .timing import RotationPolicy


def _factors(n: int, gen: torch.Generator, device: Any) -> torch.Tensor:
    return torch.exp2(torch.empty(n, device=device).uniform_(-3.0, 3.0, generator=gen))


def _generator(device: Any, seed: int) -> torch.Generator:
    g = torch.Generator(device=torch.device(device))
    g.manual_seed(seed)
    return g


def make_weight(n: int, k: int, device: Any, *, seed: int = 0, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    gen = _generator(device, 1_000_003 * n + k + seed)
    w = torch.randn(n, k, device=device, generator=gen).mul_(0.02)
    w.mul_(_factors(n, gen, device)[:, None])
    col = _factors(math.ceil(k / 32), gen, device).repeat_interleave(32)[:k]
    w.mul_(col[None, :])
    return w.to(dtype)


def make_activation(m: int, k: int, device: Any, *, seed: int = 1, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    gen = _generator(device, 7919 * m + k + seed)
    x = torch.randn(m, k, device=device, generator=gen)
    x.mul_(_factors(m, gen, device)[:, None])
    col = _factors(math.ceil(k / 32), gen, device).repeat_interleave(32)[:k]
    x.mul_(col[None, :])
    return x.to(dtype)


def clone_qweight(qw: QWeight) -> QWeight:
    return QWeight(qw.format, qw.act, qw.qdata.clone(), qw.scale.clone())


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref||_F / ||ref||_F in float64 (inf when out has non-finite values where ref has none)."""
    d = out.double() - ref.double()
    den = float(ref.double().norm())
    num = float(d.norm())
    return num / den if den > 0 else num


@dataclasses.dataclass
class WeightSet:
    """One (format, act, N, K): the quantized weight, its rotation copies and per-candidate prepared state."""

    fmt: Format
    act: Act
    n: int
    k: int
    copies: list[QWeight]
    _prepared: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def qw(self) -> QWeight:
        return self.copies[0]

    @property
    def ncopies(self) -> int:
        return len(self.copies)

    def prepared(self, cid: str, prepare: Callable[[QWeight], Any]) -> list[Any]:
        """`prepare` of every copy, once per candidate; a raised error is cached and re-raised."""
        got = self._prepared.get(cid)
        if got is None:
            try:
                got = [prepare(q) for q in self.copies]
            except Exception as e:  # remembered so every M bucket reports it without retrying
                got = e
            self._prepared[cid] = got
        if isinstance(got, Exception):
            raise got
        return got


def build_weight_set(w: torch.Tensor, fmt: Format, act: Act, *, l2_bytes: int, rotation: RotationPolicy,
                     quantize: Callable[..., QWeight], decode_tiles: bool = False) -> WeightSet:
    """`w` quantized, in enough copies that one rotation reads > rotation's multiple of the L2; with `decode_tiles`
    every copy gets its tiles (dispatch.add_decode_tiles; K % 16 == 0 only), which the GEMVs then read instead of the
    codes: the same bytes per call, so the same number of copies."""
    qw = quantize(w, fmt, act=act.value)
    ncopies = rotation.copies(qw.nbytes, l2_bytes)
    copies = [qw] + [clone_qweight(qw) for _ in range(ncopies - 1)]
    if decode_tiles and w.shape[1] % 16 == 0:
        from dispatch import add_decode_tiles

        for c in copies:
            add_decode_tiles(c)
    n, k = qw.shape
    return WeightSet(fmt, act, n, k, copies)


def bf16_copies(w: torch.Tensor, *, l2_bytes: int, rotation: RotationPolicy) -> list[torch.Tensor]:
    ncopies = rotation.copies(w.numel() * w.element_size(), l2_bytes)
    return [w] + [w.clone() for _ in range(ncopies - 1)]
