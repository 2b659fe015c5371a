"""One setting's description: canonical key, value kind, default, environment names, aliases."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from overdrive.config.kinds import Bool, Kind


@dataclass(frozen=True)
class Setting:
    """One setting: canonical key, value kind, default and where else it may come from."""

    key: str
    kind: Kind
    default: Any
    help: str
    env: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    flag: bool = False  # settable by an `overdrive launch` flag
    # Why a value other than the default cannot take effect under overdrive (keys Hugging
    # Face Accelerate's wizard writes for what overdrive does not do): the file loads, and
    # the setting is named as inert where settings are reported.
    no_effect: str | None = None

    @property
    def section(self) -> str | None:
        return self.key.split(".", 1)[0] if "." in self.key else None

    @property
    def name(self) -> str:
        return self.key.rsplit(".", 1)[-1]


def setting(key: str, kind: Kind, default: Any, help: str, **kw: Any) -> Setting:
    """Shorthand used by the setting tables."""
    return Setting(key=key, kind=kind, default=default, help=help, **kw)


ON_OFF = Bool()
