"""Integer codes the kernel sources use for formats and dtypes (must equal fp8_common.cuh's #defines;
tests/test_cuda_compile.py checks every pair against the header text)."""

from __future__ import annotations

import torch

from dispatch.formats import ActGranularity, Format

SCALE_CODE = {Format.FP8_TENSOR: 0, Format.FP8_ROW: 1, Format.FP8_BLOCK: 2, Format.MXFP8: 3}
SCALE_MACRO = {Format.FP8_TENSOR: "FP8D_SCALE_TENSOR", Format.FP8_ROW: "FP8D_SCALE_ROW",
               Format.FP8_BLOCK: "FP8D_SCALE_BLOCK", Format.MXFP8: "FP8D_SCALE_MX"}

DTYPE_CODE = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2}
DTYPE_MACRO = {torch.bfloat16: "FP8D_DTYPE_BF16", torch.float16: "FP8D_DTYPE_F16", torch.float32: "FP8D_DTYPE_F32"}

ACTQ_CODE = {ActGranularity.PER_TENSOR: 0, ActGranularity.PER_TOKEN: 1, ActGranularity.PER_TOKEN_GROUP_128: 2}
ACTQ_MACRO = {ActGranularity.PER_TENSOR: "FP8D_ACTQ_TENSOR", ActGranularity.PER_TOKEN: "FP8D_ACTQ_TOKEN",
              ActGranularity.PER_TOKEN_GROUP_128: "FP8D_ACTQ_GROUP"}
