"""``ipupod fault``: inject faults into a running POD service, and heal them.

    ipupod fault kill CARD                       # the card's actor dies; Ray restarts it empty
    ipupod fault degrade LINK --bandwidth-factor 0.5 --added-latency-us 2
    ipupod fault cut LINK
    ipupod fault heal LINK | --all
    ipupod fault list

LINK is ``A--B`` (node names, as `ipupod links` prints them) or the link's index; CARD is
a card or machine name (the ``unit`` column of `ipupod devices`).
"""

from __future__ import annotations

from typing import Any

import click

from cluster.cli.options import client_options
from cluster.cli.output import echo_message
from cluster.errors import UserError
from cluster.model.units import plural
from cluster.service.client import Client


@click.group("fault")
def fault_group() -> None:
    """Kill cards, degrade, cut and heal links of a running POD service."""


def _show(state: Any, as_json: bool) -> None:
    """Print the service's answer (a ``FaultState`` message): its message, the link faults
    in force, the cards that are down or have restarted."""
    lines = [state.message] if state.message else []
    for link in state.links:
        what = "cut" if link.cut else (
            f"bandwidth x{link.bandwidth_factor:g}, +{link.added_latency_seconds * 1e6:g} us")
        lines.append(f"link {link.link}: {what}")
    for card in state.cards:
        lines.append(f"card {card.card} (IPUs {','.join(map(str, card.ipus))}): "
                     f"{card.health}, restarted {plural(card.restarts, 'time')}"
                     + (f"; {card.detail}" if card.detail else ""))
    echo_message(state, as_json, "\n".join(lines) or "no faults in force")


@fault_group.command("kill")
@click.argument("card")
@client_options
def fault_kill(card: str, host: str | None, port: int | None, token_file: str | None,
               as_json: bool) -> None:
    """Kill CARD's actor, as a crash would: Ray restarts it with its memory empty."""
    _show(Client(host, port, token_file).kill_card(card), as_json)


@fault_group.command("degrade")
@click.argument("link")
@click.option("--bandwidth-factor", type=float, default=1.0, show_default=True,
              help="Multiply the link's bandwidth by this (0 < f <= 1).")
@click.option("--added-latency-us", type=float, default=0.0, show_default=True,
              help="Add this many microseconds to every crossing.")
@client_options
def fault_degrade(link: str, bandwidth_factor: float, added_latency_us: float,
                  host: str | None, port: int | None, token_file: str | None,
                  as_json: bool) -> None:
    """Slow LINK down (both directions), from the next collective on."""
    if not 0 < bandwidth_factor <= 1:
        raise UserError(f"--bandwidth-factor must be above 0 and at most 1, not "
                        f"{bandwidth_factor:g} (to take a link away: ipupod fault cut)")
    if added_latency_us < 0:
        raise UserError(f"--added-latency-us must be 0 or more, not {added_latency_us:g}")
    _show(Client(host, port, token_file).degrade_link(link, bandwidth_factor,
                                                     added_latency_us * 1e-6), as_json)


@fault_group.command("cut")
@click.argument("link")
@client_options
def fault_cut(link: str, host: str | None, port: int | None, token_file: str | None,
              as_json: bool) -> None:
    """Cut LINK: routes go round it where the topology allows, else collectives fail."""
    _show(Client(host, port, token_file).cut_link(link), as_json)


@fault_group.command("heal")
@click.argument("link", required=False)
@click.option("--all", "heal_all", is_flag=True, help="Heal every link.")
@client_options
def fault_heal(link: str | None, heal_all: bool, host: str | None, port: int | None,
               token_file: str | None, as_json: bool) -> None:
    """Undo LINK's fault (or every link's, with --all)."""
    if bool(link) == heal_all:
        raise UserError("name one LINK to heal, or give --all (not both)")
    _show(Client(host, port, token_file).heal_link(link or ""), as_json)


@fault_group.command("list")
@client_options
def fault_list(host: str | None, port: int | None, token_file: str | None,
               as_json: bool) -> None:
    """Link faults in force, and cards that are down or have restarted."""
    _show(Client(host, port, token_file).list_faults(), as_json)
