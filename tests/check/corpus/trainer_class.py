"""A small class-based Trainer for a transformer language model (the kind projects grow)."""
import math
import os
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader
from tqdm import tqdm


@dataclass
class Config:
    vocab_size: int = 32000
    block_size: int = 256
    dim: int = 384
    heads: int = 6
    layers: int = 6
    dropout: float = 0.1
    lr: float = 3e-4
    epochs: int = 10
    batch_size: int = 32
    out_dir: str = "runs/lm"


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.proj = nn.Linear(cfg.dim, cfg.dim)
        self.heads = cfg.heads
        self.drop = nn.Dropout(cfg.dropout)
        mask = torch.tril(torch.ones(cfg.block_size, cfg.block_size))
        self.register_buffer("mask", mask.view(1, 1, cfg.block_size, cfg.block_size))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        y = self.drop(F.softmax(att, dim=-1)) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.dim), nn.LayerNorm(cfg.dim)
        self.attn = CausalSelfAttention(cfg)
        self.mlp = nn.Sequential(nn.Linear(cfg.dim, 4 * cfg.dim), nn.GELU(), nn.Linear(4 * cfg.dim, cfg.dim),
                                 nn.Dropout(cfg.dropout))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class SinusoidalPositions(nn.Module):
    def __init__(self, dim, max_len):
        super().__init__()
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, dim, 2) * (-math.log(10000.0) / dim))
        self.pe = torch.zeros(max_len, dim)  # expect: TD203
        self.pe[:, 0::2] = torch.sin(position * div_term)
        self.pe[:, 1::2] = torch.cos(position * div_term)

    def forward(self, x):
        return x + self.pe[: x.size(1)]


class LanguageModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.pos = SinusoidalPositions(cfg.dim, cfg.block_size)
        self.scale = nn.Parameter(torch.ones(1))
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln = nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)

    def forward(self, idx):
        x = self.pos(self.tok(idx) * self.scale)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


class Trainer:
    def __init__(self, cfg, model, train_set, val_set):
        self.cfg = cfg
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.model = model.to(self.device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr, weight_decay=0.1)
        self.train_loader = DataLoader(train_set, batch_size=cfg.batch_size, shuffle=True,
                                       num_workers=4, pin_memory=True)
        self.val_loader = DataLoader(val_set, batch_size=cfg.batch_size, num_workers=4, pin_memory=True)
        self.history = []
        os.makedirs(cfg.out_dir, exist_ok=True)

    def train_epoch(self, epoch):
        self.model.train()
        total_loss = 0.0
        pbar = tqdm(self.train_loader, desc=f"epoch {epoch}")
        for x, y in pbar:
            x, y = x.to(self.device), y.to(self.device)
            logits = self.model(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            total_loss += loss  # expect: TD405
            pbar.set_postfix(loss=loss.item())  # expect: TD603
        return total_loss / len(self.train_loader)

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        losses = torch.zeros(len(self.val_loader), device=self.device)
        for i, (x, y) in enumerate(self.val_loader):
            x, y = x.to(self.device), y.to(self.device)
            logits = self.model(x)
            losses[i] = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        return losses.mean().item()

    def save_checkpoint(self, epoch, path):
        torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                    "epoch": epoch, "config": vars(self.cfg)}, path)

    def load_checkpoint(self, path):
        ckpt = torch.load(path, map_location=self.device)  # expect: TD503
        self.model.load_state_dict(ckpt["model"])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        return ckpt["epoch"] + 1

    def fit(self, resume=None):
        start = self.load_checkpoint(resume) if resume else 0
        for epoch in range(start, self.cfg.epochs):
            train_loss = self.train_epoch(epoch)
            val_loss = self.evaluate()
            self.history.append((epoch, float(train_loss), val_loss))
            print(f"epoch {epoch}: train {float(train_loss):.3f} val {val_loss:.3f} ppl {math.exp(val_loss):.1f}")
            self.save_checkpoint(epoch, os.path.join(self.cfg.out_dir, "last.pt"))


if __name__ == "__main__":
    cfg = Config()
    data = torch.load("tokens.pt", map_location="cpu", weights_only=True)
    trainer = Trainer(cfg, LanguageModel(cfg), data["train"], data["val"])
    trainer.fit()
