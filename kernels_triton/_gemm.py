"""Kernel bodies of the Triton prefill (tensor-core) GEMMs. Private: only `_gemm_launch` calls them.

Two families, each parameterized by its scale layout (a constexpr), never one copy per format:

  _w8a16_gemm_kernel  y = x @ (q * s_w)^T : bf16/fp16 x, e4m3 weight codes decoded in registers, fp32 acc
  _w8a8_gemm_kernel   y = (qx * s_x) @ (q * s_w)^T : e4m3 x e4m3 tensor-core dots, fp32 acc

Shared structure:
  - The weight is [N, K] row-major (K contiguous), i.e. already the B^T layout an MMA wants: the kernels
    load [BLOCK_N, BLOCK_K] tiles and `tl.trans` them; no transposed copy of the weight exists anywhere.
    For fp8 wgmma (sm_90) this K-major B is the only layout the instruction accepts.
  - Grouped program order (GROUP_M tiles along M walk the same weight columns) so weight tiles are
    reused from L2 instead of re-read from HBM.
  - M, N, K are runtime arguments (Triton only specializes them on divisibility by 16, which picks
    vector widths; it never recompiles per length). Edge tiles along M and N wrap their row indices
    (`% M`, `% N`) so loads need no mask there; the store is masked. The K tail is masked with zeros.
  - `num_stages` software pipelining comes from the plain pointer-increment loop (cp.async on sm_80+,
    async copies + wgmma on sm_90).
  - Split-K (SPLIT, a constexpr; the split count SPLIT_K is a runtime argument): at M = 64-256 the M x N
    tiles alone are too few to fill the SMs (4096 x 4096 at M = 64 is 32-64 tiles for 132 SMs), so grid
    axis 1 splits the K tiles into SPLIT_K contiguous ranges. Each program stores its fp32 partial tile
    (weight tensor / row scales already applied: they are linear) to a workspace [SPLIT_K, M, N], and
    `_splitk_reduce.splitk_reduce` sums the partials in split order, adds the bias and casts: deterministic,
    no atomics.
  - HW_FP8 (a constexpr): codes travel as fp8e4nv and convert in hardware (sm_89+, gfx12). Without it
    (sm_80: Triton rejects fp8e4nv even as a pointer type) they travel as uint8 and are decoded exactly
    in software (kernels_triton._fp8); W8A8 then multiplies the exactly decoded bf16 values with bf16
    MMA: the same products as fp8 MMA, the same semantics.
  - FAST_BF16 (W8A16, a constexpr; NVIDIA with bf16 activations): the weight tile for wgmma's register operand
    is decoded with _fp8.e4m3_to_bf16_spread (prmt, shift, AND, one bf16x2 multiply per pair) instead of
    Triton's conversion (F2FP plus one F2F.BF16.F16 per element, as many cycles as the K step's wgmma);
    exact either way. FP8DISPATCH_TRITON_FAST_BF16=0 turns it off (session 8: 1.098x geomean on the H200).
  - WGMMA_DRAIN (W8A16, a constexpr; wgmma targets): `_wgmma.wait_all` at the top of each K step. Without it the
    next step's decode rewrites the registers of wgmmas still in flight, already in Triton 3.6's PTX (so with any
    ptxas; module _wgmma), which gave non-finite outputs on the H200; dispatch.isa.ptx_wgmma_register_hazards and
    wgmma_register_hazards find such writes in the PTX and the SASS.
  - PDL (a constexpr; CUDA sm_90+): programmatic dependent launch (kernels_triton._pdl): the kernel is scheduled
    while the previous one (its activation quantizer, the previous layer) finishes and waits for it before
    touching memory; the split-K reduction does the same.
  - DOT_F32 (a constexpr) is the CPU-interpreter path ONLY: operands are widened to fp32 and multiplied
    with input_precision="ieee", because the interpreter multiplies the raw bits of bf16 dots. It is
    exact for these operands, but it is NOT what runs on a GPU and tests that use it are not GPU
    validation.

Scale application (where each layout's scale enters, and why that is exact or fp32-rounding-close):
  W8A16 TENSOR/ROW   epilogue: acc * s (per column for ROW).
  W8A16 BLOCK128     each K tile's partial product (BLOCK_K divides 128, so one tile never straddles two
                     128-groups) is multiplied by the [BLOCK_N] vector s[n // 128, k0 // 128].
  W8A16 MX32 + bf16  MX_PRESCALE: the decoded weight is multiplied by 2^e before the dot. code * 2^e has
                     the 4 significant bits of the code, so it is exact in bf16 (same 8-bit exponent as
                     fp32) unless the product falls below bf16's range: |w| < 2^-133 flushes to zero,
                     and values in bf16's subnormal range (< 2^-126) keep fewer bits. Real MX weights
                     (e >= -127 with codes >= 2^-9) reach that only for groups whose amax < ~2^-118.
                     MX_FOLD (the fast bf16 decode, every scale code of the weight <= 134, known at
                     load time): 2^e rides on the decode's one FMA (the same bits, one bf16x2 FMA per pair
                     fewer); a weight with a larger code runs the second FMA.
  W8A16 MX32 + fp16  w * 2^e would overflow/underflow fp16, so 2^e multiplies 32-deep partial products
                     (BLOCK_K == 32) instead: exact codes, one fp32 multiply per 32 along K.
  W8A8 TENSOR_TENSOR epilogue: acc * s_x * s_w.
  W8A8 TOKEN_ROW     epilogue: acc * s_x[m] * s_w[n].
  W8A8 GROUP_BLOCK   DeepSeek-V3: acc += dot(qx_g, q_g) * s_x[m, g] * s_w[n // 128, g] per K tile.
fp32 accumulation of fp8 products: on sm_90 fp8 wgmma accumulates in reduced precision and Triton's
default never promotes (cuBLAS fast-accum numerics: measured wrong on the H200 at K = 14336, M = 16,
and at M = 4096). TENSOR_TENSOR / TOKEN_ROW therefore pass max_num_imprecise_acc = BLOCK_K (promotion
into the fp32 accumulator once per K tile, the interval DeepSeek-V3 uses); GROUP_BLOCK promotes per K
tile by construction (a fresh partial product per tile).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._fp8 import (e4m3_to_bf16_mx_folded, e4m3_to_bf16_scaled, e4m3_to_bf16_spread, e4m3_to_f32, e8m0_to_bf16,
                   e8m0_to_bf16_fold_mul, e8m0_to_f32)
from ._pdl import enter
from ._wgmma import wait_all

# Mirrors of kernels_triton._gemm_layouts (Triton constexpr globals; the enums there are the source).
_W_TENSOR: tl.constexpr = tl.constexpr(0)
_W_ROW: tl.constexpr = tl.constexpr(1)
_W_BLOCK128: tl.constexpr = tl.constexpr(2)
_W_MX32: tl.constexpr = tl.constexpr(3)
_A8_TENSOR_TENSOR: tl.constexpr = tl.constexpr(0)
_A8_TOKEN_ROW: tl.constexpr = tl.constexpr(1)
_A8_GROUP_BLOCK: tl.constexpr = tl.constexpr(2)
_BLOCK: tl.constexpr = tl.constexpr(128)  # fp8_block weight block and activation group
_MX: tl.constexpr = tl.constexpr(32)  # mxfp8 group along K


@triton.jit
def _tile_ids(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Grouped ordering: GROUP_M consecutive programs share one weight column tile (L2 reuse)."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def _tile_rows(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """This program's tile: its ids, output rows / columns (offs_m, offs_n), K offsets within a K tile, and
    the rows it reads (rows_m, rows_n): edge tiles re-read valid rows instead of masking (results of
    wrapped rows are never stored)."""
    pid_m, pid_n = _tile_ids(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    rows_m = offs_m % M
    rows_n = offs_n % N
    return pid_m, pid_n, offs_m, offs_n, offs_k, rows_m, rows_n


@triton.jit
def _k_tile_range(K, BLOCK_K: tl.constexpr, SPLIT_K, SPLIT: tl.constexpr):
    """(lo, n): this program reduces K tiles lo .. lo + n - 1 (all of them without split-K; else the contiguous
    range of split program_id(1)). n >= 1, and visibly so to LLVM: a loop that may run zero times gets a bypass
    path that sets the accumulators to zero, and ptxas then serializes every wgmma of the kernel (C7515,
    "non wgmma instructions defining accumulator registers"). So every program runs at least one tile: the
    launcher never makes an empty split (GemmConfig.split_for), and K >= 1."""
    k_tiles = tl.cdiv(K, BLOCK_K)
    if SPLIT:
        per_split = tl.cdiv(k_tiles, SPLIT_K)
        lo = tl.program_id(1) * per_split
        n = tl.maximum(tl.minimum(per_split, k_tiles - lo), 1)
    else:
        lo = 0
        n = tl.maximum(k_tiles, 1)
    return lo, n


@triton.jit
def _k_tile_sources(x_ptr, w_ptr, rows_m, rows_n, offs_k, stride_xm, stride_wn, USE_TMA: tl.constexpr):
    """What _load_k_tile reads: the TMA descriptors themselves, or the [BLOCK_M, BLOCK_K] / [BLOCK_N,
    BLOCK_K] pointer tiles of the first K tile (the kernel advances them by BLOCK_K per K tile)."""
    if USE_TMA:
        x_src = x_ptr
        w_src = w_ptr
    else:
        x_src = x_ptr + rows_m.to(tl.int64)[:, None] * stride_xm + offs_k[None, :]
        w_src = w_ptr + rows_n.to(tl.int64)[:, None] * stride_wn + offs_k[None, :]
    return x_src, w_src


@triton.jit
def _load_k_tile(x_src, w_src, row_m0, row_n0, k0, offs_k, K, USE_TMA: tl.constexpr):
    """The x and weight-code tiles at K offset k0: TMA loads from the descriptors x_src / w_src (the
    hardware zero-fills out-of-bounds rows and the K tail), or masked loads from the pointer tiles
    x_src / w_src (already advanced to k0; the K tail reads zeros)."""
    if USE_TMA:
        x = x_src.load([row_m0, k0])
        w = w_src.load([row_n0, k0])
    else:
        kmask = offs_k[None, :] < K - k0
        x = tl.load(x_src, mask=kmask, other=0.0)
        w = tl.load(w_src, mask=kmask, other=0.0)
    return x, w


@triton.jit
def _decode_codes(codes, HW_FP8: tl.constexpr, DTYPE: tl.constexpr, FAST_BF16: tl.constexpr = False):
    """e4m3 codes (fp8e4nv if HW_FP8, else uint8) -> exact values in DTYPE (bf16/fp16/fp32 hold every
    e4m3 value exactly). FAST_BF16 (bf16 DTYPE on NVIDIA): _fp8.e4m3_to_bf16_spread instead of Triton's
    conversion, whose per-element F2F.BF16.F16 holds the W8A16 GEMM at the F2F unit's rate."""
    if FAST_BF16:
        v = e4m3_to_bf16_spread(codes.to(tl.uint8, bitcast=True))
    elif HW_FP8:
        v = codes.to(DTYPE)
    else:
        v = e4m3_to_f32(codes).to(DTYPE)
    return v


