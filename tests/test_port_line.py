"""Name the line: where a check parts, the report gives the port's line that computes what torch never did,
the torch line whose value is the port's at that place, and how the two relate where it is simple.

The ports here are written in this file, so every expected line is a line of this file (found by its text).
"""

from __future__ import annotations

import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
from detach_parity import check_port
from detach_parity.shared.apps.check.line import locate, parting, twins
from detach_parity.shared.apps.check.named_line import optimizer_line
from detach_parity.shared.apps.check.relation import relation
from flax import nnx
from torch import nn

D, H = 8, 2
THIS = os.path.basename(__file__)


def line_of(text: str) -> int:
    """The first line of this file holding `text` (the ports come before the tests that name their lines)."""
    found = [i for i, line in enumerate(open(__file__, encoding="utf-8"), start=1) if text in line]
    assert found, text
    return found[0]


class TorchAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(D, D) for _ in range(4))

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, H, D // H).transpose(1, 2)
        k = self.k(x).view(b, t, H, D // H).transpose(1, 2)
        v = self.v(x).view(b, t, H, D // H).transpose(1, 2)
        scores = q @ k.transpose(-1, -2) / math.sqrt(D // H)  # torch: the scores
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        w = scores.softmax(-1)
        out = (w @ v).transpose(1, 2).reshape(b, t, D)
        return x + self.o(out)


class TorchNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn, self.norm, self.head = TorchAttention(), nn.LayerNorm(D), nn.Linear(D, 3)

    def forward(self, x):
        return self.head(self.norm(self.attn(x)))


class JaxAttention(nnx.Module):
    def __init__(self, rngs, bug: str = "") -> None:
        self.q, self.k, self.v, self.o = (nnx.Linear(D, D, rngs=rngs) for _ in range(4))
        self.bug = bug

    def __call__(self, x):
        b, t, _ = x.shape
        q = self.q(x).reshape(b, t, H, D // H)
        k = self.k(x).reshape(b, t, H, D // H)
        v = self.v(x).reshape(b, t, H, D // H)
        if self.bug == "scale":
            scores = jnp.einsum("bthd,bshd->bhts", q, k) / (D // H)  # port: scaled by d
        else:
            scores = jnp.einsum("bthd,bshd->bhts", q, k) / jnp.sqrt(D // H)
        k_diag = 1 if self.bug == "diagonal" else 0
        causal = jnp.tril(jnp.ones((t, t), bool), k=k_diag)  # port: the causal mask
        scores = jnp.where(causal, scores, -jnp.inf)
        w = jax.nn.softmax(scores, -1)
        if self.bug == "stop":
            w = jax.lax.stop_gradient(w)  # port: a stop torch does not have
        out = jnp.einsum("bhts,bshd->bthd", w, v).reshape(b, t, D)
        if self.bug == "residual":
            return self.o(out)  # port: the residual left out
        return x + self.o(out)


class JaxNet(nnx.Module):
    def __init__(self, bug: str = "") -> None:
        rngs = nnx.Rngs(0)
        self.attn, self.norm = JaxAttention(rngs, bug), nnx.LayerNorm(D, epsilon=1e-5, rngs=rngs)
        self.head = nnx.Linear(D, 3, rngs=rngs)

    def __call__(self, x):
        return self.head(self.norm(self.attn(x)))


BATCH = {"x": np.random.default_rng(0).normal(size=(2, 4, D)), "label": np.array([0, 2])}


def torch_loss(model, batch):
    return nn.functional.cross_entropy(model(batch["x"]).mean(1), batch["label"])


def jax_loss(model, batch):
    logits = model(batch["x"]).mean(1)
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()


def sum_loss(model, batch):
    logits = model(batch["x"]).mean(1)
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).sum()  # port: sum for mean


def _check(bug: str = "", loss=jax_loss, **kwargs):
    torch.manual_seed(0)
    return check_port(TorchNet(), JaxNet(bug), BATCH, torch_loss=torch_loss, jax_loss=loss, steps=0,
                      dtypes=("float64",), **kwargs)  # fmt: skip


def test_a_correct_port_has_no_line() -> None:
    report = _check()
    assert report.ok and report.line is None, report.table()
    assert "line" in report.profile["stages"]  # the stage ran, and found nothing to name


def test_a_wrong_attention_scale_is_its_line_with_torchs_line_and_the_factor() -> None:
    report = _check("scale")
    found = report.line
    assert found is not None and found["module"] == "attn", report.table()
    assert os.path.basename(found["port"][0]) == THIS and found["port"][1] == line_of("# port: scaled by d")
    assert found["torch"][1] == line_of("# torch: the scores") and found["inputs"][0][1] == line_of(
        "# torch: the scores"
    )
    assert found["relation"] == "the same up to a factor 0.5 everywhere"
    sentence = next(x for x in report.lines() if x.startswith("float64: the port parts at"))
    assert f"{THIS}:{line_of('# port: scaled by d')}" in sentence and "a factor 0.5" in sentence


def test_a_causal_diagonal_off_by_one_is_its_mask_line_and_a_shift() -> None:
    found = _check("diagonal").line
    assert found is not None and found["port"][1] == line_of("# port: the causal mask"), found
    # tril(k=1)'s row i is tril(k=0)'s row i + 1: the diagonal moved by one
    assert found["relation"] == "shifted by one along axis 0: the port's [i] is torch's [i + 1]"


def test_a_residual_the_port_leaves_out_is_found_in_the_module_around_the_parting_one() -> None:
    report = _check("residual")
    found = report.line
    assert found is not None and found["port"][1] == line_of("# port: the residual left out"), report.table()
    assert found["module"] == "attn"


def test_a_loss_bug_is_the_losss_line() -> None:
    report = _check(loss=sum_loss)
    assert report.first_parting("float64").section == "loss"
    found = report.line
    assert found is not None and found["module"] == "(loss)" and found["port"][1] == line_of("# port: sum for mean")
    assert found["relation"] == "the same up to a factor 2 everywhere"


def test_a_stop_gradient_under_a_matching_forward_is_its_line() -> None:
    report = _check("stop")
    assert not report.failed("float64", "outputs") and report.failed("float64", "grads")
    found = report.line
    assert found is not None and found.get("backward") and found["port"][1] == line_of("# port: a stop torch"), found
    assert any(x.startswith("float64: the gradient parts at") for x in report.lines())


MLP = {"x": np.random.default_rng(1).normal(size=(5, 3)), "y": np.ones((5, 2))}


def _optimizer_check(torch_optimizer, jax_optimizer):
    torch.manual_seed(0)
    t = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    j = nnx.Sequential(nnx.Linear(3, 4, rngs=nnx.Rngs(0)), jnp.tanh, nnx.Linear(4, 2, rngs=nnx.Rngs(1)))
    return check_port(t, j, MLP, torch_loss=lambda m, b: ((m(b["x"]) - b["y"]) ** 2).mean(),
                      jax_loss=lambda m, b: jnp.mean((m(b["x"]) - b["y"]) ** 2), torch_optimizer=torch_optimizer,
                      jax_optimizer=jax_optimizer, steps=2, dtypes=("float64",))  # fmt: skip


@pytest.mark.parametrize(
    ("torch_optimizer", "jax_optimizer", "part", "path", "after"),
    [
        (lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1),
         optax.chain(optax.add_decayed_weights(0.1), optax.adam(1e-2)), "add_decayed_weights", [0], "the gradients"),
        (lambda p: torch.optim.Adam(p, lr=1e-2), optax.adam(1e-2, eps=0.0, eps_root=1e-8), "scale_by_adam", [0],
         "the gradients"),
        (lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1), optax.adam(1e-2), "scale", [1], "Adam's moments"),
        (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True), optax.sgd(0.1, momentum=0.9), "scale",
         [1], "the gradients"),
    ],
)  # fmt: skip
def test_an_optimizer_part_that_torchs_optimizer_never_computes_is_named(torch_optimizer, jax_optimizer, part, path,
                                                                          after) -> None:  # fmt: skip
    report = _optimizer_check(torch_optimizer, jax_optimizer)
    assert report.first_parting("float64").section == "steps" and not report.failed("float64", "grads")
    found = report.line
    assert found is not None and found["optimizer"] == part and found["path"] == path, report.table()
    assert found["after"].startswith(after)


def test_the_cli_gives_the_optimizer_line_of_the_check_file(tmp_path) -> None:
    file = tmp_path / "port.py"
    file.write_text(
        "import optax\n"
        "tx = optax.chain(\n"
        "    optax.clip(0.5),\n"
        "    optax.adamw(1e-3, weight_decay=0.1),\n"
        ")\n"
        "jax_optimizer = (tx, None)\n"
    )
    assert optimizer_line(str(file), [1, 1]) == [str(file), 4, "optax.adamw(1e-3, weight_decay=0.1),"]
    assert optimizer_line(str(file), [0]) == [str(file), 3, "optax.clip(0.5),"]
    assert optimizer_line(str(file), []) == [str(file), 2, "tx = optax.chain("]
    assert optimizer_line(str(tmp_path / "none.py"), [0]) == ["?", 0, ""]


def test_relations_are_said_where_simple_and_only_there() -> None:
    rng = np.random.default_rng(0)
    t = rng.normal(size=(2, 3, 4))
    assert relation(2.5 * t, t) == "the same up to a factor 2.5 everywhere"
    assert relation(-t, t) == "the same up to its sign"
    assert relation(t + 0.25, t) == "the same up to an offset 0.25 everywhere"
    assert relation(np.flip(t, 1), t) == "flipped along axis 1"
    assert relation(t[..., [1, 0, 3, 2]], t).startswith("permuted along axis 2")
    shifted = np.concatenate([t[:, :1], t[:, :-1]], axis=1)
    assert relation(shifted, t).startswith("shifted by one along axis 1")
    masked = np.where(np.arange(4) < 2, t, 0.0)
    assert relation(masked, t).startswith("zeroed: 12 of 24")
    assert relation(t, np.where(np.arange(4) < 2, t, -np.inf)).startswith("unmasked: 12 of 24")
    assert relation(np.transpose(2 * t, (0, 2, 1)), t) == "the same up to a factor 2 everywhere"  # another layout
    assert relation(t**2, t) is None  # not simple: nothing said


def _value(v, kind="op", inputs=()):
    return {"kind": kind, "op": "x", "line": ["f.py", 1, ""], "inputs": list(inputs), "value": np.asarray(v)}


def test_values_pair_by_what_they_hold_and_a_fused_intermediate_is_sound() -> None:
    x = np.arange(6.0).reshape(2, 3)
    torch_side = [_value(x, "input"), _value(np.exp(x) / np.exp(x).sum(1, keepdims=True), inputs=[0])]
    port = [_value(x.T, "input"), _value(np.exp(x), inputs=[0]), _value(np.exp(x).sum(1), inputs=[1]),
            _value(np.exp(x) / np.exp(x).sum(1, keepdims=True), inputs=[1, 2])]  # fmt: skip
    assert twins(port, torch_side) == [0, None, None, 1]  # the transposed input is torch's
    assert parting(port, twins(port, torch_side)) is None  # exp and sum lead to torch's softmax: sound
    wrong = [*port[:3], _value(np.exp(x) / np.exp(x).sum(1, keepdims=True) * 2, inputs=[1, 2])]
    assert parting(wrong, twins(wrong, torch_side)) == 1  # nothing after exp reaches torch's: it parts there
    assert locate([_value(x + 1, "input"), _value(2 * x, inputs=[0])], torch_side) is None  # its input is no twin
