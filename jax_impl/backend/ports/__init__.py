"""Worked ports, JAX side: the correct Flax NNX port of each torch model in torch_impl/backend/ports/, and
buggy ports with one catalogue bug each (VARIANTS: variant -> the pitfall id the checker must name).
"""
