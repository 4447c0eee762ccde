"""checkpointing: the same gradients with less kept for backward; torch's reentrant form starves the block."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import case_result
from detach_parity.jax_impl import checkpointing as jc
from detach_parity.shared.apps import selfcheck
from detach_parity.shared.core import fixtures
from detach_parity.torch_impl import checkpointing as tc
from torch import nn

BLOCK = ("block/l1/kernel", "block/l1/bias", "block/l2/kernel", "block/l2/bias")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_checkpointing_changes_no_gradient(dtype: str) -> None:
    ckpt = case_result("checkpointing", "checkpoint", dtype, "random").outputs
    plain = case_result("checkpointing", "no_checkpoint", dtype, "random").outputs
    rtol = 1e-14 if dtype == "float64" else 1e-6
    for fw in ("torch", "jax"):
        for key, value in plain[fw].items():
            np.testing.assert_allclose(ckpt[fw][key], value, rtol=rtol, atol=rtol * 1e-2, err_msg=f"{fw} {key}")


@pytest.mark.parametrize("framework, impl", [("torch", tc), ("jax", jc)])
def test_checkpointing_keeps_less_for_backward(framework: str, impl) -> None:
    fx = fixtures.make("checkpointing", "float32")
    kept = {v: impl.saved_activation_bytes(fx, v) for v in ("checkpoint", "no_checkpoint")}
    assert 0 < kept["checkpoint"] < kept["no_checkpoint"], f"{framework}: {kept}"


def test_reentrant_checkpoint_gives_the_block_no_gradient_when_no_input_requires_grad() -> None:
    fx = fixtures.make("checkpointing", "float64")
    model = tc.build_model(fx)
    tokens, y = torch.tensor(np.array(fx["tokens"])), torch.tensor(np.array(fx["y"]))
    with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
        loss = tc.mse(model(tokens, "reentrant_frozen_input"), y)
    loss.backward()
    assert all(p.grad is None for p in model.block.parameters())  # not zeros: never reached
    assert all(p.grad is not None for p in model.head.parameters())
    # the cause: unfreeze the embedding (an input of the block now requires grad) and the block trains again
    model = tc.build_model(fx)
    model.embed.embedding = nn.Parameter(torch.tensor(np.array(fx["params/embed/embedding"])))
    tc.mse(model(tokens, "reentrant_frozen_input"), y).backward()
    true = case_result("checkpointing", "checkpoint", "float64", "random").outputs["torch"]
    np.testing.assert_allclose(model.block.l1.bias.grad.numpy(), true["grads/block/l1/bias"], rtol=1e-13)
    jax_side = case_result("checkpointing", "reentrant_frozen_input", "float64", "random").outputs["jax"]
    for k in BLOCK:  # JAX has no reentrant mode: nnx.remat's gradient is the true one
        np.testing.assert_allclose(jax_side[f"grads/{k}"], true[f"grads/{k}"], rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("impl", [tc, jc], ids=["torch", "jax"])
def test_predictions_of_another_shape_are_refused(impl) -> None:
    lib = torch.tensor if impl is tc else jnp.asarray
    with pytest.raises(ValueError, match=r"mse: pred has shape \(4, 1\) but y has shape \(4,\)"):
        impl.mse(lib(np.zeros((4, 1))), lib(np.zeros(4)))
    fx = fixtures.make("checkpointing", "float32")
    with pytest.raises(ValueError, match="variant expected one of"):
        impl.build_model(fx)(lib(np.array(fx["tokens"])), "remat")


def test_selfcheck_finds_the_checkpoint_sites(tmp_path) -> None:
    """torch checkpoint(f, *args) -> f(*args), use_reentrant flipped, nnx.remat(f) -> f: each a mutant."""
    for side in ("torch_impl", "jax_impl"):
        (tmp_path / side).mkdir()
    src = "y = checkpoint(block, h, use_reentrant=False)\nz = checkpoint(block, h, use_reentrant=r)\nw = nnx.remat(call)(block, h)\n"
    (tmp_path / "torch_impl" / "demo.py").write_text(src, encoding="utf-8")
    found = [(s.construct, s.original, s.replacement) for s in selfcheck.find_sites(tmp_path)]
    assert found == [
        ("torch checkpoint(f, *args)", "checkpoint(block, h, use_reentrant=False)", "block(h)"),
        ("use_reentrant=False", "False", "True"),
        ("torch checkpoint(f, *args)", "checkpoint(block, h, use_reentrant=r)", "block(h)"),
        ("use_reentrant=<switch>", "r", "not (r)"),
        ("nnx.remat(f)", "nnx.remat(call)", "(call)"),
    ]
