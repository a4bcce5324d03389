# Measurement shim, not a fix: fla (bc3b101d) refuses its Triton backward kernel chunk_bwd_dqkwg on
# Hopper with Triton 3.4-3.7.0 (wrong gradient values, fla #640) and asks for tilelang, which the GPU
# machine cannot install. The tensors autograd keeps and the kernels' work do not depend on the
# values, so the family job lifts the guard to measure memory and time; the gradients are not used.
try:
    import fla.ops.common.chunk_o as _chunk_o
    _chunk_o.TRITON_ABOVE_3_7_1 = True
except Exception:
    pass
