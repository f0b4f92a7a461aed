"""DDP training as it is often first written: torchrun --nproc_per_node=2 ddp_buggy.py"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
from torchvision import datasets, transforms


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
            nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )
        self.fc = nn.Linear(128, 100)

    def forward(self, x):
        return self.fc(self.body(x))


def train():
    dist.init_process_group("nccl")  # expect: TD704
    rank = dist.get_rank()
    device = torch.device("cuda")  # expect: TD101, TD705

    dataset = datasets.CIFAR100("data", train=True, download=True, transform=transforms.ToTensor())
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=128, sampler=sampler, shuffle=True,  # expect: TD702
                        num_workers=4, pin_memory=True)

    model = Net().to(device)
    model = DistributedDataParallel(model, device_ids=[rank])  # expect: TD706
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    for epoch in range(50):  # expect: TD701
        model.train()
        for step, (images, labels) in enumerate(loader):
            images, labels = images.to(device), labels.to(device)
            optimizer.zero_grad()
            loss = criterion(model(images), labels)
            loss.backward()
            optimizer.step()
            if rank == 0 and step % 50 == 0:
                print(f"[epoch {epoch} step {step}] loss: {loss.item():.3f}")
        print(f"rank {rank} finished epoch {epoch}")
        torch.save(model.state_dict(), f"checkpoints/epoch_{epoch}.pt")  # expect: TD703, TD205

    dist.destroy_process_group()


if __name__ == "__main__":
    os.makedirs("checkpoints", exist_ok=True)
    train()
