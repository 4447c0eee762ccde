"""JAX / Flax NNX / optax half of detach-parity: one module per scenario, mirrored in torch_impl/.

The one place where JAX's default matmul precision is pinned to "highest":
on TPUs and recent GPUs the float32 default may run in bfloat16 or TF32 passes,
which torch (allow_tf32 = False) does not (see pitfall P16). On CPU both are exact.
"""

import jax

jax.config.update("jax_default_matmul_precision", "highest")
