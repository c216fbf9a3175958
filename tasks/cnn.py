"""The five CNNs of FedLoRA's Table 1 (papers/fedlora_model_heterogeneous.txt, Sec. 6.1).

=======  =======  =======  =======  =======  =======
Layer    CNN-1    CNN-2    CNN-3    CNN-4    CNN-5
=======  =======  =======  =======  =======  =======
Conv1    5x5, 16  5x5, 16  5x5, 16  5x5, 16  5x5, 16
Pool1    2x2      2x2      2x2      2x2      2x2
Conv2    5x5, 32  5x5, 16  5x5, 32  5x5, 32  5x5, 32
Pool2    2x2      2x2      2x2      2x2      2x2
FC1      2000     2000     1000     800      500
FC2      500      500      500      500      500
FC3      classes  classes  classes  classes  classes
=======  =======  =======  =======  =======  =======

Convolutions have no padding and are followed by ReLU, as are FC1 and FC2. With a 32x32
RGB input and 10 classes the float32 sizes are 10.00 / 6.92 / 5.04 / 4.04 / 2.56 MiB
against the table's 10.00 / 6.92 / 5.04 / 3.81 / 2.55 MB: CNN-1..3 match to the digit,
which pins the unpadded convs and the flattened 5x5 map (800 or 400 features); no reading
of the table gives CNN-4's 3.81 (FC1 800 -> FC2 500 alone is 0.4M parameters), so we take
its layer widths, not its size, as the definition.

28x28 inputs (Fashion-MNIST): the *data* is zero-padded to 32x32 (2 px of background on
each side, as LeNet-5 did for MNIST) and the first conv takes ``in_channels=1``; every
layer after it then has Table 1's dimensions. ``img_size`` still lets any square input
through (the flattened size follows from it), but the tasks feed 32x32.

``features(x)`` = convs + FC1 + FC2, the 500-d representation; ``hidden(x)`` = the FC1
output; ``head`` = FC3, the classifier. State-dict prefixes: ``convs.``, ``fc.0.`` (FC1),
``fc.1.`` (FC2), ``head.`` (FC3). Methods do not use these names: the task's model bundle
declares the parts they split the model into (``fedbench.tasks.cnn_task.CNN_PARTS``).
"""

from __future__ import annotations

import torch
from torch import nn

#: (conv2 channels, FC1 width) per model id, Table 1
TABLE1: dict[int, tuple[int, int]] = {1: (32, 2000), 2: (16, 2000), 3: (32, 1000), 4: (32, 800), 5: (32, 500)}
CONV1_CHANNELS = 16
FEATURE_DIM = 500  # FC2, the same in all five models
ARCHS: tuple[str, ...] = tuple(f"cnn{k}" for k in TABLE1)


class FCBlock(nn.Module):
    """One fully connected layer + ReLU; ``linear`` is the LoRA target suffix."""

    def __init__(self, d_in: int, d_out: int):
        super().__init__()
        self.linear = nn.Linear(d_in, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


class TableOneCNN(nn.Module):
    """conv-pool-conv-pool-FC1-FC2 feature extractor + FC3 classifier ``head``."""

    def __init__(self, conv2: int, fc1: int, in_channels: int, n_classes: int, img_size: int = 32):
        super().__init__()
        side = ((img_size - 4) // 2 - 4) // 2  # two unpadded 5x5 convs, each followed by a 2x2 pool
        if side < 1:
            raise ValueError(f"img_size {img_size} is too small for two 5x5 convs and two 2x2 pools")
        self.convs = nn.Sequential(
            nn.Conv2d(in_channels, CONV1_CHANNELS, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(CONV1_CHANNELS, conv2, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(),
        )
        self.fc = nn.Sequential(FCBlock(conv2 * side * side, fc1), FCBlock(fc1, FEATURE_DIM))
        self.head = nn.Linear(FEATURE_DIM, n_classes)
        self.fc1_dim, self.feature_dim = fc1, FEATURE_DIM

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        """FC1 output (B, fc1_dim)."""
        return self.fc[0](self.convs(x))

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The representation (B, 500): convs + FC1 + FC2."""
        return self.fc(self.convs(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))  # (B, n_classes)


def cnn(k: int, in_channels: int, n_classes: int, img_size: int = 32) -> TableOneCNN:
    """CNN-``k`` (k in 1..5) of FedLoRA Table 1."""
    if k not in TABLE1:
        raise ValueError(f"CNN-{k} is not in Table 1 (k in 1..5)")
    conv2, fc1 = TABLE1[k]
    return TableOneCNN(conv2, fc1, in_channels, n_classes, img_size)


def arch_index(arch: str | None) -> int:
    """'cnn1'..'cnn5' -> 1..5; None -> 1 (the model-homogeneous setting's CNN-1)."""
    if arch is None:
        return 1
    if arch not in ARCHS:
        from fedbench.errors import UserError

        raise UserError(f"unknown arch {arch!r} (choose from: {', '.join(ARCHS)})")
    return int(arch[3:])
