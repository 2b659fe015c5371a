"""`python -m overdrive` runs the CLI."""

import sys

from overdrive.cli.main import main

sys.exit(main())
