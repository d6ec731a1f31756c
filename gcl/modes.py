"""How a collective or a training run executes: the two modes share one cost model, so
they report the same simulated time by construction (``docs/real-mode.md``)."""

from __future__ import annotations

from cluster.errors import SettingError
from cluster.model.text_enum import TextEnum


class Mode(TextEnum):
    """``phantom``: sizes only, no devices, any scale. ``real``: real data through the
    emulated devices (Ray actors, links carrying the bytes)."""

    PHANTOM = "phantom"
    REAL = "real"

    @classmethod
    def parse(cls, text: str, option: str = "{mode}") -> Mode:
        """The mode named ``text``, or a SettingError naming the choices (and the setting
        as ``option`` words it: by default as people name ``mode``)."""
        try:
            return cls(text)
        except ValueError:
            raise SettingError("mode", option + " is {choices}, not {given!r}",
                               choices=" or ".join(m.value for m in cls), given=text) from None
