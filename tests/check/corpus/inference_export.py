"""Batch inference with a fine-tuned ResNet-50, then export to ONNX and TorchScript."""
import argparse
import json

import numpy as np
import torch
import torch.nn as nn
import torchvision
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms


class ImageList(Dataset):
    def __init__(self, paths, transform):
        self.paths, self.transform = paths, transform

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        return self.transform(Image.open(self.paths[i]).convert("RGB")), self.paths[i]


def build_model(num_classes, checkpoint):
    model = torchvision.models.resnet50()
    model.fc = nn.Linear(model.fc.in_features, num_classes)
    state = torch.load(checkpoint, map_location="cpu")  # expect: TD503
    model.load_state_dict(state)
    return model


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("images", nargs="+")
    parser.add_argument("--checkpoint", default="resnet50_finetuned.pt")
    parser.add_argument("--labels", default="labels.json")
    args = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with open(args.labels) as f:
        labels = json.load(f)
    model = build_model(len(labels), args.checkpoint)
    model.to(device)
    model.eval()

    tf = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224), transforms.ToTensor(),
                             transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    loader = DataLoader(ImageList(args.images, tf), batch_size=64)  # expect: TD304

    all_logits, all_paths = [], []
    with torch.inference_mode():
        for images, paths in loader:
            logits = model(images.to(device))
            all_logits.append(logits)
            all_paths.extend(paths)
    logits = torch.cat(all_logits)
    probs = torch.softmax(logits, dim=1)
    np.save("probs.npy", probs.numpy())  # expect: TD501
    top = probs.argmax(1).cpu().tolist()
    for path, idx in zip(all_paths, top):
        print(f"{path}: {labels[idx]}")

    reference = torch.from_numpy(np.load("reference_probs.npy"))
    print("max diff vs reference:", np.abs(reference.numpy() - probs.detach().cpu().numpy()).max())

    dummy = torch.randn(1, 3, 224, 224)
    dummy.to(device)  # expect: TD301
    torch.onnx.export(model, dummy, "resnet50.onnx", input_names=["image"], output_names=["logits"],
                      dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}})
    scripted = torch.jit.trace(model, dummy)
    scripted.save("resnet50_traced.pt")


if __name__ == "__main__":
    main()
