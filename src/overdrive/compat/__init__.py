"""Compatibility with Hugging Face Accelerate's API: names, views and methods by theme.

Nothing here changes how overdrive trains; these modules give a script written for the
Hugging Face Accelerate the names and methods it calls. Intentional differences are listed in
``docs/migrating.md``.
"""
