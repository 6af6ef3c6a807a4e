"""An independent oracle for the exact conventions, written without torch's fp8 casts.

e4m3 values are decoded from their bit fields by formula; rounding picks the nearest representable value with
ties to the even code; scales are numpy float32 arithmetic; MX exponents are found by search over integers.
Tests compare the library's bits to this, so a bug shared by the library and torch's casts would still show.
"""

from __future__ import annotations

import math

import numpy as np
import torch

E4M3_MAX = 448.0
AMAX_FLOOR = np.float32(1e-12)


def _e4m3_value(code: int) -> float:
    s = -1.0 if code & 0x80 else 1.0
    e = (code >> 3) & 0xF
    m = code & 0x7
    if e == 0xF and m == 0x7:
        return math.nan
    if e == 0:
        return s * (m / 8.0) * 2.0 ** -6
    return s * (1.0 + m / 8.0) * 2.0 ** (e - 7)


# Non-negative finite codes sorted by value (codes 0x00..0x7E are increasing).
POS_CODES = np.arange(0x7F, dtype=np.int64)
POS_VALUES = np.array([_e4m3_value(int(c)) for c in POS_CODES], dtype=np.float64)


def e4m3_round(v: np.ndarray) -> np.ndarray:
    """float32 array -> e4m3 codes (uint8): clamp to +-448, round to nearest, ties to even code."""
    v = np.asarray(v, dtype=np.float64)
    a = np.minimum(np.abs(v), E4M3_MAX)
    hi = np.searchsorted(POS_VALUES, a, side="left").clip(0, len(POS_VALUES) - 1)
    lo = (hi - 1).clip(0)
    d_hi = np.abs(POS_VALUES[hi] - a)
    d_lo = np.abs(a - POS_VALUES[lo])
    pick_lo = (d_lo < d_hi) | ((d_lo == d_hi) & (POS_CODES[lo] % 2 == 0))
    code = np.where(pick_lo, POS_CODES[lo], POS_CODES[hi]).astype(np.uint8)
    neg = np.signbit(v)  # negative values that round to zero keep their sign (0x80), as IEEE casts do
    return np.where(neg, code | 0x80, code).astype(np.uint8)


def e4m3_decode(codes: np.ndarray) -> np.ndarray:
    table = np.array([_e4m3_value(c) for c in range(256)], dtype=np.float64)
    return table[np.asarray(codes, dtype=np.int64)]


def scale(amax: float) -> np.float32:
    return np.float32(max(np.float32(amax), AMAX_FLOOR)) / np.float32(E4M3_MAX)


def quant_codes(v: np.ndarray, s: np.float32) -> np.ndarray:
    return e4m3_round(np.asarray(v, dtype=np.float32) / np.float32(s))


def mx_exponent(amax: float, mode: str) -> int:
    amax = float(np.float32(amax))
    if amax == 0.0:
        return -127
    if mode == "rceil":
        r = float(np.float32(amax) / np.float32(448.0))
        e = -200
        while 2.0 ** e < r:  # smallest e with 2^e >= r
            e += 1
    else:
        e = -200
        while 2.0 ** (e + 1) <= amax:  # largest e with 2^e <= amax
            e += 1
        e -= 8
    return max(-127, min(127, e))


def codes_of(t: torch.Tensor) -> np.ndarray:
    return t.view(torch.uint8).cpu().numpy()
