"""The torch backend of the tools: what the applications need from PyTorch (shared/core/backend.py).

    layout     the rule table: a model's weights <-> canonical leaves, by module type
    port       layouts: read, write and convert a model's weights by the rule table
    port_run   runs of a user's model: outputs of every submodule, gradients, K optimizer steps
    ports      the worked ports of the checker (correct and buggy), by name
    bench      what `detach-parity bench` times
    claims     the tutorial claims' checks, one module per theme
    profile    what `detach-parity run --profile` counts (JAX: traces, lowerings, compiles), the compile cache
    inside     what a module computes, value by value, with its lines (the checker's `name the line`)
    optimizer  the optimizer part by part (where a first step parts while the gradients match)

Mirrored in jax_impl/backend/: the same modules and functions in the same order. The lessons
(the modules above this package) never import it; only shared.apps.backends does.
"""

from . import bench, claims, inside, optimizer, port, port_run, profile

__all__ = ["FRAMEWORK", "port", "port_run", "bench", "claims", "profile", "inside", "optimizer"]

FRAMEWORK = "torch"
