"""ResNet-50 v1.5 (He et al. 2016, "Deep Residual Learning"; v1.5 puts the stride of a
downsampling bottleneck on its 3x3 convolution, as torchvision's ``resnet50`` does).

Architecture: a 7x7/2 stem convolution to 64 channels, batch norm, ReLU, 3x3/2 max pool;
four stages of 3, 4, 6 and 3 bottleneck blocks of widths 64, 128, 256 and 512 (a 1x1
convolution down to the width, a 3x3, a 1x1 up to 4x the width, each followed by batch
norm; ReLU after the first two and after the residual addition; the first block of a
stage adds a 1x1 projection of its input, of stride 2 from the second stage on); global
average pooling; a fully connected layer to the classes; softmax cross-entropy.

Counted per sample (224x224, 1000 classes):

- parameters: convolution weights ``c_in * c_out * k * k`` (no biases), 2 per batch-norm
  channel (scale and shift; the running mean and variance are buffers, not parameters),
  ``2048 * 1000 + 1000`` for the classifier: 25,557,032 in all, torchvision's figure.
- FLOPs: a convolution is ``2 * h_out * w_out * c_out * c_in * k * k``. Convolutions and
  the classifier make 4.09e9 multiply-adds (torchvision's "4.09 GFLOPS" and the commonly
  quoted "4.1 GFLOPs" count multiply-adds), so 8.18e9 FLOPs; batch norm, ReLU, additions
  and pooling (:mod:`.arithmetic`) add 0.1e9: 8.3e9 forward FLOPs per image.
- ``output_bytes``: the layer's output in the partials dtype, plus, inside a block, the
  tensor the residual addition still waits for (the block input, or once the projection
  has run, the main path's result): what crosses a pipeline cut made after that layer.
- ``stashed_bytes``: a convolution or batch norm keeps its input; a ReLU keeps a one-byte
  mask per element; max pooling keeps a one-byte argmax per output; the projection reads
  the block input that the block's first convolution already keeps, so adds nothing.

One layer per convolution, per batch norm (with its ReLU), per residual addition (with
its ReLU), plus the two pools, the classifier and the loss: 126 layers, named as
torchvision names the parameters (``layer3.2.conv2``), for pipelines of up to 16 stages.
Default precision: float16 throughout; SGD with momentum (one float32 value per
parameter), the MLPerf reference recipe's optimiser for batch sizes below LARS's.
"""

from __future__ import annotations

from cluster.training.workloads.arithmetic import (
    ADD_FLOPS,
    HALF,
    INT32_BYTES,
    LOSS_FLOPS_PER_LOGIT,
    MASK_BYTES,
    NORM_FLOPS,
    RELU_FLOPS,
    Precision,
    whole,
)
from cluster.training.workloads.layers import Layer, LayerKind, Workload
from cluster.training.workloads.registry import builtin_workload

STAGES = ((64, 3), (128, 4), (256, 6), (512, 3))  # (width, blocks) of layer1 .. layer4
EXPANSION = 4  # a bottleneck's output channels over its width
STEM_CHANNELS = 64
MAX_POOL_WINDOW = 3