@triton.jit
def _mma(a, w, acc, SWAP_AB: tl.constexpr, DOT_F32: tl.constexpr, PROMOTE_K: tl.constexpr = None):
    """acc + a @ w^T ([BM, BN]), or acc + w @ a^T ([BN, BM]) with SWAP_AB. a: [BM, BK], w: [BN, BK].

    PROMOTE_K (fp8 x fp8 only): at most this many products are summed in the tensor core's reduced-
    precision accumulator before being added to the fp32 `acc` (Triton's max_num_imprecise_acc; its sm_90
    default is 2**30, i.e. never, which is cuBLAS fast-accum numerics and measurably wrong at large K)."""
    if DOT_F32:  # CPU interpreter only (see module docstring)
        a = a.to(tl.float32)
        w = w.to(tl.float32)
        if SWAP_AB:
            r = tl.dot(w, tl.trans(a), acc, input_precision="ieee")
        else:
            r = tl.dot(a, tl.trans(w), acc, input_precision="ieee")
    elif PROMOTE_K is not None:
        r = tl.dot(a, tl.trans(w), acc, max_num_imprecise_acc=PROMOTE_K)
    else:
        if SWAP_AB:
            r = tl.dot(w, tl.trans(a), acc)
        else:
            r = tl.dot(a, tl.trans(w), acc)
    return r


