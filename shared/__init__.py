"""Framework-neutral half of detach-parity.

    shared.core       fixtures, records, registry, parity, oracle, checks, lessons, runner
    shared.scenarios  one record per scenario (schema, builder, oracle, pattern, notes)
    shared.apps       the command line and its commands (run, show, site, docs, bench,
                      claims, selfcheck)

Nothing here imports torch or JAX by name: shared.core.lessons loads `torch_impl.<module>`
and `jax_impl.<module>` on demand.
"""

__version__ = "0.1.0"
