"""The mutation self-check finds the data-parallel constructs the data_parallel family relies on."""

from __future__ import annotations

import ast
import textwrap

from detach_parity.shared.apps import selfcheck

SOURCE = textwrap.dedent(
    '''
    import jax, torch
    import torch.distributed._functional_collectives as funcol
    from torch.nn.parallel import DistributedDataParallel
    def f(model, mesh, x, variant, nnx):
        """é: non-ASCII text before the sites checks byte offsets."""
        a = DistributedDataParallel(model, find_unused_parameters=True)
        b = DistributedDataParallel(model, static_graph=True)
        with a.no_sync():
            pass
        c = jax.lax.pmean(x, "data")
        d = jax.lax.psum(x * 2, "data")
        e = funcol.all_reduce(x.sum(dim=0), "sum", mesh)
        bn = nnx.BatchNorm(3, axis_name="data")
        keep = DistributedDataParallel(model, find_unused_parameters=False)  # not a site: nothing to remove
    '''
)


def test_find_sites_of_the_data_parallel_constructs(tmp_path) -> None:
    (tmp_path / "torch_impl").mkdir()
    (tmp_path / "jax_impl").mkdir()
    (tmp_path / "torch_impl" / "demo.py").write_text(SOURCE, encoding="utf-8")
    sites = selfcheck.find_sites(tmp_path)
    assert [(s.construct, s.original, s.replacement) for s in sites] == [
        ("find_unused_parameters=True", "True", "False"),
        ("static_graph=True", "True", "False"),
        ("ddp.no_sync()", "a.no_sync()", '__import__("contextlib").nullcontext()'),
        ("jax.lax.pmean(x, axis)", "jax.lax.pmean", "jax.lax.psum"),
        ("jax.lax.psum(x, axis)", 'jax.lax.psum(x * 2, "data")', "(x * 2)"),
        ("funcol.all_reduce(x)", 'funcol.all_reduce(x.sum(dim=0), "sum", mesh)', "(x.sum(dim=0))"),
        ("axis_name='data' (statistics over the devices)", '"data"', "None"),
    ]
    assert [s.kind for s in sites].count("arith") == 1  # pmean -> psum changes the arithmetic, the rest a stop
    src = SOURCE.encode()
    for s in sites:
        assert src[s.start : s.end].decode() == s.original  # byte offsets survive the non-ASCII docstring
        ast.parse(src[: s.start] + s.replacement.encode() + src[s.end :])  # every mutant is valid Python


def test_every_data_parallel_pair_has_sites_on_both_sides() -> None:
    modules = ("dp_allreduce_mean", "dp_frozen_unused", "dp_no_sync", "dp_sync_batchnorm", "dp_stop_global_stat")
    sites = selfcheck.find_sites()
    for module in modules:
        for side in ("torch_impl", "jax_impl"):
            assert any(s.module == module and s.path.startswith(side) for s in sites), f"{side}/{module}.py: no site"
    constructs = {s.construct for s in sites if s.module in modules}
    assert {
        "ddp.no_sync()",
        "find_unused_parameters=True",
        "jax.lax.pmean(x, axis)",
        "funcol.all_reduce(x)",
    } <= constructs
