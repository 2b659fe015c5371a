"""Compatibility with the described system's API: names, views and methods by theme.

Nothing here changes how overdrive trains; these modules give a script written for the
described system the names and methods it calls. Intentional differences are listed in
``docs/migrating.md``.
"""
