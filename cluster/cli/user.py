"""``ipupod user add|list|remove|rotate``: the users of a shared POD (administrator only).

    ipupod user add alice --max-ipus 8 --credential-file alice.token
    ipupod user list
    ipupod user rotate alice --credential-file alice.token   # the old credential stops now
    ipupod user remove alice                                 # so does this one's
    ipupod user remove bob --with-partitions                 # and bob's partitions go too

A new credential is written to ``--credential-file`` (mode 0600) and never printed; its
user passes that file as they would a token file (``IPUPOD_TOKEN_FILE=PATH ipupod ...``).
Its folder must exist, and is checked before the service is asked, so a refusal leaves no
user without a credential behind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from cluster.cli.options import client_options
from cluster.cli.output import echo_message
from cluster.cli.paths import CheckedPath, check_output_folder
from cluster.errors import UserError
from cluster.service.client import Client
from cluster.service.token_auth import save_token

CREDENTIAL_FILE = click.option(
    "--credential-file", type=CheckedPath(dir_okay=False, path_type=Path), required=True,
    help="Where to write the user's credential (mode 0600; never printed).")


@click.group("user")
def user_group() -> None:
    """Add, list, remove users and rotate their credentials (administrator only)."""


def _line(user: Any) -> str:
    quota = str(user.max_ipus) if user.max_ipus else "-"
    return f"{user.name:<32} {quota:>8} {user.ipus_used:>9} {user.partitions:>10}"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _hand_over(issued: Any, path: Path, as_json: bool, verb: str) -> None:
    """Write the credential in ``issued`` to ``path``, then print the user (not it)."""
    name = issued.user.name
    try:
        save_token(path, issued.credential, option="--credential-file")
    except UserError as error:
        raise UserError(f"user {name} was {verb}, but {error}; run `ipupod user rotate {name}"
                        " --credential-file PATH` to issue a new one") from None
    echo_message(issued.user, as_json, f"{verb} user {name}: credential in {path}")


@user_group.command("add")
@click.argument("name")
@click.option("--max-ipus", type=click.IntRange(0, 1 << 20), default=0, show_default=True,
              help="The most IPUs the user's partitions may hold (0: no limit).")
@CREDENTIAL_FILE
@client_options
def user_add(name: str, max_ipus: int, credential_file: Path, host: str | None,
             port: int | None, token_file: str | None, as_json: bool) -> None:
    """Add user NAME, with a credential of their own written to --credential-file."""
    check_output_folder(credential_file, "--credential-file")
    issued = Client(host, port, token_file).add_user(name, max_ipus)
    _hand_over(issued, credential_file, as_json, "added")


@user_group.command("rotate")
@click.argument("name")
@CREDENTIAL_FILE
@client_options
def user_rotate(name: str, credential_file: Path, host: str | None, port: int | None,
                token_file: str | None, as_json: bool) -> None:
    """Give user NAME a new credential (in --credential-file); the old one stops now."""
    check_output_folder(credential_file, "--credential-file")
    issued = Client(host, port, token_file).rotate_user(name)
    _hand_over(issued, credential_file, as_json, "rotated")


@user_group.command("remove")
@click.argument("name")
@click.option("--with-partitions", is_flag=True,
              help="Also remove (free) the user's partitions; without it, a user who owns "
                   "partitions is not removed.")
@client_options
def user_remove(name: str, with_partitions: bool, host: str | None, port: int | None,
                token_file: str | None, as_json: bool) -> None:
    """Remove user NAME: their credential stops working now. Refused while they own
    partitions, unless --with-partitions removes those too."""
    gone = Client(host, port, token_file).remove_user(name, with_partitions)
    held = (f" and their {_count(gone.partitions, 'partition')} "
            f"({_count(gone.ipus_used, 'IPU')})" if gone.partitions else "")
    echo_message(gone, as_json, f"removed user {gone.name}{held}")


@user_group.command("list")
@client_options
def user_list(host: str | None, port: int | None, token_file: str | None,
              as_json: bool) -> None:
    """Every user: quota, IPUs and partitions held."""
    listed = Client(host, port, token_file).list_users()
    lines = [f"{'name':<32} {'max-ipus':>8} {'ipus-used':>9} {'partitions':>10}"]
    echo_message(listed, as_json, "\n".join(lines + [_line(u) for u in listed.users]))
