"""A first MNIST network, trained on the CPU (no accelerator anywhere in this program)."""
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torchvision import datasets, transforms


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout = nn.Dropout(0.25)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = self.dropout(torch.flatten(x, 1))
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
train_loader = torch.utils.data.DataLoader(
    datasets.MNIST("../data", train=True, download=True, transform=transform), batch_size=64, shuffle=True)
test_loader = torch.utils.data.DataLoader(
    datasets.MNIST("../data", train=False, transform=transform), batch_size=1000)

model = Net()
optimizer = optim.Adam(model.parameters(), lr=1e-3)

for epoch in range(1, 4):
    model.train()
    epoch_loss = 0
    for batch_idx, (data, target) in enumerate(train_loader):  # expect: TD404
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        epoch_loss += loss  # expect: TD405
        print(f"batch {batch_idx}: loss {loss.item():.4f}")
    print(f"epoch {epoch}: mean loss {epoch_loss / len(train_loader):.4f}")

    model.eval()
    batch_losses, correct = [], 0
    with torch.no_grad():
        for data, target in test_loader:
            output = model(data)
            batch_losses.append(F.nll_loss(output, target))
            correct += output.argmax(dim=1).eq(target).sum().item()
    test_loss = torch.stack(batch_losses).mean().item()
    print(f"test: loss {test_loss:.4f}, acc {correct / len(test_loader.dataset):.3f}")

torch.save(model.state_dict(), "mnist_cnn.pt")
model.load_state_dict(torch.load("mnist_cnn.pt"))  # expect: TD502, TD503
