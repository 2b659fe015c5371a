"""Relay the workers' output to the launcher's, one whole line at a time.

Each worker's stdout and stderr go to a named pipe that one thread reads. Only complete lines
(ended by ``\\n``, ``\\r\\n`` or ``\\r``) are written, each batch in one call, optionally
behind ``[rank N] ``; two ranks' lines never merge, however the workers buffer. A rank's lines
can also go to ``<log_dir>/rank_<N>.log``.

A progress bar redraws its line after ``\\r``. To a terminal each redraw goes on as it comes
(behind the prefix, so the bar moves in place); to a file or pipe, and to the rank logs, only
the line's last state is written, once, as a file written without the launcher reads.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import select
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, BinaryIO

_LINE = re.compile(rb"[^\r\n]*(?:\r\n|\n|\r)")
_CHUNK = 1 << 16


def supported() -> bool:
    """Named pipes and poll() exist here (not on Windows: workers then print directly)."""
    return hasattr(os, "mkfifo") and hasattr(select, "poll")


@dataclass
class _Source:
    """One worker stream: its pipe, the unfinished line so far, where its lines go."""

    fd: int
    rank: int
    to_err: bool
    pending: bytes = b""
    log: BinaryIO | None = None
    closed: bool = field(default=False)
    redrawn: bytes | None = None  # the last ``\r`` state of a line not yet ended by ``\n``


def split_lines(data: bytes, final: bool = False) -> tuple[list[bytes], bytes]:
    """Complete lines in ``data`` (terminators kept) and the unfinished rest.

    A trailing lone ``\\r`` waits for the next read unless ``final``: it may be half of
    ``\\r\\n``. With ``final`` the rest becomes a last line of its own.
    """
    lines = _LINE.findall(data)
    used = sum(len(line) for line in lines)
    rest = data[used:]
    if not final and not rest and lines and lines[-1].endswith(b"\r"):
        rest = lines.pop()
    if final and rest:
        lines.append(rest + b"\n")
        rest = b""
    return lines, rest


class Relay:
    """Reads every registered worker pipe on one thread and writes whole lines."""

    def __init__(
        self,
        *,
        prefix: bool,
        log_dir: str | None = None,
        out: BinaryIO | None = None,
        err: BinaryIO | None = None,
    ) -> None:
        self.prefix = prefix
        self.log_dir = log_dir
        self.lock = threading.Lock()  # held for every write to the launcher's streams
        self._out = out if out is not None else _binary(sys.stdout)
        self._err = err if err is not None else _binary(sys.stderr)
        self._tty = {id(s): _isatty(s) for s in (self._out, self._err)}
        self._sources: dict[int, _Source] = {}
        self._logs: dict[int, BinaryIO] = {}
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._poller = select.poll() if supported() else None
        if self._poller is not None:
            self._poller.register(self._wake_r, select.POLLIN)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="overdrive-relay", daemon=True)
        self._broken = False
        if log_dir:
            os.makedirs(log_dir, exist_ok=True)

    # ------------------------------------------------------------------ set-up
    def add_pipe(self, path: str, rank: int, *, to_err: bool) -> None:
        """Make ``path`` a named pipe the worker will write to, and start reading it."""
        if os.path.exists(path):
            os.unlink(path)
        os.mkfifo(path, 0o600)
        # Non-blocking read end first: the agent's open for writing then never waits.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        source = _Source(fd=fd, rank=rank, to_err=to_err, log=self._log(rank))
        with self.lock:
            self._sources[fd] = source
        assert self._poller is not None
        self._poller.register(fd, select.POLLIN)
        self._wake()

    def _log(self, rank: int) -> BinaryIO | None:
        if not self.log_dir:
            return None
        if rank not in self._logs:
            path = os.path.join(self.log_dir, f"rank_{rank}.log")
            self._logs[rank] = open(path, "ab")  # noqa: SIM115 - closed in stop()
        return self._logs[rank]

    def start(self) -> None:
        if self._poller is not None:
            self._thread.start()

    def say(self, text: str, *, to_err: bool = True) -> None:
        """Write the launcher's own text between whole worker lines."""
        data = text.encode("utf-8", "replace")
        if not data.endswith(b"\n"):
            data += b"\n"
        with self.lock:
            self._write(self._err if to_err else self._out, data)

    def stop(self, timeout: float = 5.0) -> None:
        """Read what the (finished) workers left in their pipes, write it, and stop."""
        self._stopping.set()
        self._wake()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if not self._thread.is_alive():
            self._drain_all()
        for log in self._logs.values():
            with contextlib.suppress(OSError):
                log.close()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    # ------------------------------------------------------------------ the thread
    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    def _run(self) -> None:
        assert self._poller is not None
        while not self._stopping.is_set():
            try:
                events = self._poller.poll(1000)
            except InterruptedError:
                continue
            for fd, _ in events:
                if fd == self._wake_r:
                    self._read_quietly(fd)
                    continue
                source = self._sources.get(fd)
                if source is not None and not source.closed:
                    self._pump(source, final=False)

    def _drain_all(self) -> None:
        with self.lock:
            sources = list(self._sources.values())
        for source in sources:
            if not source.closed:
                self._pump(source, final=True)
                self._close(source)

    def _read_quietly(self, fd: int) -> None:
        try:
            while os.read(fd, _CHUNK):
                pass
        except OSError:
            pass

    def _pump(self, source: _Source, *, final: bool) -> None:
        """Read what is there now; write its complete lines (all of it when ``final``)."""
        ended = False
        data = source.pending
        while True:
            try:
                chunk = os.read(source.fd, _CHUNK)
            except BlockingIOError:
                break
            except OSError as error:
                if error.errno == errno.EINTR:
                    continue
                ended = True
                break
            if not chunk:
                ended = True  # every writer closed it
                break
            data += chunk
            if len(data) >= _CHUNK and not final:
                break  # write in batches; poll() comes back for the rest
        lines, source.pending = split_lines(data, final=final or ended)
        if lines:
            self._emit(source, lines)
        if final or ended:
            self._end_redraws(source)
        if ended and not final:
            self._close(source)

    def _emit(self, source: _Source, lines: list[bytes]) -> None:
        head = f"[rank {source.rank}] ".encode() if self.prefix else b""
        stream = self._err if source.to_err else self._out
        kept: list[bytes] = []  # what a file keeps: each line's last state
        for line in lines:
            if line.endswith(b"\r") and not line.endswith(b"\r\n"):
                source.redrawn = line[:-1]
            else:
                source.redrawn = None
                kept.append(line)
        shown = lines if self._tty.get(id(stream)) else kept
        with self.lock:
            if shown:
                self._write(stream, b"".join(head + line for line in shown))
            self._log_lines(source, kept)

    def _end_redraws(self, source: _Source) -> None:
        """A stream that ended on a ``\\r`` redraw: a file still gets that last state."""
        last, source.redrawn = source.redrawn, None
        if last is None or not last.strip():
            return  # nothing, or a bar that erased itself (tqdm's leave=False)
        head = f"[rank {source.rank}] ".encode() if self.prefix else b""
        stream = self._err if source.to_err else self._out
        with self.lock:
            self._write(stream, (b"" if self._tty.get(id(stream)) else head + last) + b"\n")
            self._log_lines(source, [last + b"\n"])

    def _log_lines(self, source: _Source, lines: list[bytes]) -> None:
        if source.log is None or not lines:
            return
        try:
            source.log.write(b"".join(lines))
            source.log.flush()
        except OSError:
            source.log = None

    def _write(self, stream: BinaryIO, data: bytes) -> None:
        if self._broken:
            return  # the reader of our output went away; keep draining the workers
        try:
            _flush_text_layer(stream)
            stream.write(data)
            stream.flush()
        except (OSError, ValueError):
            self._broken = True

    def _close(self, source: _Source) -> None:
        source.closed = True
        with contextlib.suppress(KeyError, ValueError, AttributeError):
            self._poller.unregister(source.fd)  # type: ignore[union-attr]
        with contextlib.suppress(OSError):
            os.close(source.fd)


