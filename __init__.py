"""detach-parity: gradient-flow control ported between PyTorch and JAX, and proven.

The installed distribution is imported as `detach_parity`; the repository's folders are its
subpackages (setuptools' package-dir mapping, pyproject.toml):

    detach_parity.shared      framework-neutral: core (fixtures, records, registry, parity, oracle,
                              runner, the declared backend surface), scenarios (one record each),
                              apps (the command line and its commands)
    detach_parity.torch_impl  the lessons in PyTorch, and the torch backend of the tools
    detach_parity.jax_impl    the same lessons and tools in JAX / Flax NNX / optax

The port checker, for your own code and tests:

    from detach_parity import check_port, assert_port_matches, register_rule

Importing this package imports no framework and changes no setting; the names below load
their modules on first use.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"
__all__ = [
    "check_port",
    "assert_port_matches",
    "transfer_weights",
    "transfer_back",
    "register_rule",
    "PortReport",
    "PortMismatch",
]


def __getattr__(name: str):
    if name in __all__:
        return getattr(importlib.import_module(".shared.apps.check", __name__), name)
    raise AttributeError(f"module 'detach_parity' has no attribute {name!r}")
