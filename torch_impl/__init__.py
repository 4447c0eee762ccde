"""PyTorch half of detach-parity: one module per scenario, mirrored in jax_impl/.

Importing this package changes no setting of the process. Every scenario call runs
inside `torch_impl._common.numerics(dtype)`, which pins full float32 matmuls and
convolutions (no TF32, no bfloat16 passes) for that call only and restores the
caller's settings after (see pitfall P16); on CPU full float32 is already the default.
"""
