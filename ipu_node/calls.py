"""Calling device actors with a deadline, and naming the device that failed.

Every wait on an actor goes through here, so a dead, restarting or late device always
becomes the same kind of error, naming the card and its IPUs (``docs/real-mode.md``: every
wait has a deadline; a dead actor turns into a clear error, never a hang):

- :func:`wait_all`: all answers, or the first device that is late, died or is restarting;
- :func:`gather`: a collective's answers, ending at the first failure and telling the other
  devices to abort;
- :func:`poll`: each device's answer and state (healthy, restarting, unreachable, dead)
  within a short deadline, for health checks;
- :func:`settle`: wait, bounded, for calls whose answers do not matter.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import ray

from cluster.errors import ScheduleError, UserError
from ipu_node.answers import HealthState
from ipu_node.device_errors import DeviceDied, DeviceError, DeviceRestarting, NodeLost
from ipu_node.device_spec import DeviceSpec, describe

ABORT_GRACE_SECONDS = 2.0  # after a failure: how long the other devices get to stop
NODE_CHECK_SECONDS = 1.0  # a late answer: how long before asking whether its node is gone
LostNodes = Callable[[list[int]], str]  # devices (indices) -> the line naming their lost nodes


def wait_all(refs: list, specs: Sequence[DeviceSpec], deadline_seconds: float, what: str,
             lost: LostNodes | None = None) -> list:
    """The answers of ``refs`` (one per device of ``specs``), within ``deadline_seconds``; a late
    device is a DeviceError, a restarting one DeviceRestarting, a dead one DeviceError,
    each naming the device. With ``lost``, devices still silent after
    :data:`NODE_CHECK_SECONDS` (and every as long after) are checked against their Ray
    nodes: a device whose node is gone will not answer in time, and :class:`NodeLost`
    names the node at once instead of waiting out the deadline."""
    index_of = {ref: i for i, ref in enumerate(refs)}
    pending, limit = list(refs), time.monotonic() + deadline_seconds
    while pending:
        step = max(0.0, limit - time.monotonic())
        _, pending = ray.wait(pending, num_returns=len(pending),
                              timeout=step if lost is None else min(step, NODE_CHECK_SECONDS))
        late = ", ".join(specs[index_of[r]].name for r in pending)
        if pending and time.monotonic() >= limit:
            raise DeviceError(f"{what}: no answer within {deadline_seconds:g} s from {late}")
        note = lost([index_of[r] for r in pending]) if pending and lost else ""
        if note:
            raise NodeLost(f"{note}: {what}: no answer from {late}")
    results = []
    for spec, ref in zip(specs, refs):
        try:
            results.append(ray.get(ref))
        except ray.exceptions.ActorUnavailableError:
            raise DeviceRestarting(f"{what}: device {describe(spec)} is restarting after it "
                                   "died: try again in a moment") from None
        except ray.exceptions.RayActorError as error:
            raise DeviceError(f"{what}: device {describe(spec)} died: {error}") from None
    return results


def gather(refs: list, specs: Sequence[DeviceSpec], deadline_seconds: float, *,
           abort: Callable[[str], None] | None = None,
           on_death: Callable[[int, str], None] | None = None,
           what: str = "the collective", grace_seconds: float = ABORT_GRACE_SECONDS) -> list:
    """Results of ``refs`` in order. The first failure (a dead device, a link timeout) ends
    the wait at once: with ``abort`` the other devices are told ``abort(reason)`` and get
    ``grace_seconds`` (:data:`ABORT_GRACE_SECONDS` by default) to stop, and a device found dead
    meanwhile is the one the DeviceError names (``on_death(index, why)`` hears of it)."""
    index_of = {ref: i for i, ref in enumerate(refs)}
    results: list = [None] * len(refs)
    pending, limit = list(refs), time.monotonic() + deadline_seconds
    while pending:
        done, pending = ray.wait(pending, num_returns=1,
                                 timeout=max(0.0, limit - time.monotonic()))
        if not done:
            late = ", ".join(specs[index_of[r]].name for r in pending)
            error: Exception = DeviceError(f"{what} did not finish within {deadline_seconds:g} s; "
                                           f"still running: {late}")
        else:
            try:
                results[index_of[done[0]]] = ray.get(done[0])
                continue
            except Exception as failure:  # noqa: BLE001 - becomes an error naming the device
                error = name_failure(failure, specs[index_of[done[0]]], what)
                if died(failure) and on_death:
                    on_death(index_of[done[0]], str(error))
        if abort is None:
            _heard_later(pending)
            raise error
        abort(str(error))
        raise _worst(error, pending, specs, index_of, what, on_death, grace_seconds)
    return results


def _heard_later(refs: list) -> None:
    """Take the answers of calls left running after a failure was reported, when they
    come: their own failures echo the one reported, and Ray would otherwise print each on
    the user's terminal ("Unhandled error ...") when the reference is dropped."""
    for ref in refs:
        ref.future().add_done_callback(lambda answer: answer.exception())


