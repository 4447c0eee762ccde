"""One import name of our own: `detach_parity`, installed into someone else's project.

A user installs the package into the project whose port they check. Projects often have a
`shared/` package and a `tests/` folder of their own: with generic top-level names ours would
shadow theirs or be shadowed. Here a throwaway project with both is given a fresh virtual
environment, our package is built and installed into it as a wheel (not the editable tree), and
the project's own pytest runs `assert_port_matches` on a small port.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

from detach_parity.shared.apps import selfcheck

ROOT = Path(__file__).resolve().parents[1]

# the user's project: a package named like one of our folders, and tests of its own
PROJECT = {
    "shared/__init__.py": "GREETING = 'the project\\'s own shared package'\n",
    "shared/models.py": """
        import torch
        from flax import nnx


        class TorchMLP(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc1, self.fc2 = torch.nn.Linear(3, 5), torch.nn.Linear(5, 2)

            def forward(self, x):
                return self.fc2(torch.tanh(self.fc1(x)))


        class JaxMLP(nnx.Module):
            def __init__(self):
                rngs = nnx.Rngs(0)
                self.fc1, self.fc2 = nnx.Linear(3, 5, rngs=rngs), nnx.Linear(5, 2, rngs=rngs)

            def __call__(self, x):
                return self.fc2(nnx.tanh(self.fc1(x)))
        """,
    "tests/conftest.py": "import shared  # the project's own, first on its path\n",
    "tests/test_port.py": """
        import numpy as np
        import jax.numpy as jnp

        import detach_parity
        import shared
        from detach_parity import assert_port_matches
        from shared.models import JaxMLP, TorchMLP


        def test_our_shared_is_ours_and_the_port_matches():
            assert shared.GREETING == "the project's own shared package"
            print("DETACH_PARITY_FILE", detach_parity.__file__)
            batch = {"x": np.random.default_rng(0).standard_normal((4, 3)), "y": np.zeros((4, 2))}
            report = assert_port_matches(
                TorchMLP(),
                JaxMLP(),
                batch,
                torch_loss=lambda m, b: ((m(b["x"]) - b["y"]) ** 2).mean(),
                jax_loss=lambda m, b: jnp.mean((m(b["x"]) - b["y"]) ** 2),
            )
            assert report.ok
        """,
}


def test_the_package_list_names_every_folder_of_the_package() -> None:
    """pyproject.toml lists the subpackages by hand (the folders map under `detach_parity`): none forgotten."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert config["package-dir"] == {"detach_parity": "."}
    on_disk = {"detach_parity"} | {
        "detach_parity." + ".".join(p.parent.relative_to(ROOT).parts)
        for top in ("shared", "torch_impl", "jax_impl")
        for p in (ROOT / top).rglob("__init__.py")
    }
    assert set(config["packages"]) == on_disk


def test_a_project_with_its_own_shared_package_runs_assert_port_matches(tmp_path: Path) -> None:
    # our tree as the selfcheck copies it (no venv, no generated folders): the wheel is built there,
    # never in the repository
    source = selfcheck._copy_tree(ROOT, tmp_path / "source")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    # the frameworks come from the suite's own environment (a .pth line: its .pth files, our
    # editable install among them, are not read from there); the package itself is built anew
    here = Path(
        subprocess.run(
            [sys.executable, "-c", "import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (site / "frameworks.pth").write_text(f"{here}\n", encoding="utf-8")
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
    build = subprocess.run([*pip, "--target", str(site), str(source)], capture_output=True, text=True)
    assert build.returncode == 0, build.stdout + build.stderr
    project = tmp_path / "project"
    for rel, text in PROJECT.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    run = subprocess.run(
        [python, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "tests"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "1 passed" in run.stdout
    (where,) = [line.split()[-1] for line in run.stdout.splitlines() if line.startswith("DETACH_PARITY_FILE")]
    assert Path(where).parent == site / "detach_parity", where  # the installed wheel, not our tree
