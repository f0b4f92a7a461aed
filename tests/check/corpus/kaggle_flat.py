# Tabular binary classification, Kaggle-notebook style (cells pasted into one file).
import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, TensorDataset

df = pd.read_csv("../input/tabular-playground/train.csv")
features = [c for c in df.columns if c.startswith("f_")]
X = df[features].values.astype(np.float32)
y = df["target"].values.astype(np.float32)
X = (X - X.mean(axis=0)) / (X.std(axis=0) + 1e-6)
X_train, X_val, y_train, y_val = train_test_split(X, y, test_size=0.2, random_state=42, stratify=y)

train_ds = TensorDataset(torch.tensor(X_train), torch.tensor(y_train))
val_ds = TensorDataset(torch.tensor(X_val), torch.tensor(y_val))
train_dl = DataLoader(train_ds, batch_size=512, shuffle=True)  # expect: TD304, TD305
val_dl = DataLoader(val_ds, batch_size=2048)  # expect: TD304, TD305

model = nn.Sequential(
    nn.Linear(len(features), 256), nn.BatchNorm1d(256), nn.SiLU(), nn.Dropout(0.3),
    nn.Linear(256, 128), nn.BatchNorm1d(128), nn.SiLU(), nn.Dropout(0.3),
    nn.Linear(128, 1),
)
model = model.cuda()  # expect: TD101, TD102
pos_weight = torch.tensor([(y_train == 0).sum() / (y_train == 1).sum()])
criterion = nn.BCEWithLogitsLoss(pos_weight=pos_weight)  # expect: TD406
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-5)

best_auc = 0
for epoch in range(25):
    model.train()
    for xb, yb in train_dl:
        xb, yb = xb.cuda(non_blocking=True), yb.cuda(non_blocking=True)  # expect: TD101, TD102, TD306
        optimizer.zero_grad()
        loss = criterion(model(xb).squeeze(1), yb)
        loss.backward()
        optimizer.step()

    model.eval()
    val_preds = []
    with torch.no_grad():
        for xb, _ in val_dl:
            val_preds.append(torch.sigmoid(model(xb.cuda())).cpu())  # expect: TD101, TD102, TD603
    val_preds = torch.cat(val_preds).numpy().ravel()
    auc = roc_auc_score(y_val, val_preds)
    print(f"epoch {epoch}: val AUC {auc:.5f}")
    if auc > best_auc:
        best_auc = auc
        torch.save(model, "best_model.pt")  # expect: TD504

test = pd.read_csv("../input/tabular-playground/test.csv")
X_test = torch.tensor(((test[features].values - X.mean(axis=0)) / (X.std(axis=0) + 1e-6)).astype(np.float32))
model = torch.load("best_model.pt", weights_only=False)  # expect: TD502, TD503
model.eval()
with torch.no_grad():
    test_preds = torch.sigmoid(model(X_test.cuda())).cpu().numpy().ravel()  # expect: TD101, TD102
pd.DataFrame({"id": test["id"], "target": test_preds}).to_csv("submission.csv", index=False)
