"""Rows of the ahead-of-time ISA report (`tools/isa_report`): one per (kernel variant, target).

Each backend provides `isa_rows()` in its `isa` module; the tool prints them as one matrix and fails CI
when a (kernel, target) that the backend's support predicates declare supported did not compile.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class IsaRow:
    backend: str  # "triton" | "cuda" | "hip"
    kernel: str  # e.g. "w8a16_splitk[rowscale]"
    target: str  # "sm_80" | "sm_89" | "sm_90" | "gfx1201" | "gfx942"
    supported: bool  # what the backend's support predicate declares for this target
    compiled: bool
    error: str = ""  # first lines of the compiler error when not compiled
    mma: str = ""  # matrix instruction family seen: "mma.sync fp8", "wgmma bf16", "v_wmma fp8", "none"
    fp8_cvt: str = ""  # "hw" | "sw" | "none"
    widest_load_bits: int = 0
    spills: int = 0  # bytes of local/scratch spill (0 is the goal)
    note: str = ""

    @property
    def failed_supported(self) -> bool:
        return self.supported and not self.compiled