def _out_size(size: int, kernel: int, stride: int) -> int:
    """Output side of a convolution or pool with ``kernel // 2`` padding."""
    return (size + 2 * (kernel // 2) - kernel) // stride + 1


class _Builder:
    """Layers appended in order; ``p`` is the partials dtype's bytes per element."""

    def __init__(self, p: int) -> None:
        self.p = p
        self.layers: list[Layer] = []

    def conv(self, name: str, c_in: int, c_out: int, kernel: int, stride: int, size: int,
             carried: int = 0, stash: bool = True) -> int:
        """A convolution without bias of a ``size``-square input; returns the output side.
        ``carried``: elements held for a residual addition beside the output."""
        out = _out_size(size, kernel, stride)
        self.layers.append(Layer(
            name, LayerKind.CONV, parameters=c_in * c_out * kernel * kernel,
            forward_flops=2 * out * out * c_out * c_in * kernel * kernel,
            output_bytes=self.p * (c_out * out * out + carried),
            stashed_bytes=self.p * c_in * size * size if stash else 0))
        return out

    def norm(self, name: str, channels: int, size: int, relu: bool, carried: int = 0) -> None:
        """A batch norm, and the ReLU after it if ``relu``."""
        elements = channels * size * size
        self.layers.append(Layer(
            name, LayerKind.NORM, parameters=2 * channels,
            forward_flops=(NORM_FLOPS + (RELU_FLOPS if relu else 0)) * elements,
            output_bytes=self.p * (elements + carried),
            stashed_bytes=(self.p + (MASK_BYTES if relu else 0)) * elements))

    def bottleneck(self, name: str, c_in: int, width: int, stride: int, size: int) -> int:
        """One bottleneck block; returns its output side."""
        c_out, block_input = EXPANSION * width, c_in * size * size
        self.conv(f"{name}.conv1", c_in, width, 1, 1, size, carried=block_input)
        self.norm(f"{name}.bn1", width, size, relu=True, carried=block_input)
        out = self.conv(f"{name}.conv2", width, width, 3, stride, size, carried=block_input)
        self.norm(f"{name}.bn2", width, out, relu=True, carried=block_input)
        self.conv(f"{name}.conv3", width, c_out, 1, 1, out, carried=block_input)
        self.norm(f"{name}.bn3", c_out, out, relu=False, carried=block_input)
        if stride != 1 or c_in != c_out:
            main = c_out * out * out  # bn3's result waits for the projection
            self.conv(f"{name}.downsample.0", c_in, c_out, 1, stride, size, carried=main,
                      stash=False)
            self.norm(f"{name}.downsample.1", c_out, out, relu=False, carried=main)
        elements = c_out * out * out
        self.layers.append(Layer(f"{name}.add", LayerKind.ELEMENTWISE, parameters=0,
                                 forward_flops=(ADD_FLOPS + RELU_FLOPS) * elements,
                                 output_bytes=self.p * elements,
                                 stashed_bytes=MASK_BYTES * elements))
        return out

    def stem(self, size: int) -> int:
        """conv1, bn1 with ReLU, max pool; returns the side after pooling."""
        size = self.conv("conv1", 3, STEM_CHANNELS, 7, 2, size)
        self.norm("bn1", STEM_CHANNELS, size, relu=True)
        out = _out_size(size, MAX_POOL_WINDOW, 2)
        outputs = STEM_CHANNELS * out * out
        self.layers.append(Layer("maxpool", LayerKind.POOL, parameters=0,
                                 forward_flops=MAX_POOL_WINDOW**2 * outputs,
                                 output_bytes=self.p * outputs,
                                 stashed_bytes=MASK_BYTES * outputs))
        return out

    def head(self, channels: int, size: int, classes: int) -> None:
        """Global average pool, classifier, softmax cross-entropy."""
        p = self.p
        self.layers += [
            Layer("avgpool", LayerKind.POOL, parameters=0,
                  forward_flops=channels * size * size, output_bytes=p * channels,
                  stashed_bytes=0),
            Layer("fc", LayerKind.DENSE, parameters=channels * classes + classes,
                  forward_flops=2 * channels * classes, output_bytes=p * classes,
                  stashed_bytes=p * channels),
            Layer("loss", LayerKind.LOSS, parameters=0,
                  forward_flops=LOSS_FLOPS_PER_LOGIT * classes, output_bytes=p,
                  stashed_bytes=p * classes)]


@builtin_workload("resnet50", "ResNet-50 v1.5, 224x224, 25.6 M parameters, per image")
def resnet50(image_size: int = 224, classes: int = 1000,
             precision: Precision = HALF) -> Workload:
    """ResNet-50 v1.5 for square ``image_size`` images (32 to 1024 pixels) and
    ``classes`` classes (2 to 100,000), per image."""
    image_size = whole("image_size", image_size, 32, 1024)
    classes = whole("classes", classes, 2, 100_000)
    b = _Builder(precision.partials.itemsize)
    size = b.stem(image_size)
    c_in = STEM_CHANNELS
    for stage, (width, blocks) in enumerate(STAGES, start=1):
        for block in range(blocks):
            stride = 2 if stage > 1 and block == 0 else 1
            size = b.bottleneck(f"layer{stage}.{block}", c_in, width, stride, size)
            c_in = EXPANSION * width
    b.head(c_in, size, classes)
    image_bytes = 3 * image_size * image_size * precision.partials.itemsize
    return Workload(name="resnet50", layers=tuple(b.layers),
                    input_bytes=image_bytes + INT32_BYTES,  # the image, an int32 label
                    weight_dtype=precision.weight, gradient_dtype=precision.gradient,
                    partials_dtype=precision.partials, optimizer_values_per_parameter=1)
