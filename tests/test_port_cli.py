"""`detach-parity check FILE.py | WORKED[:VARIANT]`: exit 0 on a match, 1 on a mismatch with the bug named,
2 on bad input; JSON on request; and the README's "check your own port in under ten lines" runs as written."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from detach_parity.shared.apps.cli import main

# The README snippet, read from README.md: the Python API on one's own models (the worked CNN port stands in for them).
README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
SNIPPET = README.split("## Check your own port", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]

# FILE.py for the CLI: the names the README documents
PORT_FILE = """
from detach_parity.torch_impl.backend.ports import cnn as torch_cnn
from detach_parity.jax_impl.backend.ports import cnn as jax_cnn

torch_model = torch_cnn.build()
jax_model = jax_cnn.build({variant!r}, **torch_cnn.SIZES["small"])
batch = torch_cnn.batch()
torch_loss, jax_loss = torch_cnn.loss, jax_cnn.loss
torch_optimizer, jax_optimizer = torch_cnn.optimizer, jax_cnn.optimizer()
"""


def test_readme_snippet_runs_as_written(capsys) -> None:
    assert len(SNIPPET.strip().splitlines()) <= 10
    exec(compile(SNIPPET, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "verdict: the port matches" in out and "float32" in out


def test_the_files_folder_is_on_sys_path_as_python_would_have_it(tmp_path, capsys, monkeypatch) -> None:
    """A port file that imports the user's own module beside it (their model, their port) runs as with
    `python my_port.py`, from any working directory; the caller's sys.path is left as it was."""
    import sys

    (tmp_path / "my_models.py").write_text(PORT_FILE.format(variant="correct"))
    port = tmp_path / "my_port.py"
    port.write_text("from my_models import *  # the user's own module, beside the file\n")
    monkeypatch.chdir("/")
    before = list(sys.path)
    assert main(["check", str(port), "--steps", "1"]) == 0, capsys.readouterr().out[-2000:]
    assert sys.path == before and "my_models" in sys.modules
    sys.modules.pop("my_models")


def test_file_that_matches_exits_0_and_writes_json(tmp_path, capsys) -> None:
    port = tmp_path / "my_port.py"
    port.write_text(PORT_FILE.format(variant="correct"))
    out = tmp_path / "report.json"
    assert main(["check", str(port), "--steps", "1", "--json", str(out)]) == 0
    payload = json.loads(out.read_text())
    assert payload["ok"] and payload["settings"]["steps"] == 1 and payload["failed"] == [] and payload["compared"] > 40
    assert "verdict: the port matches" in capsys.readouterr().out


def test_a_buggy_port_exits_1_and_names_the_bug(tmp_path, capsys) -> None:
    port = tmp_path / "my_port.py"
    port.write_text(PORT_FILE.format(variant="bn_biased_var"))
    assert main(["check", str(port), "--steps", "1"]) == 1
    out = capsys.readouterr().out
    assert "[P06] BatchNorm running variance biased" in out and "confirmed" in out and "the port DIFFERS" in out


def test_a_worked_port_by_name(capsys) -> None:
    assert main(["check", "cnn:fc_layout", "--steps", "0"]) == 1
    out = capsys.readouterr().out
    hint = [line for line in out.splitlines() if line.startswith("hint: [P07]")]
    assert len(hint) == 1 and "fc/kernel equals the transpose" in hint[0]  # one line, never folded
    assert "(detach-parity show p07_linear_layout; site/p07_linear_layout.html)" in hint[0]


@pytest.mark.parametrize(
    ("text", "argv", "message"),
    [
        (None, ["check", "missing.py"], "FILE: no such file 'missing.py' (expected a Python file (.py) or one of"),
        (
            PORT_FILE.format(variant="correct").replace("torch_optimizer, jax_optimizer", "torch_opt, jax_optimizer"),
            ["check", "{file}"],
            "defines 'torch_opt', which check does not read: did you mean 'torch_optimizer'?",
        ),  # it compared no optimizer steps, with exit 0
        (
            PORT_FILE.format(variant="fc_layout") + "tranfer = False\n",
            ["check", "{file}"],
            "defines 'tranfer', which check does not read: did you mean 'transfer'?",
        ),  # it transferred the weights and hid the user's loader bug: exit 0
        (
            PORT_FILE.format(variant="correct")
            + "from collections.abc import Mapping\nmappings = {'conv1': 'conv1'}\n",
            ["check", "{file}"],
            "defines 'mappings', which check does not read: did you mean 'mapping'?",
        ),  # and the imported class Mapping is not taken for a typo
        (
            PORT_FILE.format(variant="correct") + "mapping = 5\n",
            ["check", "{file}"],
            "mapping: expected a dict of torch path -> NNX path strings, got 5",
        ),  # a TypeError traceback with exit 1, the status of a mismatch
        (
            PORT_FILE.format(variant="correct") + "jax_steps = lambda model, batch: 0.0\n",
            ["check", "{file}"],
            "defines 'jax_steps', which check does not read: did you mean 'jax_step'?",
        ),
        (None, ["check", "cnn:nope"], "worked port cnn: variant expected one of ['correct'"),
        (
            None,
            ["check", "mlp"],
            "worked port: expected one of ['cnn', 'gru', 'transformer', 'llama', 'bert', 'vit', 'gpt2', 'qwen2'], "
            "got 'mlp'",
        ),
        ("torch_model = 1\n", ["check", "{file}"], "expected the names ['torch_model', 'jax_model', 'batch'"),
        ("raise RuntimeError('boom')\n", ["check", "{file}"], "running it raised RuntimeError: boom"),
        (
            PORT_FILE.format(variant="correct")
            + "import numpy as np\nbatch = {'image': batch['image'] * np.nan, 'label': batch['label']}\n",
            ["check", "{file}"],
            "batch['image']: expected finite values",
        ),
        ("import sys\nsys.exit(0)\n", ["check", "{file}"], "running it raised SystemExit: 0"),  # not "matches"
        ("raise SystemExit('bye')\n", ["check", "{file}"], "running it raised SystemExit: bye"),  # not "differs"
        (None, ["check", "cnn:"], "worked port cnn: variant expected one of ['correct'"),
        (None, ["check", "{dir}"], "FILE expected a Python file (.py) or one of"),
        (None, ["check", "cnn", "--steps", "-1"], None),
        (None, ["check", "cnn", "--steps", "101"], None),
    ],
)
def test_bad_input_exits_2(tmp_path, capsys, text, argv, message) -> None:
    port = tmp_path / "bad.py"
    if text is not None:
        port.write_text(textwrap.dedent(text))
    argv = [a.format(file=port, dir=tmp_path) for a in argv]
    if message is None:  # argparse refuses the value itself
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        return
    assert main(argv) == 2
    assert " ".join(message.split()) in " ".join(capsys.readouterr().err.split())  # the console may wrap it
