"""`overdrive launch`: plan a launch from the resolved settings and run it (directly on one
machine, on torch's elastic agent across machines or with restarts).

Importing this package is cheap; torch loads only when the elastic agent runs.
"""

from overdrive.launch.plan import DEFAULT_PORT, LaunchPlan, build_plan
from overdrive.launch.suggest import suggest_command

__all__ = ["DEFAULT_PORT", "LaunchPlan", "build_plan", "suggest_command"]
