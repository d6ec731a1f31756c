"""Who may do what on a shared POD: a pure table of verb x role x reach, no I/O.

The administrator (the token ``ipupod serve`` writes) may do everything. A user may read
the POD's state, create partitions, and use, show or remove their own; a card fault only on
hardware no other user's partition uses; link faults (a link may carry anyone's traffic)
and user management are the administrator's alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Role(str, Enum):
    """The administrator, or a user the administrator added."""

    ADMIN = "admin"
    USER = "user"


class Verb(str, Enum):
    """What a call does, for the rules."""

    READ = "read"                # status, devices, links, topology, faults in force
    LIST = "list"                # partitions (a user sees their own)
    CREATE = "create"            # a partition (within the user's quota)
    PARTITION = "partition"      # show, bench on or remove one partition
    KILL_CARD = "kill-card"      # a card fault
    LINK_FAULT = "link-fault"    # degrade, cut or heal a link
    USERS = "users"              # add, list, remove or rotate users


class Reach(str, Enum):
    """Whose things a call touches."""

    NONE = "none"        # nobody's: no target, a free card, a partition that does not exist
    OWN = "own"          # the caller's own
    OTHERS = "others"    # a partition (or hardware) of someone else


@dataclass(frozen=True)
class MethodRule:
    """What the gate does around one method of the control API: the rules' verb, the
    request's field naming what it touches (for denials and the audit log; '' nothing),
    whether it changes the POD's state (then every outcome is audited, not only refusals),
    and whether a user's real-mode call of it is expensive (rate-limited)."""

    verb: Verb
    target: str = ""
    audited: bool = False
    expensive: bool = False


def _changes(verb: Verb, target: str = "") -> MethodRule:
    return MethodRule(verb, target, audited=True)


# Every method of control.proto, once: authorisation, audit and limits read this table.
METHODS: dict[str, MethodRule] = {
    "GetStatus": MethodRule(Verb.READ), "ListDevices": MethodRule(Verb.READ),
    "ListLinks": MethodRule(Verb.READ), "GetTopology": MethodRule(Verb.READ),
    "ListFaults": MethodRule(Verb.READ),
    "ListPartitions": MethodRule(Verb.LIST),
    "CreatePartition": _changes(Verb.CREATE, "name"),
    "GetPartition": MethodRule(Verb.PARTITION, "name"),
    "RemovePartition": _changes(Verb.PARTITION, "name"),
    "RunBenchmark": MethodRule(Verb.PARTITION, "partition", expensive=True),
    "StreamBenchmark": MethodRule(Verb.PARTITION, "partition", expensive=True),
    "KillCard": _changes(Verb.KILL_CARD, "card"),
    "DegradeLink": _changes(Verb.LINK_FAULT, "link"),
    "CutLink": _changes(Verb.LINK_FAULT, "link"),
    "HealLink": _changes(Verb.LINK_FAULT, "link"),
    "AddUser": _changes(Verb.USERS, "name"), "ListUsers": MethodRule(Verb.USERS),
    "RemoveUser": _changes(Verb.USERS, "name"), "RotateUser": _changes(Verb.USERS, "name"),
}
METHOD_VERBS = {name: rule.verb for name, rule in METHODS.items()}

_USER_MAY = {
    Verb.READ: {Reach.NONE, Reach.OWN, Reach.OTHERS},
    Verb.LIST: {Reach.NONE, Reach.OWN, Reach.OTHERS},
    Verb.CREATE: {Reach.NONE},
    Verb.PARTITION: {Reach.NONE, Reach.OWN},
    Verb.KILL_CARD: {Reach.NONE, Reach.OWN},
    Verb.LINK_FAULT: set(),
    Verb.USERS: set(),
}


def allowed(verb: Verb, role: Role, reach: Reach) -> bool:
    """Whether a caller of ``role`` may do ``verb`` to something of ``reach``."""
    return role is Role.ADMIN or reach in _USER_MAY[verb]


def denial(verb: Verb, caller: str, target: str) -> str:
    """Why ``caller`` may not do ``verb`` to ``target``: says whose it is not, never whose
    it is, and what to do instead."""
    if verb is Verb.PARTITION:
        return (f"partition {target!r} is not {caller}'s: only its owner and the "
                "administrator may show, bench on or remove it")
    if verb is Verb.KILL_CARD:
        return (f"card {target!r} is not {caller}'s alone: another user's partition uses "
                "it, so only the administrator may kill it")
    if verb is Verb.LINK_FAULT:
        return (f"link faults are the administrator's: link {target!r} may carry any "
                f"user's traffic, and {caller} is not the administrator")
    if verb is not Verb.USERS:  # a user may do everything else: no message needed
        raise ValueError(f"a user is never denied {verb.value}")
    return (f"managing users is the administrator's, and {caller} is not the "
            "administrator: ask them")
