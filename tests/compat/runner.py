"""Worker side of the conformance suite: run one test script, one result per test call.

Started on every rank (by ``overdrive launch``, ``torchrun`` or plain ``python``) as

    python runner.py SCRIPT RESULTS_DIR

Each module-level function that the script's ``main()`` calls directly is a "test call"
(``name#n`` for its n-th call). The runner wraps those functions so that a failure is
recorded and ``main()`` goes on with the next one, writes every call's outcome to
``RESULTS_DIR/rank<R>.jsonl`` as it happens, and keeps the ranks in step: after each call a
rank waits (polling files, with a deadline) until every rank has finished that call. A call
that does not finish within ``COMPAT_CALL_TIMEOUT`` seconds ends the process (its stacks are
dumped), and so does a peer that never arrives; the harness then starts the script again
with ``COMPAT_SKIP`` naming the calls already decided.
"""

from __future__ import annotations

import ast
import faulthandler
import importlib.util
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

RANK = int(os.environ.get("RANK", "0"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))


def _main_block(tree: ast.Module) -> ast.If | None:
    """The script's ``if __name__ == "__main__":`` block."""
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            return node
    return None


def entry_point(tree: ast.Module) -> ast.AST | None:
    """``main()``, or the ``__main__`` block of a script that has no ``main``."""
    main = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"), None)
    return main if main is not None else _main_block(tree)


def main_calls(source: str) -> list[str]:
    """Names of module-level functions that the entry point calls directly."""
    tree = ast.parse(source)
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    main = entry_point(tree)
    if main is None:
        return []
    names = []
    for node in ast.walk(main):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            name = node.func.id
            if name in functions and name != "main" and name not in names:
                names.append(name)
    return names


class Recorder:
    """Appends one JSON line per event to this rank's file and waits for the other ranks."""

    def __init__(self, results: Path, skip: set[str], call_timeout: float) -> None:
        self.results = results
        self.path = results / f"rank{RANK}.jsonl"
        self.skip = skip
        self.call_timeout = call_timeout
        self.counts: dict[str, int] = {}
        self.depth = 0

    def write(self, **event: Any) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(event) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def finished(self, rank: int, key: str) -> bool:
        path = self.results / f"rank{rank}.jsonl"
        if not path.exists():
            return False
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event.get("key") == key and event.get("status") != "start":
                return True
        return False

    def wait_for_peers(self, key: str) -> None:
        deadline = time.monotonic() + self.call_timeout
        pending = [r for r in range(WORLD) if r != RANK]
        while pending:
            pending = [r for r in pending if not self.finished(r, key)]
            if pending and time.monotonic() > deadline:
                self.write(key=key, status="peer-lost", ranks=pending)
                os._exit(3)
            if pending:
                time.sleep(0.05)  # polling the peers' files; the deadline bounds it

    def wrap(self, name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if self.depth:  # called from inside another test call: not a test of its own
                return fn(*args, **kwargs)
            n = self.counts.get(name, 0)
            self.counts[name] = n + 1
            key = f"{name}#{n}"
            if key in self.skip:
                return None
            self.write(key=key, status="start")
            faulthandler.dump_traceback_later(self.call_timeout, exit=True)
            self.depth += 1
            started = time.monotonic()
            try:
                value = fn(*args, **kwargs)
            except BaseException as exc:  # pytest.fail raises a BaseException
                self.write(key=key, status="fail", error=describe(exc), seconds=elapsed(started))
                value = None
            else:
                self.write(key=key, status="pass", seconds=elapsed(started))
            finally:
                self.depth -= 1
                faulthandler.cancel_dump_traceback_later()
            self.wait_for_peers(key)
            return value

        wrapper.__name__ = name
        wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
        return wrapper


def elapsed(started: float) -> float:
    return round(time.monotonic() - started, 2)


def describe(exc: BaseException) -> str:
    """The exception's type and first line, and where it was raised in the script."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = ""
    for frame in reversed(frames):
        if frame.filename.endswith(tuple(SCRIPT_NAMES)):
            where = f" ({Path(frame.filename).name}:{frame.lineno})"
            break
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}{where}"


SCRIPT_NAMES: list[str] = []


def run(script: Path, results: Path) -> int:
    SCRIPT_NAMES.append(script.name)
    skip = set(json.loads(os.environ.get("COMPAT_SKIP", "[]")))
    recorder = Recorder(results, skip, float(os.environ.get("COMPAT_CALL_TIMEOUT", "90")))
    sys.path.insert(0, str(script.parent))
    spec = importlib.util.spec_from_file_location(script.stem, script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[script.stem] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        recorder.write(key="<import>", status="fail", error=describe(exc))
        return 1
    for name in main_calls(script.read_text()):
        setattr(module, name, recorder.wrap(name, getattr(module, name)))
    faulthandler.dump_traceback_later(recorder.call_timeout, exit=True)  # set-up in main()
    tree = ast.parse(script.read_text())
    block = _main_block(tree) if not hasattr(module, "main") else None
    try:
        if block is not None:  # no main(): run the __main__ block's body in the module
            code = compile(ast.Module(body=block.body, type_ignores=[]), str(script), "exec")
            exec(code, module.__dict__)
        else:
            module.main()
    except BaseException as exc:
        recorder.write(key="<main>", status="fail", error=describe(exc))
        return 1
    finally:
        faulthandler.cancel_dump_traceback_later()
    recorder.write(key="<end>", status="pass")
    return 0


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()))
