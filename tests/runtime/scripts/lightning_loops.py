"""A correct Lightning module (train + validation) trained first, then one that keeps every loss in a list."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import lightning as L


class Correct(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 2))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class KeepsLosses(Correct):
    def __init__(self):
        super().__init__()
        self.hist = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.hist.append(loss)  # the keeper
        return loss


def trainer():
    return L.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)


g = torch.Generator().manual_seed(0)
data = TensorDataset(torch.randn(64, 8, generator=g), torch.randint(0, 2, (64,), generator=g))
for module in (Correct(), KeepsLosses()):
    trainer().fit(module, DataLoader(data, batch_size=8), DataLoader(data, batch_size=16))
