"""A verdict only on evidence that can show the difference (issue 26, item 5): steps that moved nothing are
not called a match; a leaf whose true gradient is zero is judged as such, not by the rounding Adam scales to lr;
the float64 floor scales with the quantity."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
from detach_parity import check_port
from detach_parity.shared.apps.check.match import PortInputError
from detach_parity.shared.apps.check.noise import DRIFT, NOISE64
from detach_parity.shared.apps.check.ports import case
from detach_parity.shared.apps.cli import main
from flax import nnx
from torch import nn

RNG = np.random.default_rng(11)
BATCH = {"x": RNG.normal(size=(4, 3)), "y": RNG.normal(size=(4, 2))}
EVERY = 8  # micro-batches per update
# FILE.py for the CLI: the worked CNN port under the names the README documents
PORT_FILE = """
from detach_parity.torch_impl.backend.ports import cnn as torch_cnn
from detach_parity.jax_impl.backend.ports import cnn as jax_cnn

torch_model = torch_cnn.build()
jax_model = jax_cnn.build("correct", **torch_cnn.SIZES["small"])
batch = torch_cnn.batch()
torch_loss, jax_loss = torch_cnn.loss, jax_cnn.loss
"""


def torch_loss(m, b):
    return ((m(b["x"]) - b["y"]) ** 2).mean()


def jax_loss(m, b):
    return jnp.mean((m(b["x"]) - b["y"]) ** 2)


def torch_accumulating():
    """(loss / n).backward() on each micro-batch, one SGD step every EVERY calls (the optimizer of each model)."""
    state = {}

    def step(model, batch):
        opt, calls, _ = state.setdefault(id(model), [torch.optim.SGD(model.parameters(), lr=0.1), 0, model])
        loss = torch_loss(model, batch)
        (loss / EVERY).backward()
        state[id(model)][1] = calls = calls + 1
        if calls % EVERY == 0:
            opt.step()
            opt.zero_grad()
        return loss.detach()

    return step


def jax_accumulating(mean: bool):
    """optax.MultiSteps over EVERY micro-batches; use_grad_mean=False sums where torch averages (the bug). Its
    accumulator in the model's dtype: MultiSteps accumulates in float32 unless told (grad_accumulation's lesson)."""
    optimizers = {}

    def step(model, batch):
        dtype = model.kernel.get_value().dtype
        tx = optax.MultiSteps(optax.sgd(0.1), every_k_schedule=EVERY, use_grad_mean=mean, accumulator_dtype=dtype)
        opt = optimizers.setdefault(id(model), (model, nnx.Optimizer(model, tx, wrt=nnx.Param)))[
            1
        ]  # the model kept: its id is never reused
        loss, grads = nnx.value_and_grad(jax_loss)(model, batch)
        opt.update(model, grads)
        return loss

    return step


def _check(mean: bool, steps: int):
    return check_port(
        nn.Linear(3, 2), nnx.Linear(3, 2, rngs=nnx.Rngs(0)), BATCH, torch_loss=torch_loss, jax_loss=jax_loss,
        torch_step=torch_accumulating(), jax_step=jax_accumulating(mean), steps=steps,
    )  # fmt: skip


def test_steps_that_moved_no_weight_are_not_called_a_match() -> None:
    """Five steps of an eight-micro-batch accumulation update nothing on either side: a port that sums where
    torch averages has the same five steps as a correct one, and neither is a match of the update."""
    for mean in (True, False):
        report = _check(mean, steps=5)
        assert report.verdict() == "match, steps unchecked" and report.unmoved == 5, report.table()
        text = report.table()
        assert "none of the 5 steps moved a trainable weight" in text and "no update" in text
        assert "the update is unchecked" in text and report.to_json()["verdict"] == "match, steps unchecked"
        assert [s["unchecked"] for s in report.summary() if s["section"] == "steps"] == [True, True]
    # steps past the accumulation: the update happens, the correct port matches and the sum differs
    assert _check(True, steps=EVERY).verdict() == "match"
    summed = _check(False, steps=EVERY)
    assert summed.verdict() == "differs" and summed.first_parting().step == EVERY, summed.table()


def test_the_float64_floor_scales_with_the_quantity() -> None:
    """Outputs of about 1e-7, a squared loss of about 1e-14: the fixed floor (atol 1e-12) passed a port that sums
    the squared errors where torch averages them (8 of them: 8 times the loss and every gradient). The floor at
    the quantity's scale catches it at the loss, and the averaging port still matches."""
    tiny = {"x": RNG.normal(size=(4, 3)) * 1e-7, "y": np.zeros((4, 2))}

    def check(reduce):
        return check_port(
            nn.Linear(3, 2, bias=False), nnx.Linear(3, 2, use_bias=False, rngs=nnx.Rngs(0)), tiny,
            torch_loss=torch_loss, jax_loss=lambda m, b: reduce((m(b["x"]) - b["y"]) ** 2), steps=0,
        )  # fmt: skip

    good, bad = check(jnp.mean), check(jnp.sum)
    assert good.verdict() == "match", good.table()
    loss = next(r for r in bad.rows if r.section == "loss" and r.dtype == "float64")
    assert 0 < loss.max_abs < 1e-12, loss  # 7 times a loss of ~1e-14: under the old floor, it used to match
    assert bad.verdict() == "differs" and bad.first_parting().section == "loss", bad.table()
    assert {r.section for r in bad.failed("float64")} == {"loss", "grads"}


