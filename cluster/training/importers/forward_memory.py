"""Refuse a traced forward that cannot fit in this machine's memory, from shapes alone.

The import runs one forward pass in training mode and keeps every tensor it makes (to know
each one's last reader), so it needs about the bytes of every tensor made: ResNet-50 at
batch 128 makes about 11 GB. Before that pass runs, the same forward runs on PyTorch's
``meta`` device (``torch.func.functional_call`` with meta copies of the parameters and
buffers: shapes only, no memory, no arithmetic) under a dispatch mode that adds up the
bytes of every new tensor (views and in-place results excluded: they make none). If that
and the input come to more than the memory available (the kernel's ``MemAvailable``), the
import is refused in one line with the figures. A forward that cannot run on the meta
device (one reading a value, ``if x.sum() > 0``) is checked on its input alone.
"""

from __future__ import annotations

from typing import Any

from cluster.errors import UserError
from cluster.host_memory import available_ram_bytes


def _shown(nbytes: int) -> str:
    """Bytes in decimal units, as memory is quoted: ``11.3 GB``, ``77 MB``, ``64 bytes``."""
    for unit, factor in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= factor:
            return f"{nbytes / factor:.1f} {unit}" if unit == "GB" else \
                f"{nbytes / factor:.0f} {unit}"
    return f"{nbytes} bytes"


def forward_bytes(module: Any, sample: tuple[Any, ...], torch: Any) -> int | None:
    """Bytes of the tensors ``module``'s training-mode forward makes on ``sample`` (meta
    tensors), counted on the meta device; None if the forward cannot run there."""
    from torch.utils._python_dispatch import TorchDispatchMode

    made = [0]

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            if not any(r.alias_info is not None for r in func._schema.returns):
                made[0] += sum(t.numel() * t.element_size()
                               for t in torch.utils._pytree.tree_leaves(out)
                               if isinstance(t, torch.Tensor))
            return out

    state = {name: torch.empty_like(t, device="meta") for name, t in
             [*module.named_parameters(), *module.named_buffers()]}
    was_training = module.training
    module.train()
    try:
        with torch.enable_grad(), Count():
            torch.func.functional_call(module, state, sample)
    except Exception:  # noqa: BLE001 - the user's forward: any failure means "unknown"
        return None
    finally:
        module.train(was_training)
    return made[0]


def check_forward_fits(module: Any, sample: tuple[Any, ...], input_made: bool,
                       torch: Any) -> None:
    """A UserError if the traced forward of ``module`` on ``sample`` (meta tensors of
    the input's shapes) needs more memory than is available; ``input_made``: the input
    is yet to be made (a random one), so its bytes count too. A module on the meta
    device needs none."""
    if any(p.device.type == "meta" for p in module.parameters()):
        return
    inputs = sum(t.numel() * t.element_size() for t in sample) if input_made else 0
    activations = forward_bytes(module, sample, torch)
    needed, available = inputs + (activations or 0), available_ram_bytes()
    if needed <= available:
        return
    shape = ",".join(map(str, sample[0].shape))
    parts = (f"the input {_shown(inputs)}, " if input_made else "") + (
        f"its tensors {_shown(activations)}" if activations is not None else "")
    smaller = "import at batch 1 (counts are per sample), or " if sample[0].shape[0] > 1 else ""
    raise UserError(f"the traced forward on an input of shape {shape} needs about "
                    f"{_shown(needed)} ({parts.rstrip(', ')}), more than the "
                    f"{_shown(available)} of memory available here: {smaller}build the "
                    "model on the meta device (docs/your-own-model.md)")
