"""The README's digits scripts are PyTorch scripts with their import lines changed: they
run as they are, give the same accuracy twice in a row (``manual_seed`` alone makes them
reproducible), and run under PyTorch with the imports changed back."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
TORCH_IMPORTS = {
    "import nbgrad as torch": "import torch",
    "from nbgrad import nn": "from torch import nn",
    "from nbgrad.utils.data import": "from torch.utils.data import",
}


def _scripts() -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    return [b for b in blocks if b.startswith("import nbgrad as torch")]


def _accuracy(code: str) -> float:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    return float(re.search(r"test accuracy ([0-9.]+)", done.stdout).group(1))


def _as_torch(code: str) -> str:
    lines = []
    for line in code.splitlines():
        for ours, theirs in TORCH_IMPORTS.items():
            if line.startswith(ours):
                line = theirs + line[len(ours):].split("  #")[0]
        lines.append(line)
    return "\n".join(lines)


def test_the_readme_has_the_mlp_and_the_cnn():
    scripts = _scripts()
    assert len(scripts) == 2
    assert any("nn.Conv2d" in s for s in scripts) and any("nn.Linear(64" in s for s in scripts)


@pytest.mark.parametrize("which", [0, 1], ids=["mlp", "cnn"])
def test_a_readme_script_runs_and_repeats_its_accuracy(which):
    code = _scripts()[which]
    first, second = _accuracy(code), _accuracy(code)
    assert first == second
    assert first > 0.9


@pytest.mark.parametrize("which", [0, 1], ids=["mlp", "cnn"])
def test_a_readme_script_is_a_pytorch_script(which):
    pytest.importorskip("torch")
    code = _as_torch(_scripts()[which])
    assert "nbgrad" not in code.replace("from nbgrad.datasets import split_digits", "")
    assert _accuracy(code) > 0.9
