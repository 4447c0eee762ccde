"""JAX / Flax NNX / optax half of detach-parity: one module per scenario, mirrored in torch_impl/.

Importing this package changes no setting of the process. Every scenario call runs
inside `jax_impl._common.numerics(dtype)`, which enables x64 for float64 (off for
float32) and pins `jax_default_matmul_precision` to "highest" for that call only:
on TPUs and recent GPUs the float32 default may run in bfloat16 or TF32 passes,
which torch (no TF32) does not (see pitfall P16). On CPU both are exact.
"""