class _TextSink:
    """Bytes written to a text stream that has no binary buffer (a test's StringIO)."""

    def __init__(self, text: Any) -> None:
        self.text = text

    def write(self, data: bytes) -> int:
        return int(self.text.write(data.decode("utf-8", "replace")))

    def flush(self) -> None:
        self.text.flush()


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _binary(text: Any) -> BinaryIO:
    buffer = getattr(text, "buffer", None)
    return buffer if buffer is not None else _TextSink(text)  # type: ignore[return-value]


def _flush_text_layer(stream: BinaryIO) -> None:
    """Text already written through sys.stdout/err must go out before our bytes."""
    for text in (sys.stdout, sys.stderr):
        if getattr(text, "buffer", None) is stream:
            text.flush()


def relay_logs_specs(log_dir: str, relay: Relay) -> Any:
    """torch's per-rank log layout, with stdout/stderr made into pipes that ``relay`` reads.

    The error files (``TORCHELASTIC_ERROR_FILE``) stay where torch puts them.
    """
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std

    if not supported():
        return DefaultLogsSpecs(log_dir=log_dir, redirects=Std.NONE, tee=Std.NONE)

    class _RelayLogsSpecs(DefaultLogsSpecs):
        def reify(self, envs: dict[int, dict[str, str]]) -> Any:
            dest = super().reify(envs)
            for local_rank, env in envs.items():
                rank = int(env.get("RANK", local_rank))
                relay.add_pipe(dest.stdouts[local_rank], rank, to_err=False)
                relay.add_pipe(dest.stderrs[local_rank], rank, to_err=True)
            return dest

    return _RelayLogsSpecs(log_dir=log_dir, redirects=Std.ALL, tee=Std.NONE)
