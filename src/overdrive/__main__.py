"""`python -m overdrive` runs the CLI."""

from overdrive.cli.main import run

run()
