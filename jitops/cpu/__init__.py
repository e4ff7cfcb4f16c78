"""The CPU backend: Numba kernels (serial and parallel), their specialisation, on-disk cache
and threading policy."""
