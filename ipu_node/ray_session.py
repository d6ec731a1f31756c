"""Which Ray a command runs on: a private local Ray of its own, or the cluster the user names.

Without an address (``--ray-address`` or ``RAY_ADDRESS``) a command starts a Ray of its own,
``ray.init(address="local")``, in its own temp dir and on ports Ray picks free, whatever
else runs on the machine: another user's ``ray start --head``, or the stale
``ray_current_cluster`` file a crashed one left behind, changes nothing. With an address it
joins that cluster, after checking in a few seconds that a Ray GCS answers there (Ray itself
retries an unreachable address for minutes). Either way it says on standard error, in one
line, which Ray it uses.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import ray

from cluster.errors import UserError, quoted
from cluster.setting_names import SETTING_NAMES

LOCAL_IPU_SLOTS = 256  # the IPU resource a private local Ray offers (or the POD's size)
PROBE_TIMEOUT_SECONDS = 5.0  # each step of checking an address: TCP connect, HTTP/2, one call
GCS_METHOD = "/ray.rpc.NodeInfoGcsService/GetClusterId"  # a call every Ray GCS answers
MAX_TEMP_ROOT_CHARS = 40  # Ray's Unix sockets live under it; their paths stop at 107 bytes
TOKEN_NOTICE_LOGGER = "ray._private.authentication.authentication_token_setup"
WORKER_POOL_WARNING = "worker processes have been started on node"  # Ray's raylet, to drivers
_COMMON: dict[str, Any] = dict(namespace="ipupod", include_dashboard=False,
                               log_to_driver=False, configure_logging=False)


def address_given(ray_address: str | None) -> str | None:
    """The cluster to join: ``ray_address``, else ``RAY_ADDRESS``; None: start a private one."""
    return ray_address or os.environ.get("RAY_ADDRESS") or None


def uses_local_ray(ray_address: str | None) -> bool:
    """Whether launching would start a private local Ray (none is connected yet)."""
    return not (address_given(ray_address) or ray.is_initialized())


def ensure_ray(ray_address: str | None, ipus_needed: int) -> bool:
    """Connect this process to Ray, unless it already is; return whether this call started a
    private local Ray (the caller then shuts it down).

    A private Ray offers ``ipus_needed`` (at least 256) of the custom resource ``IPU``."""
    if ray.is_initialized():
        return False
    address = address_given(ray_address)
    if address:
        _join(address, SETTING_NAMES["ray_address"] if ray_address else "RAY_ADDRESS")
        return False
    _start_private(ipus_needed)
    return True


def _join(address: str, source: str) -> None:
    """Join the cluster at ``address`` (named by ``source``), failing in seconds if no
    Ray GCS answers there."""
    if address != "auto" and not address.startswith("ray://"):
        check_gcs_answers(address, source)
    try:
        with _token_notice_said_by_us():
            _token_auth_if_a_token_is_there()
            ray.init(address=address, **_COMMON)
        _without_worker_pool_warnings()
    except Exception as error:  # noqa: BLE001 - Ray raises several types for a bad address
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise UserError(f"cannot join the Ray cluster at {quoted(address)} ({source}): "
                        f"{first_line[:200] or type(error).__name__}") from None
    announce(f"the Ray cluster at {address} ({source}; {_authentication()})")


def _start_private(ipus_needed: int) -> None:
    """Start a local Ray for this process alone, in a temp dir of its own."""
    temp_dir = private_temp_dir()
    try:
        with _token_notice_said_by_us():
            context = ray.init(address="local", _temp_dir=str(temp_dir),
                               resources={"IPU": max(LOCAL_IPU_SLOTS, ipus_needed)}, **_COMMON)
        _without_worker_pool_warnings()
    except Exception as error:  # noqa: BLE001 - Ray raises several types when it cannot start
        raise UserError(f"could not start a local Ray in {temp_dir}: "
                        f"{str(error).strip()[:300] or type(error).__name__}; its logs are "
                        f"under {temp_dir}") from None
    session = getattr(context, "address_info", {}).get("session_dir", str(temp_dir))
    announce(f"a private local Ray ({_authentication()}; logs in {session})")


@contextmanager
def _token_notice_said_by_us() -> Iterator[None]:
    """Keep Ray's notice that it turned token authentication on by itself (several lines
    of a third party's log on the user's terminal) off: :func:`announce`'s line says it."""
    notices = logging.getLogger(TOKEN_NOTICE_LOGGER)
    level = notices.level
    notices.setLevel(logging.ERROR)
    try:
        yield
    finally:
        notices.setLevel(level)


class _WithoutWorkerPoolWarnings:
    """Ray's printer of its messages to a driver, less the raylet's warning that its worker
    processes passed another multiple of its startup concurrency (the machine's cores): a
    POD runs a process per device by design, so on 2 cores every launch of 8 devices or
    more drew a WARNING and a link to a Ray issue, and a long ``ipupod serve`` one every
    few launches. Ray's other messages pass as they are."""

    def __init__(self, printing: Callable[[dict[str, Any], bool], None]) -> None:
        self.printing = printing

    def __call__(self, data: dict[str, Any], ignore_prefix: bool) -> None:
        lines = [line for line in data.get("lines", []) if WORKER_POOL_WARNING not in line]
        if lines:
            self.printing({**data, "lines": lines}, ignore_prefix)


