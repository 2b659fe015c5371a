"""Worker: print argv[1] lines, each through several small writes (print with many parts)."""

import os
import sys

rank = int(os.environ["RANK"])
count = int(sys.argv[1])
words = [f"w{k}" for k in range(12)]
for i in range(count):
    print(f"rank={rank}", f"line={i}", *words, "end", file=sys.stderr if i % 3 == 0 else sys.stdout)