def test_a_bias_before_a_train_mode_batchnorm_is_judged_by_its_true_gradient_zero() -> None:
    """The shipped correct `cnn` port under Adam at lr 0.1: its conv biases feed a train-mode BatchNorm, so
    their true gradient is zero and each framework hands Adam its own rounding, which Adam scales to lr (float64:
    1e-9 apart; float32: 0.6 apart, and BatchNorm's running means follow the biases). Judged as zero, it matches."""
    args = case("cnn")
    report = check_port(
        args["torch_model"], args["jax_model"], args["batch"], torch_loss=args["torch_loss"],
        jax_loss=args["jax_loss"], torch_optimizer=lambda params: torch.optim.Adam(params, lr=0.1),
        jax_optimizer=optax.adam(0.1), steps=3,
    )  # fmt: skip
    assert report.ok, report.table()
    why = {r.explained for r in report.explained}
    assert {NOISE64.split(":")[0], "float32 steps", "steps"} == {w.split(":")[0] for w in why}, why
    noisy = {r.key for r in report.explained if r.explained.startswith("float64 steps")}
    assert noisy == {"conv1/bias", "conv2/bias"}, noisy  # the two biases before BatchNorm, and nothing else
    assert {r.key for r in report.explained if r.explained == DRIFT} <= {"bn1/mean", "bn2/mean"}


# --- misdiagnoses ended (item 5e) ----------------------------------------------------------------------------


def test_a_folder_named_like_a_worked_port_does_not_shadow_it(tmp_path, monkeypatch, capsys) -> None:
    """`detach-parity check cnn:fc_layout` beside a folder named `cnn` checks the worked port (it read the folder
    as FILE and refused it: "expected one of ['cnn', ...], got 'cnn'")."""
    (tmp_path / "cnn").mkdir()
    monkeypatch.chdir(tmp_path)
    assert main(["check", "cnn:fc_layout", "--steps", "0"]) == 1
    out = capsys.readouterr()
    assert "hint: [P07]" in out.out and "expected one of" not in out.err


def test_a_helper_named_after_an_optional_name_is_the_files_own(tmp_path, capsys) -> None:
    """jax_steps_per_epoch is a helper of the file, not a misspelt jax_step (jax_steps still is one)."""
    port = tmp_path / "my_port.py"
    port.write_text(PORT_FILE + "jax_steps_per_epoch = 100\ntorch_optimizer_lr = 0.1\n")
    assert main(["check", str(port), "--steps", "0"]) == 0, capsys.readouterr().err
    port.write_text(PORT_FILE + "jax_steps = 100\n")
    assert main(["check", str(port), "--steps", "0"]) == 2
    assert "defines 'jax_steps', which check does not read: did you mean 'jax_step'?" in capsys.readouterr().err


def test_a_leaf_torch_never_trains_is_no_padding_row() -> None:
    """A torch model frozen whole against a port that trains: a flow difference (missing stop), and no P11
    'embedding padding row' hint on a Linear whose every row torch leaves without a gradient."""
    frozen = nn.Linear(3, 2).requires_grad_(False)
    report = check_port(frozen, nnx.Linear(3, 2, rngs=nnx.Rngs(0)), BATCH, torch_loss=torch_loss, jax_loss=jax_loss,
                        steps=0)  # fmt: skip
    assert report.verdict() == "differs" and "P11" not in report.named(), report.table()
    assert {f.keys for f in report.mismatches} == {"bias", "kernel"} or report.mismatches, report.table()


