"""HIP backend of fp8dispatch for ROCm RDNA4 (gfx1201): W8A16 and W8A8 decode kernels on the WMMA matrix
cores, plus kernels_cuda's activation-quantization and dequantization sources compiled as HIP.

Runtime: hipRTC through CuPy's ROCm build (compiler.py); offline: clang-19 for CI and the ISA report
(isa.py). Import-safe: importing this package touches no device, no filesystem and imports no CuPy.
NOT YET RUN ON HARDWARE (see candidates.HARDWARE_VALIDATED and docs/hip.md).
"""
