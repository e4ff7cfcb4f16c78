"""The CUDA backend (numba.cuda); imported only when CUDA is asked for."""