@pytest.mark.parametrize("side", ["torch", "jax"])
def test_an_update_that_raises_is_the_optimizers_error_not_the_loss(side: str) -> None:
    """The checker's own optimizer step: an error in the update names the optimizer, not the user's loss."""

    class Broken(torch.optim.SGD):
        def step(self, closure=None):
            raise RuntimeError("the update broke")

    def broken_update(updates, state, params=None):
        raise RuntimeError("the update broke")

    optimizers = {
        "torch_optimizer": (lambda p: Broken(p, lr=0.1)) if side == "torch" else (lambda p: torch.optim.SGD(p, lr=0.1)),
        "jax_optimizer": optax.GradientTransformation(lambda p: optax.EmptyState(), broken_update)
        if side == "jax"
        else optax.sgd(0.1),
    }
    with pytest.raises(PortInputError, match=f"^{side}_optimizer: the update raised RuntimeError: the update broke"):
        check_port(nn.Linear(3, 2), nnx.Linear(3, 2, rngs=nnx.Rngs(0)), BATCH, torch_loss=torch_loss,
                   jax_loss=jax_loss, steps=1, **optimizers)  # fmt: skip


def test_ids_beyond_int32_are_refused_for_the_float32_pass_not_blamed_on_it() -> None:
    """JAX without x64 keeps integers in int32: ids above 2**31 - 1 would wrap in the float32 pass, and the
    difference read as float32 rounding. Refused by name; the float64 pass alone checks them."""

    class Hashed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(7, 2)

        def forward(self, ids):
            return self.embed(ids % 7)

    class HashedPort(nnx.Module):
        def __init__(self) -> None:
            self.embed = nnx.Embed(7, 2, rngs=nnx.Rngs(0))

        def __call__(self, ids):
            return self.embed(ids % 7)

    batch = {"ids": np.array([3, 2**31 + 5, 2**33 + 1, 9], dtype=np.int64)}
    losses = {"torch_loss": lambda m, b: m(b["ids"]).pow(2).mean(), "jax_loss": lambda m, b: jnp.mean(m(b["ids"]) ** 2)}
    with pytest.raises(
        PortInputError, match=r"batch\['ids'\]: the float32 pass runs JAX without x64.*-2\*\*31.*8589934593"
    ):
        check_port(Hashed(), HashedPort(), batch, steps=0, **losses)
    report = check_port(Hashed(), HashedPort(), batch, steps=0, dtypes=("float64",), **losses)
    assert report.verdict() == "match", report.table()


@pytest.mark.parametrize("side", ["torch", "jax"])
def test_functional_dropout_left_on_is_refused_by_name(side: str) -> None:
    """F.dropout(x, p) trains by default, and no module says so (the modules' check sees nn.Dropout only): two
    losses on the same weights differ, and the check refuses before reading the difference as the port's."""

    class Dropped(nn.Linear):
        def forward(self, x):
            return torch.nn.functional.dropout(super().forward(x), 0.5)  # training=True: the default

    class DroppedPort(nnx.Module):
        def __init__(self) -> None:
            self.linear, self.rngs = nnx.Linear(3, 2, rngs=nnx.Rngs(0)), nnx.Rngs(dropout=1)

        def __call__(self, x):
            return nnx.Dropout(0.5, rngs=self.rngs)(self.linear(x))

    torch_model = Dropped(3, 2) if side == "torch" else nn.Sequential(nn.Linear(3, 2))
    jax_model = DroppedPort() if side == "jax" else nnx.Sequential(nnx.Linear(3, 2, rngs=nnx.Rngs(0)))
    state = torch.random.get_rng_state()
    with pytest.raises(PortInputError, match=f"^{side}_loss: expected the same loss twice .*dropout left on"):
        check_port(torch_model, jax_model, BATCH, torch_loss=torch_loss, jax_loss=jax_loss, steps=0)
    assert torch.equal(torch.random.get_rng_state(), state)  # the user's random state, untouched


