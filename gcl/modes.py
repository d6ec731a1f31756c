"""How a collective or a training run executes: the two modes share one cost model, so
they report the same simulated time by construction (``docs/real-mode.md``)."""

from __future__ import annotations

from cluster.errors import UserError
from cluster.model.text_enum import TextEnum


class Mode(TextEnum):
    """``phantom``: sizes only, no devices, any scale. ``real``: real data through the
    emulated devices (Ray actors, links carrying the bytes)."""

    PHANTOM = "phantom"
    REAL = "real"

    @classmethod
    def parse(cls, text: str, option: str = "--mode") -> Mode:
        """The mode named ``text``, or a UserError naming the choices."""
        try:
            return cls(text)
        except ValueError:
            raise UserError(f"{option} is {' or '.join(m.value for m in cls)}, "
                            f"not {text!r}") from None