def _without_worker_pool_warnings() -> None:
    """Put :class:`_WithoutWorkerPoolWarnings` in Ray's place (once; nothing if this Ray
    prints otherwise)."""
    worker = getattr(getattr(ray, "_private", None), "worker", None)
    printing = getattr(worker, "print_to_stdstream", None)
    if callable(printing) and not isinstance(printing, _WithoutWorkerPoolWarnings):
        worker.print_to_stdstream = _WithoutWorkerPoolWarnings(printing)  # type: ignore[union-attr]


def _authentication() -> str:
    """Whether this process talks to Ray with a token (as Ray decided, or the user set
    with ``RAY_AUTH_MODE``)."""
    on = os.environ.get("RAY_AUTH_MODE", "").lower() == "token"
    return ("token authentication" if on else
            "no token authentication: RAY_AUTH_MODE=token turns it on")



def private_temp_dir() -> Path:
    """Where a private Ray keeps its files: ``ipupod-ray-<uid>`` under Ray's temp root
    (``RAY_TMPDIR``, ``TMPDIR`` or /tmp), or under /tmp if that root is too long for Ray's
    Unix socket paths. Not Ray's default ``/tmp/ray``, so a user's ``ray`` commands (``ray
    status``, ``ray logs``) never find it."""
    root = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or tempfile.gettempdir()
    if len(root) > MAX_TEMP_ROOT_CHARS:
        root = "/tmp"
    return Path(root) / f"ipupod-ray-{os.getuid() if hasattr(os, 'getuid') else 0}"


def announce(which: str) -> None:
    """Say on standard error, in one line, which Ray this process uses."""
    print(f"ipupod: using {which}", file=sys.stderr, flush=True)


def check_gcs_answers(address: str, source: str) -> None:
    """Refuse in seconds an address where no Ray GCS answers: a bad host, a closed port, or
    a server that is not Ray's (each step waits at most ``PROBE_TIMEOUT_SECONDS``)."""
    host, port = _host_port(address, source)
    where = f"the Ray cluster at {quoted(address)} ({source})"
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_SECONDS):
            pass
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise UserError(f"cannot reach {where}: {reason.lower()}; start one with `ray start "
                        "--head` and give its address (host:port), or leave "
                        f"{SETTING_NAMES['ray_address']} and RAY_ADDRESS unset for a private "
                        "local Ray") from None
    _check_grpc_gcs(f"{host}:{port}" if ":" not in host else f"[{host}]:{port}", where)


def _check_grpc_gcs(target: str, where: str) -> None:
    """Whether ``target`` speaks gRPC and knows the GCS's calls (an unauthenticated
    answer counts: only Ray's GCS would ask for Ray's token)."""
    with grpc.insecure_channel(target) as channel:
        try:
            grpc.channel_ready_future(channel).result(timeout=PROBE_TIMEOUT_SECONDS)
        except grpc.FutureTimeoutError:
            raise UserError(f"{where} does not answer as a Ray GCS (no gRPC there): give the "
                            "head's --port, 6379 by default") from None
        call = channel.unary_unary(GCS_METHOD, request_serializer=_raw, response_deserializer=_raw)
        try:
            call(b"", timeout=PROBE_TIMEOUT_SECONDS)
        except grpc.RpcError as error:
            code = error.code() if isinstance(error, grpc.Call) else None
            if code in (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.DEADLINE_EXCEEDED,
                        grpc.StatusCode.UNAVAILABLE):
                raise UserError(f"{where} is a gRPC server but not a Ray GCS ({code.name}): "
                                "give the head's --port, 6379 by default") from None


def _raw(data: bytes) -> bytes:
    """Bytes through unchanged (the probe needs no message types)."""
    return data


def _host_port(address: str, source: str) -> tuple[str, int]:
    """``host:port`` (or ``[v6]:port``) split, or a one-line error saying what is expected."""
    host, _, port_text = address.rpartition(":")
    host = host.strip("[]")
    if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise UserError(f"{source} is host:port (e.g. 127.0.0.1:6379), not {quoted(address)}")
    return host, int(port_text)


def _token_auth_if_a_token_is_there() -> None:
    """Join a cluster the way ``ray start`` joins one: with ``RAY_AUTH_MODE`` unset and a
    token at hand (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``),
    use token authentication. Ray 2.60 turns it on by default for a head started with
    ``ray start --head``, but a driver joining by address does not look for the token, and
    the head refuses it (InvalidAuthToken). Ray's own rule is asked to decide (it also
    refreshes Ray's cached configuration); the token itself is never read here."""
    if "RAY_AUTH_MODE" in os.environ:
        return  # the user chose
    try:  # Ray's rule for `ray start`, in the Ray this project pins (2.60)
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:  # another Ray: fall back to the environment it reads at start
        token_file = Path.home() / ".ray" / "auth_token"
        if (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")
                or token_file.is_file()):
            os.environ["RAY_AUTH_MODE"] = "token"
        return
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
