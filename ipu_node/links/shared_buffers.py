"""Collective buffers a peer on this machine reads in place: a link's shared memory
without the sender's copy.

A device allocates its collective buffers (:meth:`ipu_node.store.TensorStore.empty`) with
:func:`shared_empty`: each buffer of :data:`MIN_SHARED_BUFFER_BYTES` or more is an
anonymous memory file (``memfd_create``, mode 0600, its pages reserved at once so that a
full tmpfs is an error here, never a SIGBUS later), announced as
``ipupod-buffer-<pid>-<fd>-<number>-<random>``. It has no name in any folder: nothing is
left behind when the process dies, and its memory goes back once the last mapping of it
goes.

- **Announced** to a peer (:mod:`ipu_node.links.shared_link`) by name and size before the
  first chunk that refers to it; the receiver opens it through ``/proc/<pid>/fd/<fd>``,
  checks that it is that memory file (its link name, our user's, private, the announced
  size), and maps it read-only.
- **Referred to** by (buffer, offset, length) in place of a chunk's payload: the receiver
  reduces straight from the sender's buffer into its own. Each reference holds a ticket of
  the link's segment (:mod:`ipu_node.links.shared_slots`) that says which range is in
  flight; the sender's push returns only once every ticket came back (the receiver landed
  the range), so it never writes a range its peer has yet to read.
- **Forgotten**: when a buffer is freed here, the next push to each peer that mapped it
  tells that peer to unmap it; a receiver also drops the buffers of senders that are gone.
"""

from __future__ import annotations

import itertools
import mmap
import os
import re
import secrets
import stat
import threading
import weakref
from typing import NamedTuple

import numpy as np

from ipu_node.device_errors import DeviceError

MIN_SHARED_BUFFER_BYTES = 1 << 20  # smaller buffers' chunks are few and small: not worth it
MAX_BUFFER_BYTES = 1 << 40
MAX_BUFFER_SEGMENTS = 4096  # mapped by one receiver at a time
_NAME = re.compile(r"ipupod-buffer-(\d+)-(\d+)-(\d+)-([0-9a-f]{16})")  # pid, fd, number


def _file_name(pid: int, number: int, token: str) -> str:
    """The memory file's own name (``/proc/<pid>/fd/<fd>`` links to it)."""
    return f"ipupod-buffer-{pid}-{number}-{token}"


class SharedBuffer(NamedTuple):
    """One buffer as its maker holds it: the memory file's name, its number (tickets name
    it by that), size in bytes, start address in this process, and file descriptor."""

    name: str
    number: int
    size: int
    address: int
    descriptor: int


def _refused(reason: str) -> DeviceError:
    return DeviceError(f"a malformed chunk arrived on a link: {reason}")