def test_a_torch_model_frozen_whole_is_a_flow_difference_at_every_step() -> None:
    """Every torch parameter frozen, K = 2 steps: the checker's own backward is skipped where the loss has no
    graph (it raised "element 0 of tensors does not require grad" at step 2, reported as the user's loss)."""
    frozen = nn.Linear(3, 2).requires_grad_(False)
    report = check_port(frozen, nnx.Linear(3, 2, rngs=nnx.Rngs(0)), BATCH, torch_loss=torch_loss, jax_loss=jax_loss,
                        torch_optimizer=lambda p: torch.optim.SGD(p, lr=0.1), jax_optimizer=optax.sgd(0.1), steps=2)  # fmt: skip
    assert report.verdict() == "differs" and report.mismatches, report.table()
    assert "torch_loss" not in report.table()  # nothing is blamed on the user's loss


def test_a_real_update_of_a_zero_gradient_bias_still_differs() -> None:
    """The bias before a train-mode BatchNorm again, with a real bug on it: the port shifts it by 0.05 a step.
    In float64 both sides' rounding nearly agrees, so the explanation covers gaps of 1e-6 of the model's scale,
    not 0.25 (it called this a match, explained)."""

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l, self.bn, self.o = nn.Linear(3, 4), nn.BatchNorm1d(4, momentum=0.0), nn.Linear(4, 2)

        def forward(self, x):
            return self.o(torch.relu(self.bn(self.l(x))))

    class Port(nnx.Module):
        def __init__(self) -> None:
            r = nnx.Rngs(0)
            self.l, self.bn, self.o = (
                nnx.Linear(3, 4, rngs=r),
                nnx.BatchNorm(4, momentum=1.0, rngs=r),
                nnx.Linear(4, 2, rngs=r),
            )

        def __call__(self, x):
            return self.o(jax.nn.relu(self.bn(self.l(x))))

    def shift_l_bias(updates, state, params=None):  # the bug: a constant step on l.bias
        return jax.tree_util.tree_map_with_path(
            lambda path, u: u - 0.05 if "'l'" in str(path) and "bias" in str(path) else u, updates
        ), state

    def check(tx):
        return check_port(Net(), Port(), BATCH, torch_loss=torch_loss, jax_loss=jax_loss,
                          torch_optimizer=lambda p: torch.optim.Adam(p, 1e-2), jax_optimizer=tx, steps=3)  # fmt: skip

    assert check(optax.adam(1e-2)).ok
    bad = check(optax.chain(optax.adam(1e-2), optax.GradientTransformation(lambda p: optax.EmptyState(), shift_l_bias)))
    assert bad.verdict() == "differs" and bad.first_parting().key == "l/bias", bad.table()


def test_a_loss_that_fails_only_when_traced_is_the_losss_error() -> None:
    """A boolean-mask loss works eagerly and fails under jit: the error names jax_loss, not the optimizer."""

    def masked(m, b):
        return jnp.mean(((m(b["x"]) - b["y"]) ** 2)[b["y"] > 0])

    with pytest.raises(PortInputError, match=r"^jax_loss\(model, batch\) raised NonConcreteBooleanIndexError"):
        check_port(nn.Linear(3, 2), nnx.Linear(3, 2, rngs=nnx.Rngs(0)), BATCH, torch_loss=torch_loss, jax_loss=masked,
                   torch_optimizer=lambda p: torch.optim.SGD(p, lr=0.1), jax_optimizer=optax.sgd(0.1), steps=1)  # fmt: skip


def test_an_optimizer_that_fails_to_build_is_named() -> None:
    """torch_optimizer raising when built, an optax init raising: bad input named (exit 2), not exit 3."""

    def broken(params):
        raise RuntimeError("cannot build")

    def broken_init(params):
        raise RuntimeError("cannot init")

    both = {"torch_loss": torch_loss, "jax_loss": jax_loss, "steps": 1}
    with pytest.raises(PortInputError, match=r"^torch_optimizer\(params\) raised RuntimeError: cannot build"):
        check_port(nn.Linear(3, 2), nnx.Linear(3, 2, rngs=nnx.Rngs(0)), BATCH, torch_optimizer=broken,
                   jax_optimizer=optax.sgd(0.1), **both)  # fmt: skip
    bad_init = optax.GradientTransformation(broken_init, lambda u, s, p=None: (u, s))
    with pytest.raises(PortInputError, match=r"^jax_optimizer: its init raised RuntimeError: cannot init"):
        check_port(nn.Linear(3, 2), nnx.Linear(3, 2, rngs=nnx.Rngs(0)), BATCH,
                   torch_optimizer=lambda p: torch.optim.SGD(p, lr=0.1), jax_optimizer=bad_init, **both)  # fmt: skip
