"""Where a process decides its parallel layout: the one call of ``layout_from_settings``.

The launcher asks once, when it plans (``launch/plan.py``: its ``LaunchPlan`` carries the
layout to the other checks and to the dry run); a worker asks once, when ``select_strategy``
chooses its strategy (whose ``Topology`` holds it). Both refuse a layout alike. Torch-free.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from overdrive.parallel.layout import ParallelLayout, layout_from_settings

if TYPE_CHECKING:
    from overdrive.config.settings import Settings


def decide_layout(settings: Settings, world: int) -> ParallelLayout:
    """The layout of this run on ``world`` processes; an error if it cannot factor."""
    return layout_from_settings(settings, world)