class _Registry:
    """This process's shared buffers, by their mappings (held weakly: a buffer is live
    while any array or view of it is); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buffers: weakref.WeakKeyDictionary[mmap.mmap, SharedBuffer] = (
            weakref.WeakKeyDictionary())
        self._numbers = itertools.count(1)

    def allocate(self, nbytes: int) -> mmap.mmap | None:
        """A new shared mapping of ``nbytes``, or None if the system has none to give."""
        number, token = next(self._numbers), secrets.token_hex(8)
        try:
            descriptor = os.memfd_create(_file_name(os.getpid(), number, token),
                                         os.MFD_CLOEXEC)
        except (AttributeError, OSError):
            return None
        try:
            os.fchmod(descriptor, 0o600)
            os.posix_fallocate(descriptor, 0, nbytes)  # reserved now, or refused now
            mapping = mmap.mmap(descriptor, nbytes)
        except OSError:
            os.close(descriptor)
            return None
        name = f"ipupod-buffer-{os.getpid()}-{descriptor}-{number}-{token}"
        address = _address(memoryview(mapping))
        with self._lock:
            self._buffers[mapping] = SharedBuffer(name, number, nbytes, address, descriptor)
        weakref.finalize(mapping, os.close, descriptor)  # the file goes with the mapping
        return mapping

    def locate(self, payload: memoryview) -> tuple[SharedBuffer, int] | None:
        """The shared buffer ``payload`` is a view of, and its offset there, or None. Found
        through what the view holds, not by its address: a buffer that is being freed
        cannot be mistaken for new memory at the same place."""
        owner = _owner(payload)
        if not isinstance(owner, mmap.mmap):
            return None
        with self._lock:
            buffer = self._buffers.get(owner)
        if buffer is None or not payload.contiguous:
            return None
        offset = _address(payload) - buffer.address
        return (buffer, offset) if 0 <= offset <= buffer.size - payload.nbytes else None

    def live(self, name: str) -> bool:
        with self._lock:
            return any(buffer.name == name for buffer in self._buffers.values())


def _owner(payload: memoryview) -> object:
    """The object that owns the memory ``payload`` views (through arrays and views)."""
    owner: object = payload.obj
    while True:
        if isinstance(owner, np.ndarray) and owner.base is not None:
            owner = owner.base
        elif isinstance(owner, memoryview):
            owner = owner.obj
        else:
            return owner


def _address(view: memoryview) -> int:
    return int(np.frombuffer(view, np.uint8).__array_interface__["data"][0])


REGISTRY = _Registry()


def shared_empty(elements: int, dtype: np.dtype | type | str) -> np.ndarray:
    """An uninitialised 1-D array a peer on this machine can map (``np.empty`` when it is
    small or the system has no shared memory to give)."""
    dtype = np.dtype(dtype)
    nbytes = elements * dtype.itemsize
    mapping = REGISTRY.allocate(nbytes) if nbytes >= MIN_SHARED_BUFFER_BYTES else None
    if mapping is None:
        return np.empty(elements, dtype)
    return np.frombuffer(mapping, dtype, count=elements)


class _Mapped(NamedTuple):
    memory: memoryview  # read-only
    number: int
    pid: int


class PeerBuffers:
    """The buffers senders on this machine announced to one receiver, mapped read-only;
    thread-safe."""

    def __init__(self, device: str, max_buffers: int = MAX_BUFFER_SEGMENTS) -> None:
        self.device, self.max_buffers = device, max_buffers
        self._mapped: dict[str, _Mapped] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._mapped)

    def attach(self, name: str, size: int) -> None:
        """Map the buffer ``name`` of ``size`` bytes its maker announced."""
        match = _NAME.fullmatch(name)
        if match is None:
            raise _refused(f"{name[:80]!r} is not a shared buffer's name")
        if not 0 < size <= MAX_BUFFER_BYTES:
            raise _refused(f"a shared buffer of {size} bytes")
        pid, descriptor, number = (int(part) for part in match.groups()[:3])
        self.drop_gone()
        with self._lock:
            if len(self._mapped) >= self.max_buffers:
                raise _refused(f"{self.device} maps {self.max_buffers} shared buffers already")
        link = f"/memfd:{_file_name(pid, number, match.group(4))} (deleted)"
        memory = memoryview(_map_buffer(name, link, f"/proc/{pid}/fd/{descriptor}",
                                        size)).toreadonly()
        with self._lock:
            self._mapped[name] = _Mapped(memory, number, pid)

    def forget(self, name: str) -> None:
        """Unmap ``name`` (its maker freed it); views still held keep their pages."""
        with self._lock:
            self._mapped.pop(name, None)

    def drop_gone(self) -> None:
        """Forget the buffers of makers that are gone (a restarted device)."""
        with self._lock:
            pids = {mapped.pid for mapped in self._mapped.values()}
            gone = {pid for pid in pids if _process_gone(pid)}
            for name in [n for n, m in self._mapped.items() if m.pid in gone]:
                del self._mapped[name]

    def view(self, name: str, number: int, offset: int, length: int) -> memoryview:
        """``length`` bytes at ``offset`` of buffer ``name``, which its ticket names by
        ``number``; a range outside it, or a buffer not announced, is refused."""
        with self._lock:
            mapped = self._mapped.get(name)
        if mapped is None or mapped.number != number:
            raise _refused(f"shared buffer {name[:80]!r} was not announced on this link")
        if not (length > 0 and offset >= 0 and offset + length <= len(mapped.memory)):
            raise _refused(f"{length} bytes at {offset} are outside shared buffer {name} "
                           f"({len(mapped.memory)} bytes)")
        return mapped.memory[offset:offset + length]

    def close(self) -> None:
        with self._lock:
            self._mapped.clear()


def _process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        pass
    return False


def _map_buffer(name: str, link: str, path: str, size: int) -> mmap.mmap:
    """Open the memory file ``name`` at ``path`` (its maker's descriptor), check it (the
    file ``link`` names, ours, private, ``size`` bytes) and map it read-only."""
    try:
        if os.readlink(path) != link:
            raise _refused(f"shared buffer {name} is not held by its maker")
        opened = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        raise _refused(f"shared buffer {name} cannot be opened: {error.strerror}") from None
    try:
        info = os.fstat(opened)
        if (os.readlink(f"/proc/self/fd/{opened}") != link or not stat.S_ISREG(info.st_mode)
                or info.st_uid != os.geteuid() or info.st_mode & 0o077
                or info.st_size != size):
            raise _refused(f"shared buffer {name} is not a private file of {size} bytes of ours")
        return mmap.mmap(opened, size, access=mmap.ACCESS_READ)
    finally:
        os.close(opened)
