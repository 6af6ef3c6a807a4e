"""What a backend is asked to run (`Problem`), whether it can (`Support`), and how it says so (`Candidate`).

Backends declare candidates as data: an id, the (format, act) pairs served, a support predicate that
answers yes or no-with-reason for a (problem, target), a config space and a runner. The dispatcher
never branches on backend names; it asks candidates.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, ClassVar, Sequence

import torch

from .decode_tiles import has_decode_tiles
from .formats import Act, Format, QWeight
from .target import Target

M_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


def m_bucket(m: int) -> int:
    """Smallest bucket >= m (the last bucket for anything larger). Plans and tables are keyed by it."""
    for b in M_BUCKETS:
        if m <= b:
            return b
    return M_BUCKETS[-1]


@dataclasses.dataclass(frozen=True)
class Problem:
    """One linear call's static description: enough to choose a kernel, no tensor values."""

    fmt: Format
    act: Act
    m: int
    n: int
    k: int
    x_dtype: torch.dtype = torch.bfloat16
    out_dtype: torch.dtype = torch.bfloat16
    has_bias: bool = False
    # The weight carries decode tiles (dispatch.add_decode_tiles): the tables tuned on such weights apply, and the
    # candidates that read the tiles may run (dispatch.select).
    decode_tiles: bool = False

    @property
    def bucket(self) -> int:
        return m_bucket(self.m)

    @property
    def weight_bytes(self) -> int:
        """Bytes of fp8 codes plus scales: the decode roofline's numerator."""
        n, k = self.n, self.k
        scale = {Format.FP8_BLOCK: 4 * -(-n // 128) * -(-k // 128), Format.FP8_TENSOR: 4,
                 Format.FP8_ROW: 4 * n, Format.MXFP8: n * -(-k // 32)}[self.fmt]
        return n * k + scale

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    @classmethod
    def of(cls, x_shape: Sequence[int], qw: QWeight, *, x_dtype: torch.dtype = torch.bfloat16,
           out_dtype: torch.dtype | None = None, has_bias: bool = False) -> "Problem":
        m = 1
        for d in x_shape[:-1]:
            m *= int(d)
        n, k = qw.shape
        return cls(qw.format, qw.act, m, n, k, x_dtype, out_dtype or x_dtype, has_bias, has_decode_tiles(qw))


@dataclasses.dataclass(frozen=True)
class Support:
    """Yes, or no with a reason. A 'no' without a reason is itself an error."""

    ok: bool
    reason: str = ""

    def __post_init__(self) -> None:
        if not self.ok and not self.reason:
            raise AssertionError("Support.no needs a reason")

    @classmethod
    def yes(cls, reason: str = "") -> "Support":
        return cls(True, reason)

    @classmethod
    def no(cls, reason: str) -> "Support":
        return cls(False, reason)

    def __bool__(self) -> bool:
        return self.ok


@dataclasses.dataclass(frozen=True)
class KernelConfig:
    """Base of every backend's typed tuning config. Subclasses are frozen dataclasses of ints/bools."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "KernelConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"{cls.__name__}: unknown config keys {sorted(unknown)}; known: {sorted(names)}")
        return cls(**d)


@dataclasses.dataclass(frozen=True)
class NoConfig(KernelConfig):
    """For candidates with nothing to tune (library calls)."""


class Candidate(abc.ABC):
    """One implementation of a linear for some (format, act) pairs.

    `id` is stable (it appears in tuned tables): "<backend>.<kernel>", e.g. "triton.w8a16_splitk".
    `source_files` lists files whose content hash keys tuned entries (stale detection).
    """

    id: ClassVar[str]
    backend: ClassVar[str]
    serves: ClassVar[frozenset[tuple[Format, Act]]]
    config_type: ClassVar[type[KernelConfig]] = NoConfig
    source_files: ClassVar[tuple[str, ...]] = ()
    # Whether a config tuned for the nearest tabled shape beats default_config() on an untabled shape. False
    # for a candidate whose default is a rule of the shape itself (fitted to measurements), where a config
    # tuned for another N or K is worse (select._config_for).
    borrows_configs: ClassVar[bool] = True
    # Whether the fallback chain may lend this candidate's tuned entries to untabled shapes nearby (select's nearest
    # step). False for a kernel whose wins are narrow in shape: its entry at one key says nothing of the next.
    lent_to_nearby_shapes: ClassVar[bool] = True
    # The id of this kernel's variant that reads a weight's decode tiles (dispatch.add_decode_tiles), if it has one. On a
    # weight with tiles and no entry tuned on tiles, dispatch.select hands a pick of this candidate to that variant, at
    # the same config, where the variant's `tiles_help(config, problem)` says so.
    decode_tiles_variant: ClassVar[str | None] = None
    # Whether this candidate reads the weight's decode tiles (and so supports only problems with decode_tiles).
    reads_decode_tiles: ClassVar[bool] = False

    def available(self) -> Support:
        """Whether the backend can run in this process at all (toolkit importable, etc.)."""
        return Support.yes()

    @abc.abstractmethod
    def supports(self, problem: Problem, target: Target) -> Support:
        """Pure: may this candidate run `problem` on `target`? No device access."""

    def configs(self, problem: Problem, target: Target) -> Sequence[KernelConfig]:
        """The config space autotune searches (first entry is the default)."""
        return [self.default_config(problem, target)]

    def default_config(self, problem: Problem, target: Target) -> KernelConfig:
        return self.config_type()

    def prepare(self, qw: QWeight) -> Any:
        """Load-time work on the weight (layout changes, views); cached by the dispatcher per weight."""
        return None

    def tiles_help(self, config: KernelConfig, problem: Problem) -> bool:
        """For a candidate that reads decode tiles: whether it beats the row-major kernel it is the variant of at this
        config (the fallback chain's hand-over; a table tuned on tiles needs no such rule)."""
        return True

    def lending_refused(self, tuned_at: Problem, problem: Problem, target: Target) -> str | None:
        """Why an entry of this candidate tuned at `tuned_at` says nothing of `problem` (a nearby shape in no table),
        or None: the fallback chain then does not lend it (dispatch.select's nearest step). For a kernel whose cost
        grows with the shape in a way its tuned time did not see."""
        return None

    def grid_fill(self, problem: Problem, config: KernelConfig, target: Target) -> float | None:
        """For a kernel launched as one program per output tile (and K split): the fraction of the SM slots of its
        last wave that `config` fills on `problem` (programs / (waves x SMs), one program per SM), or None where
        the candidate does not model it. The dispatcher does not lend a tuned entry to a shape where this falls
        far below its value at the tuned shape (dispatch.select.NEAREST_MIN_FILL_RATIO)."""
        return None

    @abc.abstractmethod
    def run(self, x2d: torch.Tensor, qw: QWeight, prepared: Any, bias: torch.Tensor | None,
            out_dtype: torch.dtype, config: KernelConfig) -> torch.Tensor:
        """y[M, N] = linear(x2d[M, K], qw) with the format's semantics. x2d is contiguous, M >= 1.
        Must not synchronize the host or branch on tensor values (CUDA-graph safe)."""
