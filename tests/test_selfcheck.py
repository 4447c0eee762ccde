"""The mutation self-check finds every kind of gradient-control site (a real mutant killed and an identity
mutant surviving in a copy of the tree: tests/test_new_scenario.py)."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from detach_parity.shared.apps import selfcheck

ROOT = Path(__file__).resolve().parents[1]

SOURCE = textwrap.dedent(
    '''
    import jax, optax, torch
    from flax import nnx
    def f(x, y, done, model, tx, HEAD):
        """é: non-ASCII text before the sites checks byte offsets."""
        a = x.detach()  # GRAD-FLOW: é
        x.detach_()
        with torch.no_grad():
            pass
        with torch.inference_mode():
            pass
        model.requires_grad_(False)
        t = torch.zeros(2, requires_grad=False)
        b = jax.lax.stop_gradient(y * 2)
        opt = nnx.Optimizer(model, tx, wrt=HEAD)
        d = nnx.DiffState(0, HEAD)
        z = optax.set_to_zero()
        y = r + 0.9 * (1 - done) * q
        s = jax.numpy.std(x, ddof=1)
        g = torch.autograd.grad(a, [x], create_graph=True)
        h = torch.autograd.grad(a, [x], create_graph=order == 2)
    '''
)


def test_find_sites_each_construct(tmp_path) -> None:
    (tmp_path / "torch_impl").mkdir()
    (tmp_path / "jax_impl").mkdir()
    (tmp_path / "torch_impl" / "demo.py").write_text(SOURCE, encoding="utf-8")
    sites = selfcheck.find_sites(tmp_path)
    constructs = [s.construct for s in sites]
    assert constructs == [
        ".detach()",
        ".detach_()",
        "torch.no_grad()",
        "torch.inference_mode()",
        "requires_grad_(False)",
        "requires_grad=False",
        "jax.lax.stop_gradient(x)",
        "nnx.Optimizer(wrt=filter)",
        "nnx.DiffState filter",
        "optax.set_to_zero()",
        "(1 - done)",
        "ddof=1",
        "create_graph=True",
        "create_graph=<switch>",
    ]
    src = SOURCE.encode()
    for s in sites:
        assert src[s.start : s.end].decode() == s.original  # byte offsets survive the non-ASCII docstring
        mutated = src[: s.start] + s.replacement.encode() + src[s.end :]
        ast.parse(mutated)  # every mutant is valid Python
    by = {s.construct: s for s in sites}
    assert by["jax.lax.stop_gradient(x)"].replacement == "(y * 2)"
    assert by["(1 - done)"].replacement == "1" and by["(1 - done)"].kind == "arith"
    assert by["create_graph=<switch>"].replacement == "not (order == 2)"


CUSTOM = textwrap.dedent(
    """
    import jax, torch
    class Reverse(torch.autograd.Function):
        @staticmethod
        def forward(x, lam):
            return -x  # a forward: not a custom backward, no site
        @staticmethod
        def backward(ctx, g):
            return -ctx.lam * g, None
    class Clip(torch.autograd.Function):
        @staticmethod
        def backward(ctx, g):
            return None, None, g.clamp(ctx.lo, ctx.hi)
    def _bwd(res, g):
        lo, hi = res
        return -g, jax.numpy.clip(g, lo, hi)
    f.defvjp(_fwd, _bwd)
    def plain(g):
        return -g.clamp(0, 1)  # outside a custom backward: no site
    y = sample(logits, hard=True)
    z = sample(logits, hard=variant == "hard")
    """
)


def test_find_sites_of_custom_backward_rules_and_straight_through_samples(tmp_path) -> None:
    (tmp_path / "torch_impl").mkdir()
    (tmp_path / "jax_impl").mkdir()
    (tmp_path / "jax_impl" / "demo.py").write_text(CUSTOM, encoding="utf-8")
    sites = selfcheck.find_sites(tmp_path)
    assert [(s.construct, s.original, s.replacement) for s in sites] == [
        ("custom backward: -g (sign flip)", "-ctx.lam", "(ctx.lam)"),
        ("custom backward: clip", "g.clamp(ctx.lo, ctx.hi)", "(g)"),
        ("custom backward: -g (sign flip)", "-g", "(g)"),
        ("custom backward: clip", "jax.numpy.clip(g, lo, hi)", "(g)"),
        ("hard=True (straight-through sample)", "True", "False"),
        ("hard=<switch>", 'variant == "hard"', 'not (variant == "hard")'),
    ]
    src = CUSTOM.encode()
    for s in sites:
        ast.parse(src[: s.start] + s.replacement.encode() + src[s.end :])


def test_covering_tests_for_a_scenario() -> None:
    args = selfcheck.covering_tests("basics")
    assert args[0] == "tests/test_parity.py" and "tests/test_basics.py" in args
    assert "tests/test_lint.py" not in args and args[-2] == "-k"
