"""`detach-parity show` and `detach-parity site`: alignment, pages, links, escaping, figures, exit codes."""

from __future__ import annotations

import dataclasses
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from detach_parity.shared.apps import blocks, cli, site
from detach_parity.shared.apps.common import MARKER
from detach_parity.shared.apps.site import figures
from detach_parity.shared.core import registry
from detach_parity.shared.core.runner import iter_cases

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ("basics", "linear_regression")

pytestmark = pytest.mark.xdist_group("site")


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        self.links += [v for k, v in attrs if k in ("href", "src") and v]

    def handle_data(self, data) -> None:
        self.text.append(data)


def _parse(path: Path) -> _Links:
    parser = _Links()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def _words(text: str) -> str:
    """Text without backticks and whitespace (the page splits it around <code> elements)."""
    return "".join(text.replace("`", "").split())


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    assert cli.main(["site", *SCENARIOS, SCENARIOS[0], "--out", str(out), "--quiet"]) == 0  # a repeat: one page
    return out


def test_site_pages_and_every_link_resolves(built) -> None:
    pages = sorted(p.name for p in built.glob("*.html"))
    assert pages == sorted(["index.html", *(f"{n}.html" for n in SCENARIOS)])
    # the marker lists exactly what the build wrote, so that the next build may replace it
    marker = json.loads((built / MARKER).read_text(encoding="utf-8"))
    assert sorted(marker["files"]) == sorted(
        p.relative_to(built).as_posix() for p in built.rglob("*") if p.is_file() and p.name != MARKER
    )
    checked = 0
    for page in built.glob("*.html"):
        for link in _parse(page).links:
            if link.startswith(("data:", "#")):
                continue
            assert "://" not in link, f"{page.name}: external link {link}"
            target = built / link.split("#")[0]
            assert target.is_file(), f"{page.name}: {link} does not resolve"
            checked += 1
    assert checked >= 12
    for name in SCENARIOS:
        svg = (built / "figures" / f"{name}-grad-norms.svg").read_text(encoding="utf-8")
        assert "<svg" in svg and name in svg


def test_index_verdicts_claims_and_cheat_sheet(built) -> None:
    text = _words(" ".join(_parse(built / "index.html").text))
    n = len(list(iter_cases(list(SCENARIOS))))
    assert f"{n}cases" in text and f"{n}/{n}passed" in text
    for name in SCENARIOS:
        spec = registry.get(name)
        for note in (spec.porting.torch, spec.porting.jax, spec.porting.trap, spec.source, *spec.claims):
            assert _words(note) in text, f"{name}: {note!r} missing from the index"
        assert f"tests/test_parity.py-k{name}" in text and f"tests/test_{name}.py" in text
    assert text.count("PASS") == len(SCENARIOS)


def test_scenario_page_aligns_code_and_marks_grad_flow(built) -> None:
    html = (built / "basics.html").read_text(encoding="utf-8")
    rows = blocks.aligned_rows("basics")
    assert [r.name for r in rows] == [
        blocks.HEADER,
        "forward",
        "loss_via_z",
        "loss_total",
        "gradients",
        "step_calls",
        "make_step",
        "run",
    ]
    assert html.count('class="cell torch"') == html.count('class="cell jax"') == len(rows)
    tags = sum(
        len(re.findall(r"#\s*GRAD-FLOW:", (ROOT / f"{fw}_impl" / "basics.py").read_text(encoding="utf-8")))
        for fw in ("torch", "jax")
    )
    assert html.count('<span class="hll">') == tags == 2
    assert re.search(r'<span class="hll">.*y</span><span class="o">\.</span><span class="n">detach</span>', html)
    assert "z_stopped" in html and "float64" in html and "figures/basics-grad-norms.svg" in html


def test_templates_escape_registry_text() -> None:
    spec = dataclasses.replace(
        registry.get("basics"), title="<script>alert(1)</script>", lesson="a < b & `x<y>`", source="A1 <b>"
    )
    page = site.Page(spec, [], blocks.aligned_rows("basics"))
    env = site.environment()
    for html in (site.render_index(env, [page]), site.render_scenario(env, page)):
        assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
        assert "<b>" not in html and "A1 &lt;b&gt;" in html
        assert "a &lt; b &amp; <code>x&lt;y&gt;</code>" in html
        assert "NOT RUN" in html