def _worst(error: Exception, pending: list, specs: Sequence[DeviceSpec],
           index_of: dict[Any, int], what: str,
           on_death: Callable[[int, str], None] | None, grace_seconds: float) -> Exception:
    """After an abort: a device that died meanwhile is the better cause to report."""
    settled, still = ray.wait(pending, num_returns=len(pending), timeout=grace_seconds)
    _heard_later(still)
    for ref in settled:
        try:
            ray.get(ref)
        except Exception as failure:  # noqa: BLE001
            if died(failure) and not isinstance(error, DeviceDied):
                error = name_failure(failure, specs[index_of[ref]], what)
                if on_death:
                    on_death(index_of[ref], str(error))
    return error


def poll(refs: list, deadline_seconds: float) -> list[tuple[Any, HealthState]]:
    """Each device's answer (or None) and state: ``healthy``, ``restarting`` (Ray is
    bringing it back), ``unreachable`` (no answer in time) or ``dead`` (Ray gave up)."""
    ready = set(ray.wait(refs, num_returns=len(refs), timeout=deadline_seconds)[0])
    states: list[tuple[Any, HealthState]] = []
    for ref in refs:
        answer, state = None, HealthState.UNREACHABLE
        if ref in ready:
            try:
                answer, state = ray.get(ref), HealthState.HEALTHY
            except ray.exceptions.ActorDiedError:
                state = HealthState.DEAD
            except ray.exceptions.RayActorError:
                state = HealthState.RESTARTING
        states.append((answer, state))
    return states


def settle(refs: list, deadline_seconds: float) -> list:
    """Wait up to ``deadline_seconds`` for ``refs``; return the ones that finished."""
    return ray.wait(refs, num_returns=len(refs), timeout=deadline_seconds)[0] if refs else []


def succeeded(ref: Any) -> bool:
    """Whether a finished call returned (rather than raised, or its actor died)."""
    try:
        ray.get(ref, timeout=0)
    except Exception:  # noqa: BLE001 - any failure is a no
        return False
    return True


def died(failure: BaseException) -> bool:
    """Whether ``failure`` says the actor died (rather than the call failing)."""
    return isinstance(failure, ray.exceptions.RayActorError)


def died_during(spec: DeviceSpec, what: str) -> DeviceDied:
    return DeviceDied(f"device {describe(spec)} died during {what}: Ray restarts it with its "
                      "memory empty; run the collective again once it is back (put its "
                      "tensors again first)")


def name_failure(failure: BaseException, spec: DeviceSpec, what: str) -> Exception:
    """The error to raise for ``failure`` of the device ``spec``: the user's own mistake
    as it was raised, anything else a DeviceError naming the device."""
    if died(failure):
        return died_during(spec, what)
    if isinstance(failure, ray.exceptions.RayTaskError):
        cause = failure.cause if getattr(failure, "cause", None) else failure
        if isinstance(cause, (UserError, ScheduleError)):
            return cause
        return DeviceError(f"device {describe(spec)}: {cause}")
    return DeviceError(f"device {describe(spec)}: {failure}")
