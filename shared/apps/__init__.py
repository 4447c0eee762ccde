"""The applications: the command line and what it drives (show, site, docs, selfcheck, bench,
claims, the port checker).

They stand on the core and the scenario records, and reach torch_impl / jax_impl only
through `shared.core.runner.impl` (an import-linter contract in `make test`).
"""