@triton.jit
def _per_n(v, SWAP_AB: tl.constexpr):
    """Broadcast a [BLOCK_N] vector over the accumulator's N axis."""
    if SWAP_AB:
        r = v[:, None]
    else:
        r = v[None, :]
    return r


@triton.jit
def _store_partial(part_ptr, acc, offs_m, offs_n, M, N, SWAP_AB: tl.constexpr):
    """Split-K: this split's fp32 partial tile into the workspace [SPLIT_K, M, N] (bias and cast come in
    the reduction)."""
    base = part_ptr + tl.program_id(1).to(tl.int64) * M * N
    _store_tile(base, acc, offs_m, offs_n, M, N, N, SWAP_AB)


@triton.jit
def _store_tile(y_ptr, acc, offs_m, offs_n, M, N, stride_ym, SWAP_AB: tl.constexpr):
    out = acc.to(y_ptr.dtype.element_ty)
    rows = offs_m.to(tl.int64) * stride_ym
    if SWAP_AB:
        ptrs = y_ptr + rows[None, :] + offs_n[:, None]
        mask = (offs_m[None, :] < M) & (offs_n[:, None] < N)
    else:
        ptrs = y_ptr + rows[:, None] + offs_n[None, :]
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(ptrs, out, mask=mask)


# SPLIT_K is a runtime count (a value of 1 must not become a specialized constant: one variant per SPLIT).
@triton.jit(do_not_specialize=["SPLIT_K"])
def _w8a16_gemm_kernel(
    x_ptr, w_ptr, ws_ptr, bias_ptr, y_ptr, part_ptr,
    M, N, K, SPLIT_K,
    stride_xm, stride_wn, stride_ym, stride_ws,
    WSCALE: tl.constexpr, MX_PRESCALE: tl.constexpr, HAS_BIAS: tl.constexpr, HW_FP8: tl.constexpr,
    DOT_F32: tl.constexpr, SWAP_AB: tl.constexpr, USE_TMA: tl.constexpr, SPLIT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    FAST_BF16: tl.constexpr = False, WGMMA_DRAIN: tl.constexpr = False, PDL: tl.constexpr = False,
    MX_FOLD: tl.constexpr = False,
):
    """y[M, N] = x[M, K] @ dequant(w)[N, K]^T (+ bias). x bf16/fp16; w codes fp8e4nv (HW_FP8) or uint8.

    ws: TENSOR [] / ROW [N] / BLOCK128 [cdiv(N,128), cdiv(K,128)] fp32, MX32 uint8 e8m0 [N, G] with
    G >= cdiv(K, BLOCK_K) * BLOCK_K / 32 (rows padded past cdiv(K, 32), see _gemm_launch.mx_scale_rows);
    stride_ws is its row stride (unused for TENSOR/ROW).
    USE_TMA: x_ptr / w_ptr are host tensor descriptors ([BLOCK_M, BLOCK_K] / [BLOCK_N, BLOCK_K] blocks,
    zero-filled out of bounds); otherwise plain pointers.
    SPLIT: this program reduces only its split's K tiles and stores an fp32 partial to part_ptr (module
    docstring); y_ptr and bias are then written by the reduction.
    PDL: launched programmatically (kernels_triton._pdl): waits for the previous kernel before touching memory.
    MX_FOLD (MX32 with FAST_BF16): every scale code of the weight is <= _fp8.MX_FOLD_MAX (the launcher knows it
    from the weight's load-time preparation, _gemm_launch.mx_fold_ok), so 2^e rides on the decode's one FMA.
    """
    if USE_TMA:
        DTYPE: tl.constexpr = x_ptr.dtype
    else:
        DTYPE: tl.constexpr = x_ptr.dtype.element_ty
    pid_m, pid_n, offs_m, offs_n, offs_k, rows_m, rows_n = _tile_rows(M, N, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)
    kt_lo, kt_n = _k_tile_range(K, BLOCK_K, SPLIT_K, SPLIT)
    enter(PDL)
    x_src, w_src = _k_tile_sources(x_ptr, w_ptr, rows_m, rows_n, offs_k, stride_xm, stride_wn, USE_TMA)
    if WSCALE == _W_MX32:
        ws_row = ws_ptr + rows_n.to(tl.int64) * stride_ws
        offs_g = tl.arange(0, BLOCK_K // _MX)
    if WSCALE == _W_BLOCK128:
        ws_row = ws_ptr + (rows_n // _BLOCK) * stride_ws
    if SWAP_AB:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)

    if SPLIT and not USE_TMA:
        x_src += kt_lo * BLOCK_K
        w_src += kt_lo * BLOCK_K
    for kt_i in range(0, kt_n):
        kt = kt_lo + kt_i
        k0 = kt * BLOCK_K
        if WGMMA_DRAIN:
            wait_all(k0)
        x, codes = _load_k_tile(x_src, w_src, pid_m * BLOCK_M, pid_n * BLOCK_N, k0, offs_k, K, USE_TMA)
        if WSCALE == _W_MX32 and MX_PRESCALE:
            # 2^e of each element's 32-group along K, folded into the decoded weight (exact in bf16
            # unless it underflows: module docstring). The [BLOCK_N, BLOCK_K // 32] exponents are
            # broadcast along K in registers (not gathered per element) so the product is formed in the
            # MMA operand layout. No mask: the launcher pads each scale row to a multiple of 16 groups
            # (>= every BLOCK_K / 32), so the load is 4+ contiguous aligned bytes that the pipeliner
            # copies asynchronously; padded groups multiply weight codes that are masked to 0.
            e = tl.load(ws_row[:, None] + (k0 // _MX + offs_g)[None, :])
            if MX_FOLD:  # one bf16x2 FMA per pair, by 2^(e - 7) (_fp8.e4m3_to_bf16_mx_folded)
                sb = tl.reshape(tl.broadcast_to(e8m0_to_bf16_fold_mul(e)[:, :, None], (BLOCK_N, BLOCK_K // _MX, _MX)),
                                (BLOCK_N, BLOCK_K))
                w = e4m3_to_bf16_mx_folded(codes.to(tl.uint8, bitcast=True), sb)
            elif FAST_BF16:  # the same single rounding of code x 2^e, in bf16x2 FMAs (_fp8.e4m3_to_bf16_scaled)
                sb = tl.reshape(tl.broadcast_to(e8m0_to_bf16(e)[:, :, None], (BLOCK_N, BLOCK_K // _MX, _MX)),
                                (BLOCK_N, BLOCK_K))
                w = e4m3_to_bf16_scaled(codes.to(tl.uint8, bitcast=True), sb)
            else:
                s = tl.reshape(tl.broadcast_to(e8m0_to_f32(e)[:, :, None], (BLOCK_N, BLOCK_K // _MX, _MX)),
                               (BLOCK_N, BLOCK_K))
                w = (_decode_codes(codes, HW_FP8, tl.float32) * s).to(DTYPE)
        else:
            w = _decode_codes(codes, HW_FP8, DTYPE, FAST_BF16)
        if WSCALE == _W_BLOCK128:
            s = tl.load(ws_row + k0 // _BLOCK)
            acc += _mma(x, w, None, SWAP_AB, DOT_F32) * _per_n(s, SWAP_AB)
        elif WSCALE == _W_MX32 and not MX_PRESCALE:
            # BLOCK_K == 32 (checked by the launcher): this tile is exactly group kt.
            s = e8m0_to_f32(tl.load(ws_row + kt))
            acc += _mma(x, w, None, SWAP_AB, DOT_F32) * _per_n(s, SWAP_AB)
        else:
            acc = _mma(x, w, acc, SWAP_AB, DOT_F32)
        if not USE_TMA:
            x_src += BLOCK_K
            w_src += BLOCK_K

    if WSCALE == _W_TENSOR:
        acc = acc * tl.load(ws_ptr)
    if WSCALE == _W_ROW:
        acc = acc * _per_n(tl.load(ws_ptr + rows_n), SWAP_AB)
    if SPLIT:
        _store_partial(part_ptr, acc, offs_m, offs_n, M, N, SWAP_AB)
    else:
        if HAS_BIAS:
            acc = acc + _per_n(tl.load(bias_ptr + rows_n).to(tl.float32), SWAP_AB)
        _store_tile(y_ptr, acc, offs_m, offs_n, M, N, stride_ym, SWAP_AB)


@triton.jit(do_not_specialize=["SPLIT_K"])
def _w8a8_gemm_kernel(
    xq_ptr, xs_ptr, w_ptr, ws_ptr, bias_ptr, y_ptr, part_ptr,
    M, N, K, SPLIT_K,
    stride_xm, stride_wn, stride_ym, stride_xs, stride_ws,
    SCALES: tl.constexpr, HAS_BIAS: tl.constexpr, HW_FP8: tl.constexpr, DOT_F32: tl.constexpr,
    USE_TMA: tl.constexpr, SPLIT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    PDL: tl.constexpr = False, WARP_SPEC: tl.constexpr = False,
):
    """y[M, N] = (xq * xs) @ (w * ws)^T (+ bias); xq, w codes fp8e4nv (HW_FP8) or uint8.

    TENSOR_TENSOR: xs [], ws []. TOKEN_ROW: xs [M] (stride_xs between tokens), ws [N].
    GROUP_BLOCK: xs [M, cdiv(K,128)] (row stride stride_xs), ws [cdiv(N,128), cdiv(K,128)] (stride_ws).
    USE_TMA: xq_ptr / w_ptr are host tensor descriptors with [BLOCK_M, BLOCK_K] / [BLOCK_N, BLOCK_K]
    blocks (sm_90 TMA bulk copies; out-of-bounds rows and the K tail are zero-filled by the hardware, so
    no masks); otherwise plain pointers. SPLIT: split-K partials as in the W8A16 kernel. PDL: as there.
    WARP_SPEC (sm_90, TMA only): Triton's Hopper warp specialization of the K loop: one producer warpgroup
    issues the TMA copies, num_warps = 4 becomes two consumer warpgroups that split the tile (12 warps in
    all, registers rebalanced with setmaxnreg). A consumer's promotion (GROUP_BLOCK: the wait for each K
    tile's fresh product and its scaling) then overlaps the other consumer's wgmmas and the producer's copies,
    the structure DeepGEMM builds by hand. With WARP_SPEC = False the loop compiles to the same SASS as a
    plain range loop (checked on sm_90).
    """
    pid_m, pid_n, offs_m, offs_n, offs_k, rows_m, rows_n = _tile_rows(M, N, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)
    kt_lo, kt_n = _k_tile_range(K, BLOCK_K, SPLIT_K, SPLIT)
    enter(PDL)
    x_src, w_src = _k_tile_sources(xq_ptr, w_ptr, rows_m, rows_n, offs_k, stride_xm, stride_wn, USE_TMA)
    if SCALES == _A8_GROUP_BLOCK:
        xs_row = xs_ptr + rows_m.to(tl.int64) * stride_xs
        if BLOCK_N <= _BLOCK:
            # A tile of <= 128 columns lies inside one 128-row weight block (BLOCK_N is a power of two and
            # pid_n * BLOCK_N a multiple of it), so its weight scale is one scalar per K group: one load and
            # one FFMA per accumulator element, where a [BLOCK_N] vector cost a load per column a thread holds
            # and an extra FMUL per element (sm_90 SASS of 128 x 128 x 128: 34 -> 3 loads per K tile).
            # Wrapped edge columns (rows_n) may belong to another block; they are never stored.
            ws_blk = ws_ptr + ((pid_n * BLOCK_N) // _BLOCK) * stride_ws
        else:
            ws_row = ws_ptr + (rows_n // _BLOCK) * stride_ws
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)

    if SPLIT and not USE_TMA:
        x_src += kt_lo * BLOCK_K
        w_src += kt_lo * BLOCK_K
    for kt_i in tl.range(0, kt_n, warp_specialize=WARP_SPEC):
        kt = kt_lo + kt_i
        k0 = kt * BLOCK_K
        a, b = _load_k_tile(x_src, w_src, pid_m * BLOCK_M, pid_n * BLOCK_N, k0, offs_k, K, USE_TMA)
        if not HW_FP8:
            # sm_80: exact software decode, bf16 MMA (same products as an fp8 MMA).
            a = e4m3_to_f32(a).to(tl.bfloat16)
            b = e4m3_to_f32(b).to(tl.bfloat16)
        if SCALES == _A8_GROUP_BLOCK:
            # DeepSeek-V3 fine-grained scaling: the 128-deep partial product of group g, promoted to
            # fp32 and scaled by s_x[m, g] * s_w[n // 128, g] (BLOCK_K divides 128).
            sx = tl.load(xs_row + k0 // _BLOCK)
            if BLOCK_N <= _BLOCK:
                s = sx * tl.load(ws_blk + k0 // _BLOCK)
                acc += _mma(a, b, None, False, DOT_F32) * s[:, None]
            else:
                sw = tl.load(ws_row + k0 // _BLOCK)
                acc += _mma(a, b, None, False, DOT_F32) * (sx[:, None] * sw[None, :])
        elif HW_FP8:
            # fp8 x fp8 products promoted into the fp32 accumulator once per K tile (the semantics are
            # fp32 accumulation; on sm_90 Triton's default never promotes, which lost ~4% on single
            # outputs at K = 14336 on the H200). Same promotion interval as GROUP_BLOCK.
            if WARP_SPEC and BLOCK_M * BLOCK_N <= 128 * 128:
                # The explicit form (a fresh product added to acc): one wgmma wait per K tile, where Triton's
                # max_num_imprecise_acc waits after every wgmma of a consumer (sm_90 SASS). Each consumer then
                # holds two accumulators: 2 x 64 registers a thread at 128 x 128 (no spills under the 232 that
                # setmaxnreg gives it), 2 x 128 at 256 x 128 (1.2 KB of spills: that tile keeps the implicit form).
                acc += _mma(a, b, None, False, DOT_F32)
            else:
                acc = _mma(a, b, acc, False, DOT_F32, BLOCK_K)
        else:
            acc = _mma(a, b, acc, False, DOT_F32)
        if not USE_TMA:
            x_src += BLOCK_K
            w_src += BLOCK_K

    if SCALES == _A8_TENSOR_TENSOR:
        acc = acc * (tl.load(xs_ptr) * tl.load(ws_ptr))
    if SCALES == _A8_TOKEN_ROW:
        sx = tl.load(xs_ptr + rows_m.to(tl.int64) * stride_xs)
        sw = tl.load(ws_ptr + rows_n)
        acc = acc * sx[:, None] * sw[None, :]
    if SPLIT:
        _store_partial(part_ptr, acc, offs_m, offs_n, M, N, False)
    else:
        if HAS_BIAS:
            acc = acc + tl.load(bias_ptr + rows_n).to(tl.float32)[None, :]
        _store_tile(y_ptr, acc, offs_m, offs_n, M, N, stride_ym, False)
