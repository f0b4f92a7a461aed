"""TD606: the model waits for a slow Dataset.__getitem__ most of every step."""

import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowImages(Dataset):
    def __len__(self) -> int:
        return 128

    def __getitem__(self, i: int):
        time.sleep(0.01)  # decoding and augmenting on the fly, in the main process
        return torch.randn(3, 16, 16), i % 10


loader = DataLoader(SlowImages(), batch_size=8)
model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in loader:
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
