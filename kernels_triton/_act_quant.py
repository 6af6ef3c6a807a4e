"""Fused dynamic activation quantization: per-tensor, per-token and per-token-group-128 (kernels + launcher).

On the GPU the codes and scales are bit-identical to `dispatch.quantize_activation`:
  s = max(amax, AMAX_FLOOR) / 448 (IEEE division), codes = e4m3_rne(clamp(v / s, -448, 448)) with v / s an
  IEEE division, amax a NaN-propagating max. Lengths are runtime arguments; nothing reads a tensor value on the
  host; no transient memory beyond per-tensor's partial maxima (4 bytes per amax program, never zero-filled).

Why it is memory bound (H200: 4.26 TB/s copy is ~11 elements per SM per ns at 3 bytes each, against ~250
issued thread-instructions per SM per ns): the kernels spend a few instructions per element, counted on the
sm_90 SASS of the bf16 [4096, 4096] launches (tests/test_triton_act_quant.py::test_sm90_sass_instructions_per_element;
before -> now: per-tensor amax 5.3 -> 3.5 and cast 17.9 -> 8.8, per-token 31.0 -> 8.7, 1x128 groups 24.4 -> 10.6):
  - the division by a group's scale is weight_quant's reciprocal division (y = RN(1/s) once per group, then a
    multiply and two FMAs per element; proven bit-identical to IEEE division for bf16/fp16 inputs), not a
    div.rn.f32 per element (~10 instructions with a branch). fp32 inputs and the CPU interpreter keep div.rn;
  - sm_90 converts with cvt.rn.satfinite.e4m3x2.f32 (one per two values): round-to-nearest-even and saturation
    at 448 are the reference's clamp-then-cast for every quotient (|v / s| exceeds 448 by at most an ulp), and a
    NaN stays NaN (the H200 run of f50e894 passed its NaN tests through this instruction), so no clamp;
  - whole rows (per-token, one row per program up to `ActQuantConfig.row_max` elements) and whole 1x128 groups
    stay in registers: x is read once; 128-bit loads and stores; 32 values per thread, so 4-8 programs
    (32-40 warps) are resident per SM and ~64 KB of loads are in flight per SM.
Per-tensor needs the global amax before any code, so x is read twice: pass 1 (`_tensor_amax_kernel`, 4 programs
per SM looping over tiles) writes one partial max per program; pass 2 (`_tensor_cast_kernel`, one tile per
program) reduces the partials itself, so there is no zero-filled accumulator, no atomic and no third launch.
Pass 2 walks the tiles in reverse with evict-first loads and stores, so what pass 1 read last is still in L2.
Tensors up to `ActQuantConfig.single_program_max` elements use one program (one launch, the decode case).

On CUDA sm_90+ every kernel here is a programmatic dependent launch (kernels_triton._pdl, as the Triton GEMMs and
GEMVs): its programs may be placed while the kernel before it is finishing and block in `enter` before they touch
memory, so the launch gap before the quantizer (and, per-tensor, between its two passes) shrinks to the wait.
`PDL = False` turns that off for this module alone (tools.perf.ab_pdl --family act_quant flips it).

`hw_fp8=False` writes uint8 codes with the software encoder (sm_80, and the interpreter-safe path the CPU
tests run: the interpreter's fp32 -> fp8 cast is wrong).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os

import torch
import triton
import triton.language as tl

from dispatch.errors import BackendUnavailable, FormatError, UnsupportedError
from dispatch.formats import ACT_GROUP, ActGranularity
from dispatch.target import Target, detect

from ._fast_launch import launch
from ._fp8 import amax_to_scale
from ._pdl import enter, launch_options, pdl_launch
from .act_quant_config import ActQuantConfig, default_act_quant_config, exact_hw_e4m3_cast
from .weight_quant import FLT_MAX, _div_by_scale, _encode, _max_nan, _recip, _to_f32

# Programmatic launches of the quantizer where kernels_triton._pdl allows them (see the module docstring). Measured
# on the H200 against plain launches: docs/perf/h200.md, session 19.
PDL = True


@triton.jit
def _quotient(v, s, y, RECIP: tl.constexpr):
    """The IEEE quotient v / s for a group scale s from amax_to_scale (normal, +Inf or NaN), y = _recip(s).

    RECIP: weight_quant's reciprocal division, proven for bf16/fp16 v and a normal s. A group holding an Inf has
    s = +Inf and y = 0: its correction term would be Inf * 0 = NaN, so the correction uses min(s, FLT_MAX)
    instead (once per group), which gives q = RN(v * 0 + 0) = +-0 with v's sign for finite v and NaN for v = +-Inf,
    exactly v / Inf. A NaN scale gives y = NaN and q = NaN, as the division does."""
    if RECIP:
        q = _div_by_scale(v, tl.minimum(s, FLT_MAX), y, True)
    else:
        q = _div_by_scale(v, s, y, False)
    return q


@triton.jit
def _per_token_kernel(x_ptr, q_ptr, s_ptr, M, K, stride_xm, stride_qm,
                      HW_FP8: tl.constexpr, HW_CVT: tl.constexpr, RECIP: tl.constexpr,
                      BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, LOOP: tl.constexpr, PDL: tl.constexpr):
    """BLOCK_R whole rows per program. LOOP=False: BLOCK_K >= K, the rows stay in registers (one read).
    LOOP=True (rows longer than ActQuantConfig.row_max): an amax loop, then a cast loop that re-reads the row
    (from L1/L2: one row per program)."""
    enter(PDL)
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = rows[:, None] < M
    r64 = rows[:, None].to(tl.int64)
    cols = tl.arange(0, BLOCK_K)[None, :]
    x_rows = x_ptr + r64 * stride_xm
    q_rows = q_ptr + r64 * stride_qm
    if LOOP:
        acc = tl.zeros([BLOCK_R, BLOCK_K], tl.float32)
        for k0 in range(0, K, BLOCK_K):
            v = _to_f32(tl.load(x_rows + k0 + cols, mask=rmask & (k0 + cols < K), other=0.0))
            acc = _max_nan(acc, tl.abs(v))
        amax = tl.reduce(acc, 1, _max_nan)
    else:
        m = rmask & (cols < K)
        v = _to_f32(tl.load(x_rows + cols, mask=m, other=0.0))
        amax = tl.reduce(tl.abs(v), 1, _max_nan)
    s = amax_to_scale(amax)
    tl.store(s_ptr + rows, s, mask=rows < M)
    s2 = s[:, None]
    y2 = _recip(s, RECIP)[:, None]
    if LOOP:
        for k0 in range(0, K, BLOCK_K):
            m = rmask & (k0 + cols < K)
            v = _to_f32(tl.load(x_rows + k0 + cols, mask=m, other=0.0, eviction_policy="evict_first"))
            tl.store(q_rows + k0 + cols, _encode(_quotient(v, s2, y2, RECIP), HW_FP8, HW_CVT), mask=m)
    else:
        tl.store(q_rows + cols, _encode(_quotient(v, s2, y2, RECIP), HW_FP8, HW_CVT), mask=m)


@triton.jit
def _per_group_kernel(x_ptr, q_ptr, s_ptr, M, K, NG, stride_xm, stride_qm, stride_sm, GRID_G,
                      HW_FP8: tl.constexpr, HW_CVT: tl.constexpr, RECIP: tl.constexpr,
                      BLOCK_R: tl.constexpr, GROUPS: tl.constexpr, PDL: tl.constexpr):
    """[BLOCK_R, GROUPS * 128] tiles (loaded 2-D: a warp reads a contiguous row segment), viewed as
    [BLOCK_R, GROUPS, 128] for the group amax; each group's amax, scale and codes stay in registers (one read).
    1-D grid, the column tile fastest (GRID_G column tiles); NG = ceil(K / 128). The last group may be partial:
    masked lanes load 0, which never raises a max of absolute values."""
    enter(PDL)
    pid = tl.program_id(0)
    pid_g = pid % GRID_G
    pid_r = pid // GRID_G
    rows = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = pid_g * (GROUPS * 128) + tl.arange(0, GROUPS * 128)
    g = pid_g * GROUPS + tl.arange(0, GROUPS)
    r64 = rows[:, None].to(tl.int64)
    m = (rows[:, None] < M) & (cols[None, :] < K)
    v = _to_f32(tl.load(x_ptr + r64 * stride_xm + cols[None, :], mask=m, other=0.0))
    vg = tl.reshape(v, [BLOCK_R, GROUPS, 128])
    amax = tl.reduce(tl.abs(vg), 2, _max_nan)
    s = amax_to_scale(amax)
    tl.store(s_ptr + r64 * stride_sm + g[None, :], s, mask=(rows[:, None] < M) & (g[None, :] < NG))
    q = _quotient(vg, s[:, :, None], _recip(s, RECIP)[:, :, None], RECIP)
    q = _encode(tl.reshape(q, [BLOCK_R, GROUPS * 128]), HW_FP8, HW_CVT)
    tl.store(q_ptr + r64 * stride_qm + cols[None, :], q, mask=m)


@triton.jit
def _per_tensor_single_kernel(x_ptr, q_ptr, s_ptr, NUMEL, HW_FP8: tl.constexpr, HW_CVT: tl.constexpr,
                              RECIP: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
    """Small tensors: one program, amax loop then cast loop (one launch; x stays in L1/L2)."""
    enter(PDL)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i0 in range(0, NUMEL, BLOCK):
        v = _to_f32(tl.load(x_ptr + i0 + offs, mask=i0 + offs < NUMEL, other=0.0))
        acc = _max_nan(acc, tl.abs(v))
    s = amax_to_scale(tl.reduce(acc, 0, _max_nan))
    tl.store(s_ptr, s)
    y = _recip(s, RECIP)
    for i0 in range(0, NUMEL, BLOCK):
        m = i0 + offs < NUMEL
        v = _to_f32(tl.load(x_ptr + i0 + offs, mask=m, other=0.0))
        tl.store(q_ptr + i0 + offs, _encode(_quotient(v, s, y, RECIP), HW_FP8, HW_CVT), mask=m)


@triton.jit
def _tile_mask(offs, NUMEL, base, BLOCK: tl.constexpr):
    """offs < NUMEL - base as an int32 compare (base is int64: tensors past 2^31 elements work)."""
    return offs < tl.minimum(NUMEL - base, BLOCK).to(tl.int32)


@triton.jit
def _tensor_amax_kernel(x_ptr, part_ptr, NUMEL, NTILES, BLOCK: tl.constexpr, WIDTH: tl.constexpr,
                        PDL: tl.constexpr):
    """Pass 1 of per-tensor scaling: program p reduces tiles p, p + P, ... (P = the grid, a few programs per SM, all
    resident) and writes its NaN-propagating max to part_ptr[p]. No atomics, so nothing needs zero-filling.
    A tile is loaded as [BLOCK // WIDTH, WIDTH] (WIDTH = 8 values x the program's threads) and folded along its
    first axis, in each thread's registers, into a WIDTH-wide accumulator: 8 registers per thread instead of 32, so
    ptxas keeps all of a tile's 128-bit loads in flight (with a 32-register accumulator it interleaved each load
    with the previous one's use: one load in flight per thread)."""
    enter(PDL)
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK // WIDTH)[:, None] * WIDTH + tl.arange(0, WIDTH)[None, :]
    acc = tl.zeros([WIDTH], dtype=tl.float32)
    for t in range(pid, NTILES, tl.num_programs(0)):
        base = tl.cast(t, tl.int64) * BLOCK  # tl.cast: the interpreter's loop variable is a Python int
        v = tl.load(x_ptr + base + offs, mask=_tile_mask(offs, NUMEL, base, BLOCK), other=0.0)
        acc = _max_nan(acc, tl.reduce(tl.abs(_to_f32(v)), 0, _max_nan))
    tl.store(part_ptr + pid, tl.reduce(acc, 0, _max_nan))


@triton.jit
def _tensor_cast_kernel(x_ptr, q_ptr, s_ptr, part_ptr, NUMEL, NPART,
                        HW_FP8: tl.constexpr, HW_CVT: tl.constexpr, RECIP: tl.constexpr,
                        BLOCK: tl.constexpr, PART_BLOCK: tl.constexpr, PDL: tl.constexpr):
    """Pass 2: every program reduces the NPART partial maxima (a few KB, from L2) to the scale, then quantizes one
    tile. Tiles in reverse order, so the first programs read what pass 1 read last (still in L2). x is loaded and
    the codes stored evict-first: a consumed x line and a code line are then L2's first victims, so the x tiles
    not yet read stay (under plain LRU a hit would make the consumed line the newest and the codes would push out
    unread x). The GEMM that follows is compute bound: codes served from DRAM cost it little."""
    enter(PDL)  # the amax pass (its predecessor) has completed and its partial maxima are visible
    p = tl.arange(0, PART_BLOCK)
    amax = tl.reduce(tl.load(part_ptr + p, mask=p < NPART, other=0.0), 0, _max_nan)
    s = amax_to_scale(amax)
    t = tl.num_programs(0) - 1 - tl.program_id(0)
    if t == 0:
        tl.store(s_ptr, s)
    base = t.to(tl.int64) * BLOCK
    offs = tl.arange(0, BLOCK)
    m = _tile_mask(offs, NUMEL, base, BLOCK)
    v = _to_f32(tl.load(x_ptr + base + offs, mask=m, other=0.0, eviction_policy="evict_first"))
    q = _encode(_quotient(v, s, _recip(s, RECIP), RECIP), HW_FP8, HW_CVT)
    tl.store(q_ptr + base + offs, q, mask=m, eviction_policy="evict_first")


# --- launch rule (pure: testable without a GPU) and launcher ---------------------------------------------------

def _pow2_at_least(v: int) -> int:
    return 1 << max(0, (int(v) - 1).bit_length())


@dataclasses.dataclass(frozen=True)
class ActQuantLaunch:
    """One launch shape of a granularity (`plan` chooses it): kernel tile, warps, grid, loop mode."""

    kernel: str  # "token" | "group" | "tensor_single" | "tensor_two_pass"
    block_r: int = 1  # rows per program (token, group)
    block_k: int = 1  # columns per program (token, group: GROUPS * 128) or elements per tile (tensor)
    num_warps: int = 4
    grid: int = 1  # programs (tensor_two_pass: of the cast pass)
    loop: bool = False  # token: rows longer than row_max (two reads)
    amax_programs: int = 0  # tensor_two_pass: programs of the amax pass (= partial maxima)


@functools.lru_cache(maxsize=1024)
def plan(granularity: ActGranularity, m: int, k: int, cfg: ActQuantConfig, sm_count: int) -> ActQuantLaunch:
    """The launch rule: tiles of ~cfg.block elements (cfg.block / (32 * cfg.num_warps) values per thread), the
    least padding of K, per-tensor's amax pass sized to stay resident (cfg.amax_programs_per_sm per SM)."""
    if granularity is ActGranularity.PER_TOKEN:
        bk = max(32, _pow2_at_least(k))
        if bk > cfg.row_max:
            return ActQuantLaunch("token", 1, cfg.block, cfg.num_warps, m, loop=True)
        # One row per program where a row fills >= 4 warps at the config's values per thread: each row's cross-warp
        # max, scale and reciprocal are then paid once per program, not once per row per thread. Short rows:
        # several per program.
        values = max(1, cfg.block // (32 * cfg.num_warps))
        warps = max(min(4, cfg.num_warps), min(32, bk // (32 * values)))
        br = min(_pow2_at_least(m), max(1, warps * 32 * values // bk))
        return ActQuantLaunch("token", br, bk, warps, math.ceil(m / br))
    if granularity is ActGranularity.PER_TOKEN_GROUP_128:
        ng = math.ceil(k / ACT_GROUP)
        widest = max(1, cfg.block // ACT_GROUP)
        # least padding of the groups of a row, the widest tile on ties
        groups = min((1 << i for i in range(widest.bit_length()) if (1 << i) <= widest),
                     key=lambda gw: (math.ceil(ng / gw) * gw, -gw))
        br = min(_pow2_at_least(m), max(1, cfg.block // (groups * ACT_GROUP)))
        grid = math.ceil(ng / groups) * math.ceil(m / br)
        return ActQuantLaunch("group", br, groups * ACT_GROUP, cfg.num_warps, grid)
    numel = m * k
    if numel <= cfg.single_program_max:
        return ActQuantLaunch("tensor_single", 1, min(cfg.block, max(128, _pow2_at_least(numel))), cfg.num_warps)
    tiles = math.ceil(numel / cfg.block)
    return ActQuantLaunch("tensor_two_pass", 1, cfg.block, cfg.num_warps, tiles,
                          amax_programs=max(1, min(tiles, cfg.amax_programs_per_sm * sm_count)))


def resolve_fp8_path(x: torch.Tensor, hw_fp8: bool | None) -> tuple[bool, bool]:
    """(HW_FP8, HW_CVT) for tensors on x's device. CPU tensors need the interpreter and get (False, False)."""
    return _resolve_fp8_path(x.device, hw_fp8)


def _resolve_fp8_path(device: torch.device, hw_fp8: bool | None) -> tuple[bool, bool]:
    if device.type == "cpu":
        if os.environ.get("TRITON_INTERPRET") != "1":
            raise BackendUnavailable("Triton kernels on CPU tensors need the interpreter: set TRITON_INTERPRET=1 "
                                     "before importing triton (tests only; slow, and not a GPU validation)")
        if hw_fp8:
            raise UnsupportedError("the Triton interpreter rounds fp32 -> fp8 casts wrongly: use hw_fp8=False on CPU")
        return False, False
    tgt = detect(device)
    if hw_fp8 is None:
        hw_fp8 = tgt.has_triton_fp8_dtype
    if hw_fp8 and not tgt.has_triton_fp8_dtype:
        raise UnsupportedError(f"{tgt.arch} has no Triton fp8e4nv type: use hw_fp8=False (uint8 codes, software path)")
    return hw_fp8, hw_fp8 and exact_hw_e4m3_cast(tgt)


def use_recip_div(x_dtype: torch.dtype, target: Target, cfg: ActQuantConfig) -> bool:
    """The reciprocal division is proven for bf16/fp16 inputs with a fused FMA: every GPU, not the CPU
    interpreter (its fma rounds twice)."""
    return cfg.recip_div and not target.is_cpu and x_dtype in (torch.bfloat16, torch.float16)


def _launch_args(g: ActGranularity, x_dtype: torch.dtype, device: torch.device, m: int, k: int, hw_fp8: bool | None,
                 pdl: bool, config: ActQuantConfig | None) -> tuple[bool, ActQuantLaunch, dict]:
    """(codes in hardware fp8, the launch shape, the keywords every kernel of the launch takes) for x on `device`."""
    hw, cvt = _resolve_fp8_path(device, hw_fp8)
    tgt = detect(device)
    cfg = config or default_act_quant_config(tgt)
    p = plan(g, m, k, cfg, tgt.sm_count)
    flags = dict(HW_FP8=hw, HW_CVT=cvt, RECIP=use_recip_div(x_dtype, tgt, cfg), num_warps=p.num_warps, PDL=pdl,
                 **launch_options(pdl))
    return hw, p, flags


@functools.lru_cache(maxsize=4096)
def _cuda_launch(g: ActGranularity, x_dtype: torch.dtype, device: torch.device, m: int, k: int, hw_fp8: bool | None,
                 pdl: bool) -> tuple[bool, ActQuantLaunch, dict]:
    """_launch_args with the default config on a CUDA device, cached: an eager call pays a dict lookup."""
    return _launch_args(g, x_dtype, device, m, k, hw_fp8, pdl, None)


def quantize_activation(x: torch.Tensor, granularity: "ActGranularity | str", config: ActQuantConfig | None = None,
                        *, hw_fp8: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """GPU twin of `dispatch.quantize_activation`: (codes float8_e4m3fn like x, fp32 scales) with the same
    layouts (per_tensor [], per_token [..., 1], per_token_group_128 [..., ceil(K/128)]). With hw_fp8=False
    the codes are computed in software; they are returned viewed as float8_e4m3fn all the same."""
    g = ActGranularity.parse(granularity)
    if not x.is_floating_point() or x.dim() < 1 or x.shape[-1] == 0:
        raise FormatError("activations must be a floating-point tensor [..., K] with K >= 1")
    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise FormatError(f"activations must be bf16/fp16/fp32, got {x.dtype}")
    lead, k = tuple(x.shape[:-1]), int(x.shape[-1])
    x2 = x.reshape(-1, k)
    if x2.stride(-1) != 1 or (g is ActGranularity.PER_TENSOR and not x2.is_contiguous()):
        x2 = x2.contiguous()
    m = x2.shape[0]
    dev = x.device
    pdl = PDL and pdl_launch(dev)  # CUDA sm_90+ only (never ROCm, sm_80/89, the interpreter); FP8DISPATCH_PDL=0
    if config is None and dev.type == "cuda":
        hw, p, flags = _cuda_launch(g, x.dtype, dev, m, k, hw_fp8, pdl)
    else:
        hw, p, flags = _launch_args(g, x.dtype, dev, m, k, hw_fp8, pdl, config)
    q = torch.empty((m, k), dtype=torch.float8_e4m3fn if hw else torch.uint8, device=dev)
    if g is ActGranularity.PER_TOKEN:
        s = torch.empty((m, 1), dtype=torch.float32, device=dev)
        if m:
            launch(_per_token_kernel, (p.grid,), x2, q, s, m, k, x2.stride(0), q.stride(0), BLOCK_R=p.block_r,
                   BLOCK_K=p.block_k, LOOP=p.loop, **flags)
        s = s.reshape(*lead, 1)
    elif g is ActGranularity.PER_TOKEN_GROUP_128:
        ng = math.ceil(k / ACT_GROUP)
        s = torch.empty((m, ng), dtype=torch.float32, device=dev)
        if m:
            groups = p.block_k // ACT_GROUP
            launch(_per_group_kernel, (p.grid,), x2, q, s, m, k, ng, x2.stride(0), q.stride(0), s.stride(0),
                   math.ceil(ng / groups), BLOCK_R=p.block_r, GROUPS=groups, **flags)
        s = s.reshape(*lead, ng)
    else:
        s = torch.empty((), dtype=torch.float32, device=dev)
        numel = m * k
        if p.kernel == "tensor_single":
            launch(_per_tensor_single_kernel, (1,), x2, q, s, numel, BLOCK=p.block_k, **flags)
        else:
            part = torch.empty((p.amax_programs,), dtype=torch.float32, device=dev)
            launch(_tensor_amax_kernel, (p.amax_programs,), x2, part, numel, p.grid, BLOCK=p.block_k,
                   WIDTH=min(p.block_k, 256 * p.num_warps), num_warps=p.num_warps, PDL=pdl, **launch_options(pdl))
            launch(_tensor_cast_kernel, (p.grid,), x2, q, s, part, numel, p.amax_programs, BLOCK=p.block_k,
                   PART_BLOCK=max(32, _pow2_at_least(p.amax_programs)), **flags)
    codes = q if hw else q.view(torch.float8_e4m3fn)
    return codes.reshape(*lead, k), s


def isa_kernel_specs(hw_fp8: bool, hw_cvt: bool, x_dtype: str = "bf16", m: int = 4096, k: int = 4096,
                     cfg: ActQuantConfig | None = None, sm_count: int = 132, pdl: bool = False) -> list[tuple]:
    """What the launcher compiles for an [m, k] input, for ahead-of-time inspection (kernels_triton.isa, the SASS
    instruction-count test): (name, kernel, signature, constexprs, num_warps, ints with 16-divisibility hints).
    Includes the long-row loop of per-token (k > row_max) and the single-program per-tensor kernel. `pdl`: compiled
    as the programmatic launches of CUDA sm_90+ (the launcher's `PDL and pdl_launch(device)`)."""
    cfg = cfg or ActQuantConfig()
    q = "*fp8e4nv" if hw_fp8 else "*u8"
    xp = f"*{x_dtype}"
    recip = cfg.recip_div and x_dtype in ("bf16", "fp16")
    base = {"HW_FP8": hw_fp8, "HW_CVT": hw_cvt, "RECIP": recip, "PDL": pdl}
    out = []
    tok_sig = {"x_ptr": xp, "q_ptr": q, "s_ptr": "*fp32", "M": "i32", "K": "i32", "stride_xm": "i32", "stride_qm": "i32"}
    for name, kk in (("act_quant_per_token", k), ("act_quant_per_token_loop", 2 * cfg.row_max)):
        p = plan(ActGranularity.PER_TOKEN, m, kk, cfg, sm_count)
        out.append((name, _per_token_kernel, tok_sig,
                    dict(base, BLOCK_R=p.block_r, BLOCK_K=p.block_k, LOOP=p.loop), p.num_warps,
                    ("K", "stride_xm", "stride_qm")))
    p = plan(ActGranularity.PER_TOKEN_GROUP_128, m, k, cfg, sm_count)
    out.append(("act_quant_group128", _per_group_kernel,
                {"x_ptr": xp, "q_ptr": q, "s_ptr": "*fp32", "M": "i32", "K": "i32", "NG": "i32", "stride_xm": "i32",
                 "stride_qm": "i32", "stride_sm": "i32", "GRID_G": "i32"},
                dict(base, BLOCK_R=p.block_r, GROUPS=p.block_k // ACT_GROUP), p.num_warps,
                ("K", "stride_xm", "stride_qm")))
    p = plan(ActGranularity.PER_TENSOR, 1, cfg.single_program_max, cfg, sm_count)
    out.append(("act_quant_tensor_single", _per_tensor_single_kernel,
                {"x_ptr": xp, "q_ptr": q, "s_ptr": "*fp32", "NUMEL": "i32"}, dict(base, BLOCK=p.block_k), p.num_warps,
                ("NUMEL",)))
    p = plan(ActGranularity.PER_TENSOR, m, k, cfg, sm_count)
    out.append(("act_quant_tensor_amax", _tensor_amax_kernel,
                {"x_ptr": xp, "part_ptr": "*fp32", "NUMEL": "i32", "NTILES": "i32"},
                {"BLOCK": p.block_k, "WIDTH": min(p.block_k, 256 * p.num_warps), "PDL": pdl},
                p.num_warps, ("NUMEL",)))
    out.append(("act_quant_tensor_cast", _tensor_cast_kernel,
                {"x_ptr": xp, "q_ptr": q, "s_ptr": "*fp32", "part_ptr": "*fp32", "NUMEL": "i32", "NPART": "i32"},
                dict(base, BLOCK=p.block_k, PART_BLOCK=max(32, _pow2_at_least(p.amax_programs))), p.num_warps,
                ("NUMEL",)))
    return out
