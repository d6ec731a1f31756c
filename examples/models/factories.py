"""Model factories for ``ipupod workload import`` (docs/your-own-model.md): each function
takes no argument and returns a ``torch.nn.Module``, as a factory must. Import one with

    .venv/bin/ipupod workload import examples/models/factories.py:small_cnn \\
        --input-shape 1,3,32,32 --out small_cnn.yaml

(after ``pip install -e '.[torch]'``). ``bert_large_encoder`` is built on PyTorch's
``meta`` device: counted from shapes alone, without 1.2 GB of weights or any arithmetic.
"""

from __future__ import annotations

import torch
from torch import nn


class ResidualBlock(nn.Module):
    """Two 3x3 convolutions with batch norm and a skip connection (ResNet's basic block)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + x)


class SmallCNN(nn.Module):
    """A stem convolution, two residual blocks, global average pooling, a classifier."""

    def __init__(self, channels: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)
        self.block1 = ResidualBlock(channels)
        self.block2 = ResidualBlock(channels)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.block2(self.block1(self.relu(self.bn(self.stem(x)))))
        return self.fc(torch.flatten(self.pool(x), 1))


def small_cnn() -> nn.Module:
    """A small residual CNN for 32x32 images (input shape 1,3,32,32)."""
    return SmallCNN()


def resnet50() -> nn.Module:
    """torchvision's ResNet-50, without weights (input shape 1,3,224,224)."""
    import torchvision

    return torchvision.models.resnet50(weights=None)


def tiny_transformer() -> nn.Module:
    """Two encoder layers of width 64 (input shape 1,16,64: batch, tokens, hidden)."""
    layer = nn.TransformerEncoderLayer(64, 4, 256, batch_first=True, activation="gelu")
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)


def bert_large_encoder() -> nn.Module:
    """BERT-Large's 24 encoder layers (hidden 1024, 16 heads, FFN 4096, GELU, post-norm)
    on the meta device (input shape 1,128,1024)."""
    with torch.device("meta"):
        layer = nn.TransformerEncoderLayer(1024, 16, 4096, batch_first=True,
                                           activation="gelu")
        return nn.TransformerEncoder(layer, 24, enable_nested_tensor=False)
