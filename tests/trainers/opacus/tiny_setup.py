"""A user's own Opacus training, as ``--setup tiny_setup.py:build`` takes it: a tiny linear classifier."""

import torch
from torch import nn


def build():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=g)
    y = (x[:, 0] > 0).long()
    model = nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=32)
    return model, optimizer, loader
