"""`detach-parity similarity`: the token ratio of each lesson pair, by hand on small texts, and the command."""

from __future__ import annotations

import json

import pytest
from detach_parity.shared.apps import cli, similarity
from detach_parity.shared.core import registry


def test_tokens_are_words_and_punctuation_with_framework_names_masked() -> None:
    src = 'y = torch.tanh(x)  # GRAD-FLOW: "why"\n'
    assert similarity.tokens(src) == [
        *("y", "=", "<framework>", ".", "tanh", "(", "x", ")"),
        *("#", "GRAD", "-", "FLOW", ":", '"', "why", '"'),
    ]
    # every masked name, and only whole words: `torches`, `jaxpr`, `Fx` stay themselves
    masked = similarity.tokens(" ".join(sorted(similarity.FRAMEWORK_NAMES)) + " torches jaxpr Fx")
    assert masked == ["<framework>"] * 11 + ["torches", "jaxpr", "Fx"]


def test_ratio_by_hand() -> None:
    assert similarity.ratio("y = torch.tanh(x)", "y = jnp.tanh(x)") == 1.0  # only the framework differs
    # a b c vs a b d: 2 matching tokens of 3 + 3, ratio 2·2 / 6
    assert similarity.ratio("a b c", "a b d") == pytest.approx(4 / 6, abs=1e-15)
    # one JAX-only line of 4 tokens after 4 shared ones: 2·4 / (4 + 8)
    assert similarity.ratio("x = f(", "x = f(\nz = g(") == pytest.approx(8 / 12, abs=1e-15)
    assert similarity.ratio("", "") == 1.0


def test_pair_ratio_reads_both_files_and_summary_goes_by_family() -> None:
    ratios = similarity.measure(["basics", "p13_where_nan", "ppo"])
    assert list(ratios) == ["basics", "p13_where_nan", "ppo"] and all(0.5 < r <= 1.0 for r in ratios.values())
    result = similarity.summary(ratios)
    assert list(result["families"]) == ["scenarios", "pitfalls", "advanced"]  # registry.FAMILIES order
    assert result["families"]["pitfalls"] == {
        "pairs": 1,
        "median": ratios["p13_where_nan"],
        "min": ratios["p13_where_nan"],
    }
    assert result["median"] == sorted(ratios.values())[1] and result["pairs"] == 3
    with pytest.raises(ValueError, match="summary: ratios expected at least one pair, got none"):
        similarity.summary({})


def test_the_project_keeps_its_pairs_side_by_side() -> None:
    """The mirror's target (issue 24): the median pair reads at least 0.75 side by side (CleanRL's dqn pair: 0.81)."""
    result = similarity.summary(similarity.measure(registry.names()))
    assert result["pairs"] == len(registry.SCENARIOS) and result["median"] >= 0.75, result


def test_command_table_json_and_gate(tmp_path, capsys) -> None:
    path = tmp_path / "similarity.json"
    assert cli.main(["similarity", "basics", "ppo", "--worst", "1", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "scenarios" in out and "advanced" in out and "lowest: " in out
    data = json.loads(path.read_text(encoding="utf-8"))
    assert set(data["ratios"]) == {"basics", "ppo"} and data["ratios"]["basics"] == similarity.pair_ratio("basics")
    assert data["pairs"] == 2 and data["median"] == sum(data["ratios"].values()) / 2
    assert "jax" in data["versions"]
    assert cli.main(["similarity", "basics", "--min-median", "1.0"]) == 1
    assert "is below --min-median 1.0" in capsys.readouterr().out
    assert cli.main(["similarity", "--family", "pitfalls", "--worst", "0"]) == 0
    assert "lowest: " not in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["similarity", "nope"], "scenario expected one of ['basics',"),
        (["similarity", "basics", "--family", "pitfalls"], "scenarios expected at least one of family 'pitfalls'"),
    ],
)
def test_bad_names_exit_2(argv: list[str], message: str, capsys) -> None:
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err.replace("\n", "")


def test_bad_ratio_is_refused_by_argparse(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["similarity", "--min-median", "1.5"])
    assert exc.value.code == 2 and "expected a number in [0, 1], got 1.5" in capsys.readouterr().err
