"""The kernels: the struct layouts they share, their specs, the binary, N-ary and
reduction families, the streaming stores and half-precision words."""
