"""`overdrive launch`: plan a launch from the resolved settings and run it on torch's elastic agent.

Importing this package is cheap; torch loads only when a launch runs.
"""

from overdrive.launch.plan import DEFAULT_PORT, LaunchPlan, build_plan
from overdrive.launch.suggest import suggest_command

__all__ = ["DEFAULT_PORT", "LaunchPlan", "build_plan", "suggest_command"]
