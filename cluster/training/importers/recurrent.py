"""FLOPs of recurrent layers (LSTM, GRU, Elman RNN) from their sizes: the gate formulas.

Both front ends price a recurrent layer here, from its sizes, rather than op by op: PyTorch
runs an LSTM on the CPU as one fused op (``mkldnn_rnn_layer``) that no table prices, and
ONNX has ``LSTM``, ``GRU`` and ``RNN`` nodes; so a PyTorch module and its ONNX export count
alike. The equations are PyTorch's (the ``torch.nn.LSTM``, ``torch.nn.GRU`` and
``torch.nn.RNN`` documentation), per time step, sample and direction, with ``I`` the
input size, ``H`` the hidden size and ``P`` the size of the state fed back (``proj_size``
if the LSTM projects, else ``H``). A multiply-add counts 2; a sigmoid or tanh
``ACTIVATION_FLOPS``, other elementwise ops 1, as :mod:`.op_costs` prices them; the
biases added after a product are not counted (as for every product here).

- LSTM: gates ``i, f, g, o = act(W_i x + W_h h)``: ``2 * 4H * (I + P)`` for the products,
  ``4H`` for their sums, ``5H`` activations (three sigmoids, ``tanh(g)``, ``tanh(c)``),
  ``c' = f * c + i * g`` and ``h' = o * tanh(c')``: ``4H``; a projection ``2 H P``.
- GRU: ``r, z = sigmoid(W_i x + W_h h)``, ``n = tanh(W_in x + r * (W_hn h))``,
  ``h' = (1 - z) * n + z * h``: ``2 * 3H * (I + H)`` for the products, ``3H``
  activations, ``8H`` elementwise (2 gate sums, ``r *`` and ``+`` for ``n``, 4 for ``h'``).
- RNN: ``h' = act(W_i x + W_h h)``: ``2 * H * (I + H)``, ``H`` sums, ``H`` activations
  (tanh ``ACTIVATION_FLOPS``, ReLU 1).

A stack of ``layers`` feeds each layer the previous one's output: ``directions * P``
wide. The total is the per-step count times the positions (time steps times batch).
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster.training.workloads.arithmetic import ACTIVATION_FLOPS, RELU_FLOPS

GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
"""Gates per cell: the rows of its weight matrices, in units of the hidden size."""
ACTIVATIONS = {"lstm": 5, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
"""Activations per hidden unit and step."""
ELEMENTWISE = {"lstm": 8, "gru": 8, "rnn_tanh": 1, "rnn_relu": 1}
"""Other elementwise FLOPs per hidden unit and step (gate sums and the state update)."""


@dataclass(frozen=True)
class RecurrentLayer:
    """A recurrent module's sizes: ``cell`` is one of :data:`GATES`' keys."""

    cell: str
    input_size: int
    hidden_size: int
    layers: int = 1
    directions: int = 1
    proj_size: int = 0

    @property
    def state_size(self) -> int:
        """The size of the output and of the state fed back: ``P``, else ``H``."""
        return self.proj_size or self.hidden_size


def step_flops(cell: str, input_size: int, hidden_size: int, proj_size: int = 0) -> int:
    """FLOPs of one layer's step, for one sample and one direction (module docstring)."""
    fed_back = proj_size or hidden_size
    activation = RELU_FLOPS if cell == "rnn_relu" else ACTIVATION_FLOPS
    products = 2 * GATES[cell] * hidden_size * (input_size + fed_back)
    pointwise = (ELEMENTWISE[cell] + ACTIVATIONS[cell] * activation) * hidden_size
    projection = 2 * hidden_size * proj_size
    return products + pointwise + projection


def recurrent_flops(layer: RecurrentLayer, positions: int) -> int:
    """Forward FLOPs of the whole module over ``positions`` (time steps x batch)."""
    per_position = 0
    width = layer.input_size
    for _ in range(layer.layers):
        per_position += layer.directions * step_flops(layer.cell, width, layer.hidden_size,
                                                      layer.proj_size)
        width = layer.directions * layer.state_size
    return per_position * positions


def _bases(module: object) -> set[str]:
    return {cls.__name__ for cls in type(module).__mro__}


def torch_recurrent(module: object) -> RecurrentLayer | None:
    """The sizes of a ``torch.nn.LSTM``, ``GRU`` or ``RNN`` (or their ``*Cell``), read
    from its attributes; None for any other module."""
    bases = _bases(module)
    sizes = {"input_size": int(getattr(module, "input_size", 0)),
             "hidden_size": int(getattr(module, "hidden_size", 0))}
    if "RNNBase" in bases:
        mode = str(getattr(module, "mode", "")).lower()
        if mode not in GATES:
            return None
        return RecurrentLayer(mode, layers=int(getattr(module, "num_layers", 1)),
                              directions=2 if getattr(module, "bidirectional", False) else 1,
                              proj_size=int(getattr(module, "proj_size", 0)), **sizes)
    if "RNNCellBase" in bases:
        cell = ("lstm" if "LSTMCell" in bases else "gru" if "GRUCell" in bases else
                f"rnn_{getattr(module, 'nonlinearity', 'tanh')}")
        return RecurrentLayer(cell, **sizes) if cell in GATES else None
    return None


def torch_positions(first_input: object, layer: RecurrentLayer) -> int | None:
    """Time steps x batch of a recurrent module's first input: a tensor (``..., I``) or a
    ``PackedSequence`` (its ``data`` is ``positions x I``); None if neither."""
    data = getattr(first_input, "data", None)
    if type(first_input).__name__ == "PackedSequence" and data is not None:
        return int(data.shape[0])
    numel = getattr(first_input, "numel", None)
    if numel is None or not layer.input_size:
        return None
    return int(numel()) // layer.input_size


ONNX_CELLS = {"LSTM": "lstm", "GRU": "gru", "RNN": "rnn"}


def onnx_recurrent(op_type: str, attributes: dict[str, object],
                   input_size: int) -> RecurrentLayer | None:
    """An ONNX ``LSTM``, ``GRU`` or ``RNN`` node as one layer (its ``hidden_size`` and
    ``direction`` attributes, the input's last dimension); None for other nodes or one
    without ``hidden_size``."""
    cell = ONNX_CELLS.get(op_type)
    hidden = attributes.get("hidden_size")
    if cell is None or not isinstance(hidden, int) or hidden < 1:
        return None
    if cell == "rnn":
        activations = attributes.get("activations") or [b"Tanh"]
        first = activations[0] if isinstance(activations, list) and activations else "Tanh"
        cell = "rnn_relu" if "relu" in str(first).lower() else "rnn_tanh"
    directions = 2 if attributes.get("direction") in (b"bidirectional", "bidirectional") else 1
    return RecurrentLayer(cell, input_size, hidden, directions=directions)
