"""Check that a ``complete_*_example.py`` script carries every feature of the
``examples/by_feature`` scripts (``accelerate.test_utils.examples``).

Each script is compared section by section (its ``training_function`` or its ``main``) after
the lines it shares with the template ``examples/nlp_example.py`` are taken out, so only
what a feature adds is left. Paths are read relative to the working directory, a checkout
of the examples' repository.
"""

from __future__ import annotations

import os
from pathlib import Path

# The line that ends each section a comparison can look at.
_SECTION_ENDS = {"training_function": "def main", "main": "if __name__"}
_DATALOADER_LINE = "train_dataloader, eval_dataloader = get_dataloaders(accelerator, batch_size)\n"
# Feature scripts swap in mocked dataloaders under this flag, with one settings line after it.
_MOCK_FLAG = "TESTING_MOCKED_DATALOADERS"


def get_function_contents_by_name(lines: list[str], name: str) -> list[str] | None:
    """The lines of the section ``name`` (``"training_function"`` or ``"main"``) in a script's
    ``lines``: from its ``def`` line up to the ``def main`` (for ``training_function``) or
    ``if __name__`` (for ``main``) line that follows it, that line excluded. None when the
    section or the line that ends it is not there."""
    if name not in _SECTION_ENDS:
        raise ValueError(
            f"Incorrect function name passed: {name}, choose either 'main' or 'training_function'"
        )
    start = next((i for i, line in enumerate(lines) if f"def {name}" in line), None)
    if start is None:
        return None
    end_marker = _SECTION_ENDS[name]
    for end in range(start + 1, len(lines)):
        if end_marker in lines[end]:
            return list(lines[start:end])
    return None


def clean_lines(lines: list[str]) -> list[str]:
    """``lines`` without comment lines (first non-blank character ``#``) and bare newlines."""
    return [line for line in lines if line != "\n" and not line.lstrip().startswith("#")]


def _read(path: str | os.PathLike[str]) -> list[str]:
    with open(path) as handle:
        return handle.readlines()


def _section(lines: list[str], name: str) -> list[str]:
    section = get_function_contents_by_name(lines, name)
    if section is None:
        raise ValueError(f"no complete `{name}` section (ended by {_SECTION_ENDS[name]!r}) found")
    return clean_lines(section)


def _is_added(line: str, template: list[str]) -> bool:
    return line not in template and line.lstrip() != _DATALOADER_LINE


def _feature_additions(feature: list[str], template: list[str]) -> list[str]:
    """The lines ``feature`` adds to ``template``, walked as Hugging Face Accelerate walks them:
    ``len(feature) - 1`` steps of one line each (so the last line is reached only after a
    skip), a mocked-dataloader line dropped together with the line after it."""
    added = []
    lines = iter(feature)
    for _ in range(len(feature) - 1):
        line = next(lines, None)
        if line is None:
            break
        if not _is_added(line, template):
            continue
        if _MOCK_FLAG in line:
            next(lines, None)
        else:
            added.append(line)
    return added


def compare_against_test(
    base_filename: str | os.PathLike[str],
    feature_filename: str | os.PathLike[str],
    parser_only: bool,
    secondary_filename: str | os.PathLike[str] | None = None,
) -> list[str]:
    """The lines ``feature_filename`` adds to ``examples/nlp_example.py`` that
    ``base_filename`` (a complete example) lacks; empty when it has them all.

    ``parser_only`` compares the ``main`` sections (argument parsing), otherwise the
    ``training_function`` sections. ``secondary_filename`` names the template a complete
    example other than the NLP one is built on (``examples/cv_example.py``): lines of
    ``nlp_example.py`` that this template's section lacks are not counted as missing.
    """
    section = "main" if parser_only else "training_function"
    template_lines = _read(Path("examples", "nlp_example.py").absolute())
    template = _section(template_lines, section)
    base = _section(_read(base_filename), section)
    feature = _section(_read(feature_filename), section)

    in_base = [line for line in base if _is_added(line, template) and _MOCK_FLAG not in line]
    missing = [line for line in _feature_additions(feature, template) if line not in in_base]
    if secondary_filename is not None:
        secondary = _section(_read(secondary_filename), section)
        # What differs between the two templates is not the feature's addition.
        template_only = [line for line in template_lines if line not in secondary]
        missing = [line for line in missing if line not in template_only]
    return missing
