"""Guarding the register operands of sm_90 wgmma in Triton kernels.

wgmma.mma_async reads its register A fragment (the decoded weight, in the W8A16 GEMM and the tensor-core GEMV)
after it issues, until a wgmma.wait_group retires it. Triton 3.6 decodes a whole K tile before the tile's k16
wgmmas and leaves the last three in flight across the loop's back edge (wait_group 3), so the next tile's decode
rewrites their A fragments: the race is in the PTX (the same virtual registers every iteration), and ptxas 13.4,
which has NVIDIA's fix for register re-use (triton-lang/triton PR 11781), keeps it (session 18). The tensor core
then multiplies whatever the registers hold: on the H200, non-finite outputs at 2 CTAs per SM, nondeterministically
(session 8). `wait_all` at the top of a K step retires every wgmma before anything of the step is loaded.
`dispatch.isa.ptx_wgmma_register_hazards` and `wgmma_register_hazards` check the PTX and the SASS of every config
(tests/test_wgmma_hazards.py; the ISA report's "wgmma hz" column).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def wait_all(token):
    """wgmma.wait_group 0: every wgmma issued so far has finished reading its registers. `token`: any scalar
    of the step (keeps the asm inside the loop body); the result is unused. NVIDIA sm_90 only."""
    tl.inline_asm_elementwise("wgmma.wait_group.sync.aligned 0;\n mov.b32 $0, $1;", "=r,r", [token],
                              dtype=tl.int32, is_pure=False, pack=1)
