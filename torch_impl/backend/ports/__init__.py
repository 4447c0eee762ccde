"""Worked ports, torch side: realistic models whose Flax NNX ports (jax_impl/backend/ports/) the port checker checks.

Each module holds the torch model, its loss, its optimizer factory, a batch builder and SIZES;
the JAX twin holds the correct NNX port and ports with one catalogue bug each.
"""
