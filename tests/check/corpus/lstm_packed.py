"""Sentence classification with an LSTM over padded, packed sequences."""
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence
from torch.utils.data import DataLoader, Dataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
PAD = 0


class SentenceDataset(Dataset):
    def __init__(self, sentences, labels, vocab):
        self.data = [torch.tensor([vocab.get(w, 1) for w in s.split()]) for s in sentences]
        self.labels = labels

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.data[i], self.labels[i]


def collate(batch):
    seqs, labels = zip(*batch)
    lengths = torch.tensor([len(s) for s in seqs])
    padded = pad_sequence(seqs, batch_first=True, padding_value=PAD)
    return padded, lengths, torch.tensor(labels)


class LSTMClassifier(nn.Module):
    def __init__(self, vocab_size, emb=128, hidden=256, layers=2, classes=5):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb, padding_idx=PAD)
        self.lstm = nn.LSTM(emb, hidden, num_layers=layers, batch_first=True, dropout=0.3)
        self.dropout = nn.Dropout(0.3)
        self.fc = nn.Linear(hidden, classes)
        self.layers, self.hidden = layers, hidden

    def forward(self, x, lengths):
        emb = self.dropout(self.embedding(x))
        h0 = torch.zeros(self.layers, x.size(0), self.hidden, device=x.device)
        c0 = torch.zeros(self.layers, x.size(0), self.hidden, device=x.device)
        packed = pack_padded_sequence(emb, lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, (h, _) = self.lstm(packed, (h0, c0))
        return self.fc(self.dropout(h[-1]))


def evaluate(model, loader, criterion):
    total_loss, correct, n = 0.0, 0, 0
    with torch.no_grad():
        for padded, lengths, labels in loader:
            padded, labels = padded.to(device), labels.to(device)
            logits = model(padded, lengths)  # expect: TD402
            total_loss += criterion(logits, labels).item() * labels.size(0)  # expect: TD603
            correct += (logits.argmax(1) == labels).sum().item()  # expect: TD603
            n += labels.size(0)
    return total_loss / n, correct / n


def main(train_set, val_set, vocab_size, epochs=10):
    train_loader = DataLoader(train_set, batch_size=32, shuffle=True, collate_fn=collate,
                              num_workers=2, pin_memory=True)
    val_loader = DataLoader(val_set, batch_size=64, collate_fn=collate, num_workers=2, pin_memory=True)
    model = LSTMClassifier(vocab_size).to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(epochs):
        model.train()
        for step, (padded, lengths, labels) in enumerate(train_loader):
            padded, labels = padded.to(device), labels.to(device)
            optimizer.zero_grad()
            loss = criterion(model(padded, lengths), labels)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            if step % 200 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.3f}")
        val_loss, val_acc = evaluate(model, val_loader, criterion)
        print(f"epoch {epoch}: val loss {val_loss:.3f} acc {val_acc:.3f}")
    torch.save(model.state_dict(), "lstm.pt")
