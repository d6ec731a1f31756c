"""What the POD knows of its devices between collectives, so that starting one is a
single round trip: each IPU's free memory and the shape and dtype of its named tensors,
as the devices last said.

A collective must check, before any byte moves, that its inputs match and that every IPU
has room for its buffers (:mod:`ipu_node.executor`). Asking the devices each time costs
two Ray round trips (~4-8 ms each) before the collective's own. The devices' answers say
it already: ``stats`` and ``tensor_info`` answers, and each collective's own answer
(:class:`~ipu_node.answers.RunAnswer`: memory and output tensor after it). What could
change it without the POD hearing the new state makes it forget that device:

- a ``put`` (the tensor is known exactly; the memory is forgotten), or any other call
  that may change a device's tensors (``execute``, ``free``: :data:`READ_ONLY` lists the
  calls that cannot);
- a restart noticed (:meth:`ipu_node.roster.Roster.rejoin`), a device noted down, or a
  collective that failed.

A device that restarted unnoticed fails the next collective it is in at once (it is not
wired in, its tensors are gone) and the failure wires it in again and names it, as before.
A device still checks its own inputs' size and dtype against the schedule before it lays
them out, so a stale fact could only refuse, never compute wrong.
"""

from __future__ import annotations

import threading

from ipu_node.answers import IpuMemoryStats

TensorInfo = dict[int, tuple[tuple[int, ...], str]]  # IPU -> (shape, dtype name)
READ_ONLY = frozenset({"info", "stats", "tensor_info", "get", "record_wall", "wall_spans",
                       "relayed"})


class KnownFacts:
    """Per device (index into the POD's devices): free bytes per IPU, and per tensor name
    the shape and dtype on each of its IPUs holding it (a device's answer for a name is
    complete: its IPUs not in it hold no such tensor)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: dict[int, dict[int, int]] = {}
        self._tensors: dict[int, dict[str, TensorInfo]] = {}
        self._busy: dict[int, int] = {}  # collectives running on each device now

    def started(self, devices: list[int]) -> None:
        """A collective started on ``devices``: their memory is not known until it ends
        (its buffers are in use), so a collective beside it asks."""
        with self._lock:
            for device in devices:
                self._busy[device] = self._busy.get(device, 0) + 1

    def ended(self, devices: list[int]) -> None:
        """The collective of :meth:`started` ended, or failed."""
        with self._lock:
            for device in devices:
                self._busy[device] -= 1
                if not self._busy[device]:
                    del self._busy[device]

    def forget(self, devices: list[int] | None = None) -> None:
        """Forget what ``devices`` (every device by default) said."""
        with self._lock:
            if devices is None:
                self._free.clear()
                self._tensors.clear()
                return
            for device in devices:
                self._free.pop(device, None)
                self._tensors.pop(device, None)

    def heard_memory(self, device: int, memory: dict[int, IpuMemoryStats]) -> None:
        """A device's memory as it just said (``stats`` or a collective's answer; while
        another collective runs on it, kept but not used until that one ends)."""
        with self._lock:
            self._free[device] = {ipu: int(m["free_bytes"]) for ipu, m in memory.items()}

    def heard_tensor(self, device: int, name: str, info: TensorInfo) -> None:
        """Which of a device's IPUs hold tensor ``name``, as it just said."""
        with self._lock:
            self._tensors.setdefault(device, {})[name] = dict(info)

    def was_put(self, device: int, ipu: int, name: str, shape: tuple[int, ...],
                dtype: str) -> None:
        """Tensor ``name`` was stored on ``ipu``: its memory use is no longer known."""
        with self._lock:
            self._free.pop(device, None)
            held = self._tensors.get(device, {}).get(name)
            if held is not None:
                held[ipu] = (shape, dtype)

    def free_bytes(self, device: int) -> dict[int, int] | None:
        """Free bytes per IPU of ``device`` as last said, or None if not known."""
        with self._lock:
            known = None if device in self._busy else self._free.get(device)
            return None if known is None else dict(known)

    def tensor(self, device: int, name: str) -> TensorInfo | None:
        """Shape and dtype of ``name`` on each IPU of ``device`` holding it, or None if
        not known."""
        with self._lock:
            held = self._tensors.get(device, {}).get(name)
            return None if held is None else dict(held)
