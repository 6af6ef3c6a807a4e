"""CUDA C++ kernels compiled at run time by NVRTC (through CuPy's raw bindings) and launched on torch's
current stream. Sources: kernels_cuda/csrc (shared with kernels_hip through csrc/portability.cuh).

Importing this package imports neither CuPy nor torch.cuda state; see candidates.py for what is offered
and `candidates.backend_available()` for why it may not run here.
"""
