"""dp_sync_batchnorm: synchronised statistics give the single-device gradient, per-device ones do not;
why the torch side all-reduces the statistics itself on the CPU; nnx.BatchNorm's float32 statistics."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.distributed as dist
from conftest import case_result
from detach_parity.shared.core import fixtures
from detach_parity.shared.core.runner import lesson
from flax import nnx

NAME = "dp_sync_batchnorm"


def _max(out: dict, prefix: str) -> float:
    return max(float(np.max(np.abs(v))) for k, v in out.items() if k.startswith(prefix))


def test_synchronised_statistics_are_the_full_batch_and_per_device_ones_are_not() -> None:
    sync = case_result(NAME, "sync_batchnorm", "float64", "random")
    local = case_result(NAME, "local_batchnorm", "float64", "random")
    fx = fixtures.make(NAME, "float64")
    for framework in ("torch", "jax"):
        with jax.enable_x64(True):  # one device, in this process: plain BatchNorm over all B rows
            full = lesson(framework, NAME).full_batch_grads(fx)
        for key, g in full.items():
            np.testing.assert_allclose(sync.outputs[framework][f"grads/{key}"], g, rtol=1e-11, atol=1e-14)
        assert _max(local.outputs[framework], "gap/") > 1e-3
        assert _max(local.outputs[framework], "rank_gap/") > 1e-3  # each rank keeps its own running mean
        # the same running mean on rank 0 only if its shard's mean were the batch's
        assert not np.allclose(sync.outputs[framework]["running/mean"], local.outputs[framework]["running/mean"])


def test_torch_sync_batchnorm_refuses_cpu_tensors(tmp_path) -> None:
    # why torch_impl/dp_sync_batchnorm.py all-reduces the statistics itself on gloo (torch 2.13)
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        bn = torch.nn.SyncBatchNorm(3)
        with pytest.raises(ValueError, match="SyncBatchNorm expected input tensor to be on GPU"):
            bn(torch.randn(4, 3))
    finally:
        dist.destroy_process_group()
    assert not dist.is_initialized()


def test_nnx_batchnorm_keeps_float32_statistics_whatever_param_dtype() -> None:
    # why jax_impl/dp_sync_batchnorm.py sets them in the fixture's dtype
    with jax.enable_x64(True):
        bn = nnx.BatchNorm(3, param_dtype=jnp.float64, dtype=jnp.float64, rngs=nnx.Rngs(0))
        assert bn.scale[...].dtype == jnp.float64 and bn.mean[...].dtype == jnp.float32


def test_bad_input_is_refused_with_the_field_named() -> None:
    good = dict(fixtures.make(NAME, "float64", seed=0))
    two = {k: (v[:2] if v.ndim and v.shape[0] == len(good["x"]) else v) for k, v in good.items()}
    with pytest.raises(ValueError, match=r"field 'x': B = 2 expected divisible by the 2 ranks with >= 2 rows per rank"):
        fixtures.from_arrays(NAME, two)
