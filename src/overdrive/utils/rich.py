"""``accelerate.utils.rich``: importing this module installs rich's tracebacks (locals hidden)
for the rest of the process.

Hugging Face Accelerate raises ModuleNotFoundError on import unless rich is installed *and*
``ACCELERATE_ENABLE_RICH`` is set; here importing the module is itself the request, so only a
missing rich raises (``is_rich_available()`` still follows the variable).
"""

from __future__ import annotations

from overdrive.utils.imports import _installed

if not _installed("rich"):
    raise ModuleNotFoundError("To use the rich extension, install rich with `pip install rich`")

from rich.traceback import install  # noqa: E402  (only once rich is known to be there)

install(show_locals=False)
