"""ports.html: the worked ports' reports, rendered from real check_port results (shared/apps/site/ports.py)."""

from __future__ import annotations

import numpy as np
from detach_parity.shared.apps.check import check_port
from detach_parity.shared.apps.site import environment
from detach_parity.shared.apps.site.ports import PortPage, render_ports
from flax import nnx
from torch import nn


class _T(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        return self.fc(x)


class _J(nnx.Module):
    def __init__(self) -> None:
        self.fc = nnx.Linear(3, 2, rngs=nnx.Rngs(0))

    def __call__(self, x):
        return self.fc(x)


def test_ports_page_shows_the_report_and_the_named_bug() -> None:
    batch = {"x": np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)}
    loss = lambda m, b: (m(b["x"]) ** 2).mean()  # noqa: E731
    good = check_port(_T(), _J(), batch, torch_loss=loss, jax_loss=loss, steps=0)
    bad = check_port(
        _T(), _J(), batch, torch_loss=loss, jax_loss=lambda m, b: 2 * loss(m, b), steps=0, dtypes=("float64",)
    )
    html = render_ports(environment(), [PortPage("tiny<port>", good, [("double", "P99", bad)])])
    assert 'id="table-tiny&lt;port&gt;-correct"' in html and "<port>" not in html  # autoescaped
    assert html.count("<tr>") == 1 + len(good.summary()) + 1 + 1
    assert "float64</td><td>grads" in html and "matches" in html
    assert "tiny&lt;port&gt;:double" in html and "unexplained" in html and "loss loss" in html
