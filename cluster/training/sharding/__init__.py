"""Sharding: the MLP's widest layer split by columns over the IPUs of a replica's Graph
Compile Domain, every other layer on its first IPU (docs/hardware.md, "Model parallelism":
sharding across the GCD).

- :mod:`.columns`: the arithmetic, pure NumPy, equal to the whole model's;
- :mod:`.exchange`: the four collectives a micro-batch needs between the IPUs;
- :mod:`.cost`: phantom mode, each IPU's compute and the exchanges in simulated seconds;
- :mod:`.shard_tasks`, :mod:`.real_sharding`: real mode, the shards on the devices.
"""

from cluster.training.sharding.columns import (
    ColumnSplit,
    head_backward,
    head_forward,
    shard_backward,
    shard_columns,
    shard_forward,
    sharded_loss_and_grad,
    tail_forward_backward,
    widest_layer,
)
from cluster.training.sharding.cost import ShardedTime, sharded_time
from cluster.training.sharding.real_sharding import train_sharded

__all__ = ["ColumnSplit", "ShardedTime", "head_backward", "head_forward", "shard_backward",
           "shard_columns", "shard_forward", "sharded_loss_and_grad", "sharded_time",
           "tail_forward_backward", "train_sharded", "widest_layer"]
