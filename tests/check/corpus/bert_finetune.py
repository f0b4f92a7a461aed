"""Fine-tune BERT for sentiment classification with a plain PyTorch loop (dict batches)."""
import torch
from datasets import load_dataset
from torch.utils.data import DataLoader
from transformers import AutoModelForSequenceClassification, AutoTokenizer, get_linear_schedule_with_warmup

MODEL_NAME = "bert-base-uncased"
EPOCHS = 3

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
tokenizer = AutoTokenizer.from_pretrained(MODEL_NAME)
model = AutoModelForSequenceClassification.from_pretrained(MODEL_NAME, num_labels=2)  # expect: TD201

raw = load_dataset("imdb")


def tokenize(batch):
    return tokenizer(batch["text"], truncation=True, padding="max_length", max_length=256)


tokenized = raw.map(tokenize, batched=True)
tokenized = tokenized.rename_column("label", "labels")
tokenized.set_format("torch", columns=["input_ids", "attention_mask", "labels"])

train_loader = DataLoader(tokenized["train"], batch_size=16, shuffle=True, num_workers=2, pin_memory=True)
eval_loader = DataLoader(tokenized["test"], batch_size=64, num_workers=2, pin_memory=True)

optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01)
num_training_steps = EPOCHS * len(train_loader)
scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=500, num_training_steps=num_training_steps)

for epoch in range(EPOCHS):
    model.train()
    for step, batch in enumerate(train_loader):
        batch = {k: v.to(device) for k, v in batch.items()}
        outputs = model(**batch)
        loss = outputs.loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        if step % 100 == 0:
            print(f"epoch {epoch} step {step}: loss {loss.item():.4f}")

    model.eval()
    predictions, references = [], []
    for batch in eval_loader:
        input_ids = batch["input_ids"].to(device)
        attention_mask = batch["attention_mask"].to(device)
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits  # expect: TD401
        predictions.extend(logits.argmax(dim=-1).cpu().tolist())  # expect: TD603
        references.extend(batch["labels"].tolist())
    accuracy = sum(int(p == r) for p, r in zip(predictions, references)) / len(references)
    print(f"epoch {epoch}: accuracy {accuracy:.4f}")

model.save_pretrained("bert-imdb")
tokenizer.save_pretrained("bert-imdb")
