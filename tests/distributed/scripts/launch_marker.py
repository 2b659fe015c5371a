"""Worker that must never run: it creates the file named by argv[1]."""

import sys

open(sys.argv[1], "w").close()
