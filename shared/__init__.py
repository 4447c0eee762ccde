"""Framework-neutral half of detach-parity: fixtures, registry, parity, oracle, CLI.

Nothing in this package imports torch or JAX at module level; the runner imports
`torch_impl.<scenario>` and `jax_impl.<scenario>` on demand.
"""

__version__ = "0.1.0"
