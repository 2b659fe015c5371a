"""Errors a user can cause. The CLI prints their message alone and exits with code 2."""

from __future__ import annotations


class OverdriveError(Exception):
    """A problem the user can fix; the message says what, where it came from, and the fix."""

    exit_code = 2


class ConfigError(OverdriveError, ValueError):
    """A setting is unknown, malformed, out of range, or contradicts another setting."""

    def __init__(self, message: str, *, key: str | None = None, fix: str | None = None) -> None:
        self.key = key
        self.fix = fix
        text = message if fix is None else f"{message}\n  fix: {fix}"
        super().__init__(text)


class ConfigErrors(ConfigError):
    """Several settings are wrong at once: every one is reported, each with its own fix."""

    def __init__(self, errors: list[ConfigError]) -> None:
        self.errors = list(errors)
        items = []
        for number, error in enumerate(self.errors, 1):
            first, *rest = str(error).splitlines()
            items.append("\n".join([f"  {number}. {first}", *(f"   {line}" for line in rest)]))
        body = "\n".join(items)
        super().__init__(f"{len(self.errors)} problems in the settings:\n{body}", key=errors[0].key)


class LaunchError(OverdriveError):
    """The launch cannot go ahead as asked (no script, busy port on several machines, ...)."""
