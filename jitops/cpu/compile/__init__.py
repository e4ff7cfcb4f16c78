"""Compiling: Numba's code generator as jitops uses it, the registries kernels compile
under, the on-disk cache, the process lifecycle, and every private hook of another library."""
