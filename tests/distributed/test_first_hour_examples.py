"""Issue 31: the first thing a newcomer runs is an example to copy. Every file in examples/
runs the way its docstring (or the README) says, and prints no warning: not overdrive's, not
Python's, not a logger's, not torch's. The demo's schedule lasts its whole run.

Warnings are made visible whatever handler prints them: a ``sitecustomize`` on the workers'
path marks each log record at WARNING or above with ``[WARNING]``. It also hides the packages
that the README's install does not bring (DeepSpeed and torchao come with the test extra
only), as on a fresh clone.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.dist import REPO, clean_env

EXAMPLES = REPO / "examples"
SITECUSTOMIZE = """\
import logging
import sys

for name in ("deepspeed", "torchao"):  # not installed by `make demo` or the transformers extra
    sys.modules[name] = None

_message = logging.LogRecord.getMessage


def _marked(record):
    text = _message(record)
    return f"[{record.levelname}] {text}" if record.levelno >= logging.WARNING else text


logging.LogRecord.getMessage = _marked
"""
WARNING = re.compile(r"\[(WARNING|ERROR|CRITICAL)\]|Warning:|overdrive: warning|^W\d{4} ", re.M)
LAUNCH = [sys.executable, "-m", "overdrive", "launch", "--cpu", "--num_processes", "2"]
RUN = [sys.executable, "-m", "overdrive.run"]
# Each example, how its docstring runs it, and a line its success prints.
CASES = {
    "digits_ddp.py": (LAUNCH, [], r"held-out accuracy: [0-9.]+ on 450 images"),
    "readme_loop.py": (LAUNCH, [], r"final loss [0-9.]+ on 2 processes"),
    "text_classifier.py": (LAUNCH, [], r"model saved to outputs/text_classifier"),
    "trainer_tiny_llama.py": (
        RUN,
        [],
        r"trained 8 steps on 1 process\(es\), final loss [0-9.]+; model saved to "
        r"outputs/trainer_tiny_llama \(.*model\.safetensors",
    ),
}


def _run(name: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The example as its docstring runs it, from a fresh folder (it may write there)."""
    head, args, _ = CASES[name]
    return _start([*head, str(EXAMPLES / name), *args], tmp_path)


def _start(command: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run(
        command,
        env=clean_env({"PYTHONPATH": path}),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )


def test_every_example_is_checked() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(CASES)


@pytest.mark.parametrize(("doc", "lines"), [("README.md", 45), ("docs/trainer.md", 30)])
def test_the_trainer_path_is_on_the_first_screen(doc: str, lines: int) -> None:
    """How to get transformers, why `python train.py` cannot work, and the line that does
    (the one the test above runs)."""
    screen = "\n".join((REPO / doc).read_text().splitlines()[:lines])
    assert 'python -m pip install -e ".[transformers]"' in screen
    assert "requires" in screen and "accelerate>=1.1.0" in screen  # transformers' own refusal
    assert "python -m overdrive.run examples/trainer_tiny_llama.py" in screen


@pytest.mark.distributed
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_example_runs_and_prints_no_warning(name: str, tmp_path: Path) -> None:
    if name.startswith("trainer") and importlib.util.find_spec("transformers") is None:
        pytest.skip("needs transformers (pip install -e '.[transformers]')")
    done = _run(name, tmp_path)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert re.search(CASES[name][2], done.stdout), output[-4000:]
    warnings = [line for line in output.splitlines() if WARNING.search(line)]
    assert warnings == [], "\n".join(warnings)
    # Whatever it saved is under outputs/, which git ignores (run from the repository root,
    # it leaves nothing to commit by mistake).
    assert sorted(p.name for p in tmp_path.iterdir()) in (["site"], ["outputs", "site"])
    if name == "digits_ddp.py":  # into a pipe, its bar is written once, in its last state
        # (the schedule the bar shows on the way: test_progress_in_a_terminal.py)
        assert re.findall(r"\| (\d+)/176 \[", done.stderr) == ["176"], done.stderr[-2000:]
        assert "import accelerate" not in done.stderr  # it never imports it: nothing said


FSDP2_SHARDED = """\
distributed_type: FSDP
num_processes: 2
fsdp_config:
  fsdp_version: 2
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer
  fsdp_state_dict_type: SHARDED_STATE_DICT
"""


@pytest.mark.distributed
@pytest.mark.extended  # a third 2-process Trainer launch; the listing is checked in make test above
def test_the_trainer_example_saves_full_weights_under_a_sharded_fsdp_config(
    tmp_path: Path,
) -> None:
    """Trainer.save_model writes no weights under SHARDED_STATE_DICT; the example must not say
    "model saved" over an empty folder: it saves full weights that from_pretrained loads."""
    transformers = pytest.importorskip("transformers")
    config = tmp_path / "fsdp2.yaml"
    config.write_text(FSDP2_SHARDED)
    out = tmp_path / "tfsdp"
    launch = [*LAUNCH[:4], "--cpu", "--config_file", str(config)]
    script = [str(EXAMPLES / "trainer_tiny_llama.py"), "--output_dir", str(out), "--max_steps", "2"]
    done = _start([*launch, *script], tmp_path)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    said = [line for line in done.stdout.splitlines() if "model saved to" in line]
    assert len(said) == 1 and "on 2 process(es)" in said[0], done.stdout[-2000:]
    assert said[0].endswith(f"model saved to {out} (config.json, model.safetensors)")
    loaded = transformers.LlamaForCausalLM.from_pretrained(out)  # full weights, no shards
    assert loaded.model.layers[0].mlp.up_proj.weight.shape == (128, 64)