def test_show_prints_both_columns_and_marks_grad_flow(capsys) -> None:
    assert cli.main(["show", "basics", "--variant", "z_stopped"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any("torch_impl/basics.py" in line and "jax_impl/basics.py" in line for line in lines)
    marked = [line for line in lines if "❱" in line and "│" in line]
    assert len(marked) == 1 and marked[0].count("❱") == 2
    assert "y.detach()" in marked[0] and "jax.lax.stop_gradient(y)" in marked[0]
    out = "\n".join(lines)
    assert "grads/x_via_z zero" in out and "4/4 cases passed" in out
    assert re.search(r"│ z_stopped\s+│ random", out) and not re.search(r"│ none\s+│", out)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["show", "nope"], "scenario expected one of ['basics',"),
        (["show", "basics", "--variant", "zz"], "variant expected one of ['z_stopped', 'none'], got 'zz'"),
        (["site", "nope", "--out", "{tmp}"], "scenario expected one of ['basics',"),
    ],
)
def test_bad_names_exit_2(argv, message, tmp_path, capsys) -> None:
    assert cli.main([a.format(tmp=tmp_path) for a in argv]) == 2
    assert message in capsys.readouterr().err.replace("\n", "")
    assert not (tmp_path / "index.html").exists()


def test_site_marks_a_failing_case_and_exits_1(monkeypatch, tmp_path, capsys) -> None:
    from detach_parity.torch_impl import basics

    real = basics.run
    monkeypatch.setattr(basics, "run", lambda fx, v: {**real(fx, v), "z": real(fx, v)["z"] + 1e-3})
    assert cli.main(["site", "basics", "--out", str(tmp_path), "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "✗ basics[none]" in out and "[red]" not in out
    index = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert 'class="verdict fail">FAIL</span> 0/8' in index
    assert "max|jax-torch|" in (tmp_path / "basics.html").read_text(encoding="utf-8")


def test_split_blocks_keeps_private_helpers_with_their_user() -> None:
    src = '"""doc."""\n\nimport x\n\nK = 1\n\n\ndef _h():\n    pass\n\n\ndef f():\n    pass\n\n\n_g = 2\n\n\n@dec\nclass C:\n    pass\n'
    cut = blocks.split_blocks(src)
    assert [(b.name, b.start, len(b.lines)) for b in cut] == [
        (blocks.HEADER, 1, 5),
        ("f", 8, 6),
        ("C", 16, 6),
    ]
    rows = blocks.align(cut, [cut[0], cut[2], blocks.Block("extra", 1, ("def extra(): ...",))])
    assert [(r.name, r.torch is not None, r.jax is not None) for r in rows] == [
        (blocks.HEADER, True, True),
        ("f", True, False),
        ("C", True, True),
        ("extra", False, True),
    ]


def _outs(keys_by_variant: dict[str, dict[str, np.ndarray]]):
    return keys_by_variant, {v: {k: a.copy() for k, a in o.items()} for v, o in keys_by_variant.items()}


def test_special_figures_by_output_keys(tmp_path) -> None:
    t_len = 6
    tb = {}
    for k in (1, t_len):
        g = np.ones((t_len, 2))
        g[: t_len - k] = 0
        steps = {f"rnn/grads_last/x/t{t:02d}": g[t] for t in range(t_len)}
        tb[f"k={k}"] = {"rnn/grads/x": g, "rnn/grads/w": np.ones(3), **steps}
    made = figures.figures_for("rnn_demo", *_outs(tb), tmp_path, time_fields={"x"})
    assert [f.kind for f in made] == ["time", "grad-norms"]
    profiles = figures._time_profiles(tb["k=1"], {"x"})
    assert sorted(profiles) == ["rnn/grads/x", "rnn/grads_last/x"]
    assert profiles["rnn/grads_last/x"].tolist() == [0, 0, 0, 0, 0, np.sqrt(2)]
    assert list(figures.grad_groups(sorted(tb["k=1"]))) == ["rnn/w", "rnn/x"]  # per-step leaves left out
    maml = {
        "second_order": {"meta_grads/theta": np.array([1.0, 2.0])},
        "first_order": {"meta_grads/theta": np.array([1.0, 1.5])},
    }
    assert [f.kind for f in figures.figures_for("meta_demo", *_outs(maml), tmp_path)] == ["meta"]
    plain = figures.figures_for("plain", *_outs({"a": {"target/w": np.ones(2)}}), tmp_path)
    assert [f.kind for f in plain] == ["output-norms"]
    for f in [*made, *plain, figures.FigureFile("figures/meta_demo-meta.svg", "", "meta")]:
        assert "<svg" in (tmp_path / f.path).read_text(encoding="utf-8")
    # no float output at all: nothing is drawn, nothing is claimed
    assert figures.figures_for("ints", *_outs({"a": {"count": np.array(3)}}), tmp_path) == []


def test_show_failure_lines_are_plain_text(monkeypatch, capsys) -> None:
    from detach_parity.torch_impl import basics

    real = basics.run
    monkeypatch.setattr(basics, "run", lambda fx, v: {**real(fx, v), "z": real(fx, v)["z"] + 1e-3})
    assert cli.main(["show", "basics", "--variant", "none"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"^✗ basics\[none\]", out, re.M) and "[red]" not in out and "0/4 cases passed" in out
