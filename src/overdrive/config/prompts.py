"""How the wizard asks: arrow-key menus in a terminal, plain lines from standard input otherwise."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TextIO

from overdrive.config.kinds import brief_repr
from overdrive.errors import ConfigError

Option = tuple[str, Any]  # (label shown, value stored)


class Prompter(Protocol):
    """The four kinds of question the wizard asks."""

    def choice(self, question: str, options: Sequence[Option], default: Any) -> Any: ...

    def integer(self, question: str, default: int, minimum: int = 0) -> int: ...

    def text(self, question: str, default: str | None) -> str | None: ...

    def confirm(self, question: str, default: bool) -> bool: ...


class StreamPrompter:
    """Reads one answer per line; an empty line takes the default. For scripts and tests.

    A choice may be answered by its label, its stored value, or its number (1-based).
    A bad answer is an error rather than a re-ask, so scripted answers never drift out of step.
    """

    def __init__(self, stdin: TextIO, stdout: TextIO) -> None:
        self._in = stdin
        self._out = stdout

    def _ask(self, question: str, hint: str) -> str:
        self._out.write(f"{question} {hint}: ")
        self._out.flush()
        line = self._in.readline()
        if line == "":
            raise ConfigError(
                f"the wizard needs an answer to {question!r} but standard input ended",
                fix="give one answer per line (an empty line takes the default)",
            )
        answer = line.strip()
        self._out.write(answer + "\n")
        return answer

    def choice(self, question: str, options: Sequence[Option], default: Any) -> Any:
        labels = "\n".join(f"  {i}. {label}" for i, (label, _) in enumerate(options, 1))
        self._out.write(f"{labels}\n")
        default_label = next((label for label, value in options if value == default), "")
        answer = self._ask(question, f"[{default_label}]")
        if not answer:
            return default
        for label, value in options:
            if answer.lower() in (label.lower(), str(value).lower()):
                return value
        if answer.isdigit() and 1 <= int(answer) <= len(options):
            return options[int(answer) - 1][1]
        allowed = ", ".join(f"{i} ({label})" for i, (label, _) in enumerate(options, 1))
        raise ConfigError(
            f"{brief_repr(answer)} is not an answer to {question!r}",
            fix=f"answer with one of: {allowed}",
        )

    def integer(self, question: str, default: int, minimum: int = 0) -> int:
        answer = self._ask(question, f"[{default}]")
        if not answer:
            return default
        if not answer.lstrip("-").isdigit() or int(answer) < minimum:
            raise ConfigError(
                f"{brief_repr(answer)} is not an answer to {question!r}",
                fix=f"answer with a whole number >= {minimum}",
            )
        return int(answer)

    def text(self, question: str, default: str | None) -> str | None:
        answer = self._ask(question, f"[{default or ''}]")
        return answer or default

    def confirm(self, question: str, default: bool) -> bool:
        answer = self._ask(question, "[Y/n]" if default else "[y/N]").lower()
        if not answer:
            return default
        if answer in ("y", "yes", "true", "1"):
            return True
        if answer in ("n", "no", "false", "0"):
            return False
        raise ConfigError(
            f"{brief_repr(answer)} is not an answer to {question!r}", fix="answer yes or no"
        )


class MenuPrompter:
    """Arrow-key menus in a terminal, through questionary (imported only here).

    ``terminal`` holds prompt_toolkit's ``input``/``output`` for every question (tests pass a
    pipe input and a dummy output); by default questionary uses the real terminal.
    """

    def __init__(self, **terminal: Any) -> None:
        import questionary

        self._q = questionary
        self._terminal = terminal

    def _run(self, question: Any) -> Any:
        answer = question.ask()
        if answer is None:  # Ctrl-C inside questionary
            raise KeyboardInterrupt
        return answer

    def choice(self, question: str, options: Sequence[Option], default: Any) -> Any:
        choices = [self._q.Choice(title=label, value=value) for label, value in options]
        default_choice = next((c for c in choices if c.value == default), None)
        return self._run(
            self._q.select(question, choices=choices, default=default_choice, **self._terminal)
        )

    def integer(self, question: str, default: int, minimum: int = 0) -> int:
        def valid(text: str) -> bool | str:
            ok = text.strip().lstrip("-").isdigit() and int(text) >= minimum
            return True if ok else f"a whole number >= {minimum}"

        asked = self._q.text(question, default=str(default), validate=valid, **self._terminal)
        return int(self._run(asked))

    def text(self, question: str, default: str | None) -> str | None:
        answer = self._run(self._q.text(question, default=default or "", **self._terminal))
        return answer.strip() or default

    def confirm(self, question: str, default: bool) -> bool:
        return bool(self._run(self._q.confirm(question, default=default, **self._terminal)))
