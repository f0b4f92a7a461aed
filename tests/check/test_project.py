"""The project index: rules see what other modules of the program define and how they call each other,
for files checked together and for a single file checked alone (pre-commit passes changed files only)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from torchdoctor.check.project import MAX_MODULES, Project
from torchdoctor.check.runner import check_file, check_files
from torchdoctor.config import Settings


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def codes(results, name: str) -> list[tuple[int, str]]:
    out = []
    for r in results:
        if Path(r.path).name == name:
            assert not r.errors, r.errors
            out += [(f.location.line, code) for f in r.findings for code in (f.code, *f.related)]
    return sorted(out)


MODEL = """\
import torch.nn as nn

class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.Linear(8, 2))

    def forward(self, x):
        return self.net(x)

class Plain(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        return self.fc(x)
"""

TRAIN = """\
import torch
from model import Classifier, Plain

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = Classifier().to(device)
plain = Plain().to(device)

def validate(val_loader):
    with torch.no_grad():
        for x, y in val_loader:
            out = model(x.to(device))
            out2 = plain(x.to(device))
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    return tmp_path


def test_a_model_class_of_another_module_brings_its_dropout(project: Path) -> None:
    write(project, {"model.py": MODEL, "train.py": TRAIN})
    results = check_files(["model.py", "train.py"], Settings(root=str(project)))
    # Classifier has dropout (model.py): evaluating it in train mode is TD402; Plain has none
    assert codes(results, "train.py") == [(11, "TD402")]


def _count_parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the files parsed from now on, in order (the runner's and the index's parses both)."""
    import torchdoctor.check.engine as engine
    import torchdoctor.check.runner as runner

    parsed: list[str] = []
    real = engine.parse
    counted = lambda text, path: parsed.append(Path(path).name) or real(text, path)  # noqa: E731
    monkeypatch.setattr(engine, "parse", counted)
    monkeypatch.setattr(runner, "parse", counted)
    return parsed


def test_a_module_the_index_read_first_is_not_parsed_again_for_its_own_check(project: Path, monkeypatch) -> None:
    parsed = _count_parses(monkeypatch)
    write(project, {"model.py": MODEL + "\nnet = Classifier().cuda()\nnet.cuda()\n", "train.py": TRAIN})
    results = check_files(["train.py", "model.py"], Settings(root=str(project)), jobs=1)
    assert sorted(parsed) == ["model.py", "train.py"]  # model.py once: for train.py's question, kept for its check
    assert codes(results, "train.py") == [(11, "TD402")]
    alone = check_file("model.py", Settings(root=str(project)))  # the same findings as from a fresh parse
    assert codes(results, "model.py") == codes([alone], "model.py") != []


def test_a_module_listed_before_its_importer_is_checked_after_it_and_parsed_once(project: Path, monkeypatch) -> None:
    parsed = _count_parses(monkeypatch)
    write(project, {"model.py": MODEL, "train.py": TRAIN, "other.py": "import torch\n"})
    given = ["model.py", "other.py", "train.py"]  # (sorted: the module before its importer)
    assert Project(given, str(project)).importers_first(given) == ["train.py", "model.py", "other.py"]
    results = check_files(given, Settings(root=str(project)), jobs=1)
    assert [r.path for r in results] == given  # reported in the order given
    assert sorted(parsed) == ["model.py", "other.py", "train.py"]  # each once
    assert codes(results, "train.py") == [(11, "TD402")]


def test_a_single_file_run_still_reads_its_siblings(project: Path) -> None:
    write(project, {"model.py": MODEL, "train.py": TRAIN})
    result = check_file("train.py", Settings(root=str(project)))
    assert [(f.location.line, f.code) for f in result.findings] == [(11, "TD402")]


def test_without_the_sibling_nothing_is_assumed(project: Path) -> None:
    write(project, {"train.py": TRAIN})
    assert check_file("train.py", Settings(root=str(project))).findings == []


def test_set_epoch_in_a_helper_module_counts(project: Path) -> None:
    write(project, {
        "utils/__init__.py": "from .train_utils import train\n",
        "utils/train_utils.py": """\
            def train(model, loader, optimizer, epoch, sampler=None):
                if sampler:
                    sampler.set_epoch(epoch)
                for x, y in loader:
                    optimizer.zero_grad()
                    model(x).sum().backward()
                    optimizer.step()
            """,
        "main.py": """\
            import torch
            from torch.utils.data.distributed import DistributedSampler
            from utils import train

            def main(model, dataset, optimizer):
                sampler = DistributedSampler(dataset)
                loader = torch.utils.data.DataLoader(dataset, sampler=sampler)
                for epoch in range(10):
                    train(model, loader, optimizer, epoch, sampler=sampler)
            """,
        "main_forgets.py": """\
            import torch
            from torch.utils.data.distributed import DistributedSampler
            from utils.train_utils import train as run_epoch

            def main(model, dataset, optimizer):
                sampler = DistributedSampler(dataset)
                loader = torch.utils.data.DataLoader(dataset, sampler=sampler)
                for epoch in range(10):
                    run_epoch(model, loader, optimizer, epoch)
                for epoch in range(10):
                    for x, y in loader:
                        model(x).sum().backward()
            """,
    })
    results = check_files(["main.py", "main_forgets.py", "utils/__init__.py", "utils/train_utils.py"],
                          Settings(root=str(project)))
    assert codes(results, "main.py") == []
    # the first epoch loop runs the helper that calls set_epoch; the second never does
    assert codes(results, "main_forgets.py") == [(10, "TD701")]


def test_a_save_guarded_by_rank_in_the_caller_module(project: Path) -> None:
    write(project, {
        "ckpt.py": """\
            import torch
            from torch.nn.parallel import DistributedDataParallel

            def save_checkpoint(model, path):
                inner = model.module if isinstance(model, DistributedDataParallel) else model
                torch.save(inner.state_dict(), path)
            """,
        "train.py": """\
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP
            from ckpt import save_checkpoint

            def main(model):
                dist.init_process_group("gloo")
                model = DDP(model)
                if dist.get_rank() == 0:
                    save_checkpoint(model.module, "m.pt")
            """,
        "ckpt_ddp.py": """\
            import torch
            from torch.nn.parallel import DistributedDataParallel

            def save_everywhere(model, path):
                inner = model.module if isinstance(model, DistributedDataParallel) else model
                torch.save(inner.state_dict(), path)
            """,
        "train_all_ranks.py": """\
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP
            from ckpt_ddp import save_everywhere

            def main(model):
                dist.init_process_group("gloo")
                save_everywhere(DDP(model), "m.pt")
            """,
        "export.py": """\
            from ckpt import save_checkpoint

            def export(model):
                save_checkpoint(model, "exported.pt")  # an inference script: one process, no guard needed
            """,
    })
    results = check_files(["ckpt.py", "train.py", "ckpt_ddp.py", "train_all_ranks.py", "export.py"],
                          Settings(root=str(project)))
    assert codes(results, "ckpt.py") == []  # its DDP caller guards it with the rank; export.py runs once
    assert codes(results, "ckpt_ddp.py") == [(6, "TD703")]  # nobody guards it: every rank writes


def test_a_writer_class_that_the_ddp_scripts_make_on_rank_zero_only(project: Path) -> None:
    write(project, {
        "loggers.py": """\
            import os

            import torch

            RANK = int(os.getenv("RANK", "-1"))  # (a module of the DDP program: its own writes are judged)


            class CsvLog:
                def __init__(self, path):
                    self.path = path

                def row(self, values):
                    with open(self.path, "a") as f:
                        f.write(",".join(map(str, values)))


            class TextLog:
                def __init__(self, path):
                    self.path = path

                def line(self, text):
                    with open(self.path, "a") as f:
                        f.write(text)
            """,
        "train.py": """\
            import os
            import torch.distributed as dist
            from contextlib import nullcontext
            from loggers import CsvLog, TextLog

            RANK = int(os.getenv("RANK", "-1"))


            def main(epochs):
                dist.init_process_group("gloo")
                log = CsvLog("results.csv") if RANK in (-1, 0) else None
                with nullcontext():
                    text = TextLog("notes.txt")
                for epoch in range(epochs):
                    if log:
                        log.row([epoch])
                    text.line(str(epoch))
            """,
        "tune.py": """\
            import os
            import torch.distributed as dist
            from loggers import TextLog

            def tune():
                dist.init_process_group("gloo")
                if int(os.environ["RANK"]) == 0:
                    TextLog("tune.txt").line("start")
            """,
    })
    results = check_files(["loggers.py", "train.py", "tune.py"], Settings(root=str(project), select=("TD703",)))
    assert codes(results, "loggers.py") == [(22, "TD703")]  # CsvLog exists on rank 0 only; train.py makes a TextLog everywhere


def test_a_device_parameter_that_callers_give_a_gpu(project: Path) -> None:
    write(project, {
        "engine.py": """\
            import torch


            def train_one_epoch(model, criterion, data_loader, optimizer, device):
                for samples, targets in data_loader:
                    samples = samples.to(device)
                    targets = targets.to(device)
                    loss = criterion(model(samples), targets)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    print(loss.item())
            """,
        "main.py": """\
            import argparse
            import torch
            from engine import train_one_epoch

            def main(args, model, criterion, loader, optimizer):
                device = torch.device(args.device)
                model.to(device)
                for epoch in range(3):
                    train_one_epoch(model, criterion, loader, optimizer, device)

            if __name__ == "__main__":
                parser = argparse.ArgumentParser()
                parser.add_argument("--device", default="cuda")
            """,
        "cpu_engine.py": """\
            import torch


            def evaluate(model, loader, device):
                for x, y in loader:
                    x = x.to(device)
                    print(model(x).sum().item())
            """,
    })
    results = check_files(["engine.py", "main.py", "cpu_engine.py"], Settings(root=str(project)))
    assert codes(results, "engine.py") == [(12, "TD603")]
    # nobody calls it with a GPU: its device is unknown, so no TD603 (its missing no_grad is TD401 anyway)
    assert codes(results, "cpu_engine.py") == [(7, "TD401")]


def test_star_imports_and_reexports_resolve(project: Path) -> None:
    write(project, {
        "models.py": MODEL,
        "gan.py": """\
            import torch
            from models import *

            encoder = Classifier()
            if torch.cuda.is_available():
                encoder.cuda()
            """,
    })
    results = check_files(["models.py", "gan.py"], Settings(root=str(project)))
    assert codes(results, "gan.py") == [(6, "TD102")]  # a module's .cuda() is in place: no TD301


def test_index_is_bounded_and_never_fails_on_a_broken_sibling(project: Path) -> None:
    write(project, {"model.py": "class Classifier(:\n", "train.py": TRAIN})
    result = check_file("train.py", Settings(root=str(project)))
    assert result.errors == [] and result.findings == []
    proj = Project([str(project / "train.py")])
    assert MAX_MODULES >= 100 and proj.root == str(project)


GRAD_UTILS = """\
    import torch

    def clip_gradients(model, clip):
        norms = []
        for name, p in model.named_parameters():
            if p.grad is not None:
                param_norm = p.grad.data.norm(2)
                norms.append(param_norm.item())
                clip_coef = clip / (param_norm + 1e-6)
                if clip_coef < 1:  # a second read: the tensor's truth value
                    p.grad.data.mul_(clip_coef)
        return norms

    def grad_report(model):
        return [p.grad.norm().item() for p in model.parameters()]
    """


def test_a_sync_in_a_helper_is_reported_where_it_reads_when_another_module_calls_it_every_step(project: Path) -> None:
    write(project, {
        "grad_utils.py": GRAD_UTILS,
        "train.py": """\
            import torch
            import grad_utils

            def train(model, loader, optimizer, args):
                model.cuda()
                for step, (images, _) in enumerate(loader):
                    loss = model(images.cuda(non_blocking=True)).mean()
                    optimizer.zero_grad()
                    loss.backward()
                    if args.clip_grad:
                        grad_utils.clip_gradients(model, args.clip_grad)  # every step (a flag, not a step guard)
                    if step % 100 == 0:
                        print(grad_utils.grad_report(model))  # every 100 steps: fine
                    optimizer.step()
            """,
    })
    results = check_files(["grad_utils.py", "train.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "grad_utils.py") == [(8, "TD603"), (10, "TD603")]
    messages = [f.message for r in results if r.path.endswith("grad_utils.py") for f in r.findings]
    assert all("`clip_gradients` at train.py:11" in m for m in messages), messages
    assert "`if` on tensor `clip_coef`" in messages[1]
    alone = check_file("grad_utils.py", Settings(root=str(project), select=("TD603",)))  # pre-commit: the helper only
    assert [(f.location.line, f.code) for f in alone.findings] == [(8, "TD603"), (10, "TD603")]


def test_a_helper_called_every_step_of_a_cpu_program_is_quiet(project: Path) -> None:
    write(project, {
        "grad_utils.py": GRAD_UTILS,
        "train.py": """\
            import grad_utils

            def train(model, loader, optimizer):
                for images, _ in loader:
                    loss = model(images).mean()
                    optimizer.zero_grad()
                    loss.backward()
                    grad_utils.clip_gradients(model, 1.0)
                    optimizer.step()
            """,
    })
    results = check_files(["grad_utils.py", "train.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "grad_utils.py") == []


def test_a_trainer_class_given_a_cuda_device_by_its_caller_runs_on_the_accelerator(project: Path) -> None:
    write(project, {
        "utils.py": """\
            import torch

            def prepare_device(n_gpu):
                return torch.device("cuda:0" if n_gpu > 0 else "cpu"), list(range(n_gpu))
            """,
        "trainer/__init__.py": "from .trainer import *\n",
        "trainer/trainer.py": """\
            import torch

            class Trainer:
                def __init__(self, model, optimizer, loader, device):
                    self.model, self.optimizer, self.loader = model, optimizer, loader
                    self.device = device

                def train_epoch(self):
                    for data, target in self.loader:
                        data, target = data.to(self.device), target.to(self.device)
                        loss = torch.nn.functional.cross_entropy(self.model(data), target)
                        self.optimizer.zero_grad()
                        loss.backward()
                        self.optimizer.step()
                        print(loss.item())
            """,
        "train.py": """\
            from trainer import Trainer
            from utils import prepare_device

            def main(model, optimizer, loader):
                device, ids = prepare_device(1)
                model = model.to(device)
                Trainer(model, optimizer, loader, device=device).train_epoch()
            """,
        "cpu_train.py": """\
            from trainer.trainer import Trainer

            def main(model, optimizer, loader):
                Trainer(model, optimizer, loader, device="cpu").train_epoch()
            """,
    })
    settings = Settings(root=str(project), select=("TD603",))
    results = check_files(["train.py", "trainer/__init__.py", "trainer/trainer.py", "utils.py"], settings)
    assert codes(results, "trainer.py") == [(15, "TD603")]
    cpu_only = check_files(["cpu_train.py", "trainer/trainer.py"], settings)  # a CPU caller: nothing to sync with
    assert codes(cpu_only, "trainer.py") == []


DATA_MODULE = """\
    from torch.utils.data import DataLoader

    class Alpaca:
        def __init__(self, dataset):
            self.dataset = dataset

        def train_dataloader(self):
            return DataLoader(self.dataset, batch_size=8, shuffle=True, num_workers=4)

    def get_loader(dataset, pin: bool):
        loader = DataLoader(dataset, batch_size=8, num_workers=4, pin_memory=pin)
        return loader
    """


def test_a_loader_factory_is_judged_by_the_module_that_imports_it(project: Path) -> None:
    write(project, {
        "data/__init__.py": "from .alpaca import Alpaca, get_loader\n",
        "data/alpaca.py": DATA_MODULE,
        "finetune.py": """\
            import torch
            from data import Alpaca

            def main(model, dataset, optimizer):
                device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                model.to(device)
                for x, y in Alpaca(dataset).train_dataloader():
                    loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
            """,
    })
    settings = Settings(root=str(project), select=("TD304",))
    results = check_files(["finetune.py", "data/__init__.py", "data/alpaca.py"], settings)
    assert codes(results, "alpaca.py") == [(8, "TD304")]  # (get_loader passes pin_memory on)
    message = next(f.message for r in results if r.path.endswith("alpaca.py") for f in r.findings)
    assert "`../finetune.py` imports it" in message
    assert [f.location.line for f in check_file("data/alpaca.py", settings).findings] == [8]  # pre-commit, alone


def test_loader_keywords_spread_from_a_helper_of_another_module(project: Path) -> None:
    write(project, {
        "config.py": """\
            import platform

            def loader_kwargs():
                kwargs = {}
                if platform.system() == "Darwin":
                    kwargs = {"multiprocessing_context": "forkserver", "persistent_workers": True}
                return kwargs

            def pinned_kwargs(cfg):
                return {"pin_memory": True, **cfg}
            """,
        "train.py": """\
            import torch
            from torch.utils.data import DataLoader, TensorDataset
            from config import loader_kwargs, pinned_kwargs

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(4, 1).to(device)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            ds = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
            train_loader = DataLoader(ds, batch_size=8, num_workers=2, **loader_kwargs())
            val_loader = DataLoader(ds, batch_size=8, num_workers=2, **pinned_kwargs({}))
            for loader in (train_loader, val_loader):
                for x, y in loader:
                    loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            """,
    })
    settings = Settings(root=str(project), select=("TD304",))
    results = check_files(["config.py", "train.py"], settings)
    assert codes(results, "train.py") == [(9, "TD304")]  # (pinned_kwargs takes a parameter: its keys are not known)
    assert [f.location.line for f in check_file("train.py", settings).findings] == [9]  # pre-commit, alone


def test_torch_s_dataloader_imported_through_a_module_of_the_project(project: Path) -> None:
    write(project, {
        "dataset.py": """\
            import torch
            from torch.utils.data import Dataset, DataLoader

            class Frames(Dataset):
                def __len__(self):
                    return 8
                def __getitem__(self, i):
                    return torch.randn(4), torch.randn(1)

            class DataLoader2:  # (a class of the project's own: not torch's)
                def __init__(self, ds, batch_size=1):
                    self.ds = ds
            """,
        "train.py": """\
            import torch
            from dataset import Frames, DataLoader, DataLoader2

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(4, 1).to(device)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = DataLoader(Frames(), batch_size=4, shuffle=True, num_workers=0)
            other = DataLoader2(Frames(), batch_size=4)
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
                opt.zero_grad()
                loss.backward()
                opt.step()
            """,
    })
    settings = Settings(root=str(project), select=("TD304", "TD305"))
    results = check_files(["dataset.py", "train.py"], settings)
    assert codes(results, "train.py") == [(7, "TD304"), (7, "TD305")]
    assert codes([check_file("train.py", settings)], "train.py") == [(7, "TD304"), (7, "TD305")]  # pre-commit, alone


def test_a_loader_factory_imported_only_by_cpu_code_is_quiet(project: Path) -> None:
    write(project, {
        "data/__init__.py": "from .alpaca import Alpaca\n",
        "data/alpaca.py": DATA_MODULE,
        "tokenize_all.py": """\
            from data import Alpaca

            def main(dataset):
                return [len(x) for x, _ in Alpaca(dataset).train_dataloader()]
            """,
    })
    settings = Settings(root=str(project), select=("TD304",))
    assert codes(check_files(["tokenize_all.py", "data/alpaca.py"], settings), "alpaca.py") == []


def test_a_device_carried_by_the_options_object_of_an_accelerator_caller(project: Path) -> None:
    write(project, {
        "train.py": """\
            import torch

            def evaluate(model, loader, args):
                device = torch.device(args.device)
                total = torch.zeros(1, device=device)
                for images, labels in loader:
                    out = model(images.to(device))
                    print(out.sum().item())
                return total
            """,
        "main.py": """\
            from distributed import init_distributed_device
            from train import evaluate

            def main(args, model, loader):
                device = init_distributed_device(args)  # sets args.device to this rank's GPU
                model.to(device)
                print(f"running on {args.device}")
                evaluate(model, loader, args)
            """,
        "cpu_main.py": """\
            from train import evaluate

            def main(args, model, loader):
                evaluate(model, loader, args)
            """,
    })
    settings = Settings(root=str(project), select=("TD603",))
    assert codes(check_files(["main.py", "train.py"], settings), "train.py") == [(8, "TD603")]
    assert codes(check_files(["cpu_main.py", "train.py"], settings), "train.py") == []


def test_a_loss_module_of_another_module_with_nothing_to_move_is_not_td201(project: Path) -> None:
    write(project, {
        "losses.py": """\
            import torch
            import torch.nn as nn

            class DiceLoss(nn.Module):
                def __init__(self, n_classes):
                    super().__init__()
                    self.n_classes = n_classes

                def forward(self, x, y):
                    return (x.softmax(1) - nn.functional.one_hot(y, self.n_classes).permute(0, 3, 1, 2)).abs().mean()

            class Weighted(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.register_buffer("w", torch.ones(4))

                def forward(self, x, y):
                    return (self.w * x).mean()

            class PairMargin(nn.Module):
                def __init__(self, margin: float, scale: float):
                    super().__init__()
                    self.margin, self.scale = margin, scale
                    self.soft = nn.Softplus()

                def forward(self, pos, neg):
                    return self.soft(torch.logsumexp((neg - pos + self.margin) * self.scale, 0))

            def soft_ce(pred, target):
                return nn.CrossEntropyLoss()(pred, target.argmax(1))

            class Picked(nn.Module):
                def __init__(self, name):
                    super().__init__()
                    if name == "bce":
                        self.fn = nn.BCEWithLogitsLoss()
                    elif name == "ce":
                        self.fn = soft_ce
                    else:
                        self.fn = nn.MSELoss()

                def forward(self, x, y):
                    return self.fn(x, y)

            class Projected(nn.Module):
                def __init__(self, margin: float):
                    super().__init__()
                    self.margin = margin
                    self.proj = nn.Linear(4, 4)

                def forward(self, pos, neg):
                    return (self.proj(neg) - pos + self.margin).clamp(min=0).mean()
            """,
        "train.py": """\
            import torch
            from losses import DiceLoss, PairMargin, Picked, Projected, Weighted

            def train(model, loader, optimizer):
                dice, weighted = DiceLoss(4), None
                weighted = Weighted()
                projected = Projected(0.25)
                pair = PairMargin(0.25, 32)
                picked = Picked("ce")
                for x, y in loader:
                    x, y = x.cuda(), y.cuda()
                    loss = dice(model(x), y) + weighted(model(x), y) + pair(model(x), y) + projected(model(x), y)
                    loss = loss + picked(model(x), y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
            """,
    })
    results = check_files(["train.py", "losses.py"], Settings(root=str(project), select=("TD201",)))
    # the one holding a buffer and the one holding a layer; not the one holding a Softplus and settings, nor the one
    # holding a torch loss or a function of its module
    assert codes(results, "train.py") == [(6, "TD201"), (7, "TD201")]


def test_a_loss_module_of_another_module_keeping_a_resized_plain_target_is_not_td201(project: Path) -> None:
    write(project, {
        "targets.py": """\
            import torch.nn as nn
            import torchvision.transforms as T

            class ToTarget(nn.Module):
                def __init__(self, target, size=64):
                    super().__init__()
                    self.resize = T.Resize(size)
                    self.target = self.resize(target)

                def forward(self, x):
                    return (self.resize(x) - self.target.to(x.device)).pow(2).mean()

            class Learned(nn.Module):
                def __init__(self, target):
                    super().__init__()
                    self.proj = nn.Linear(4, 4)
                    self.target = self.proj(target)

                def forward(self, x):
                    return (self.proj(x) - self.target.to(x.device)).pow(2).mean()
            """,
        "fit.py": """\
            import torch
            from targets import Learned, ToTarget

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            to_target = ToTarget(torch.zeros(1, 3, 64, 64))
            learned = Learned(torch.zeros(1, 4))
            image = torch.rand(1, 3, 64, 64).to(device).requires_grad_()
            vec = torch.rand(1, 4).to(device)
            opt = torch.optim.Adam([image], lr=0.05)
            for _ in range(10):
                loss = to_target(image) + learned(vec)
                loss.backward()
                opt.step()
                opt.zero_grad()
            """,
    })
    results = check_files(["fit.py", "targets.py"], Settings(root=str(project), select=("TD201",)))
    assert codes(results, "fit.py") == [(6, "TD201")]  # the one holding a layer with parameters


def test_the_item_method_of_a_meter_class_of_another_module_reads_no_tensor(project: Path) -> None:
    write(project, {
        "meters.py": """\
            class Average:
                def __init__(self):
                    self.total, self.n = 0.0, 0

                def add(self, v):
                    self.total += v
                    self.n += 1

                def item(self):
                    return self.total / max(self.n, 1)
            """,
        "evaluate.py": """\
            import torch
            from torch import nn
            from meters import Average

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            net = nn.Linear(3, 1).to(device)

            def evaluate(batches):
                average = Average()
                with torch.no_grad():
                    for x, y in batches:
                        x, y = x.to(device), y.to(device)
                        err = (net(x) - y).abs().mean()
                        average.add(err.item())
                        print(average.item())
            """,
    })
    results = check_files(["evaluate.py", "meters.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "evaluate.py") == [(14, "TD603")]  # the tensor's .item(), not the meter's


def test_a_logger_of_another_module_that_reads_the_tensors_it_is_handed(project: Path) -> None:
    write(project, {
        "logs.py": """\
            import torch

            class StatLogger:
                def __init__(self):
                    self.last = {}

                def update(self, **kw):
                    for k, v in kw.items():
                        if isinstance(v, torch.Tensor):
                            v = v.item()
                        self.last[k] = v
            """,
        "train.py": """\
            import torch
            from torch import nn
            from logs import StatLogger

            def train_epoch(net, opt, loader, scaler, device, mixing):
                log, seen = StatLogger(), 0
                for x, y in loader:
                    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                    out = net(x)
                    loss = nn.functional.cross_entropy(out, y)
                    opt.zero_grad()
                    scaler.scale(loss).backward()
                    scaler.step(opt)
                    scaler.update()
                    if mixing:
                        acc = None
                    else:
                        acc = (out.argmax(-1) == y).float().mean()
                    loss_scale_value = scaler.state_dict()["scale"]
                    log.update(acc=acc)
                    log.update(loss_scale=loss_scale_value)
                    seen += 1

            def main(net, opt, loader):
                device = torch.device("cuda")
                train_epoch(net.to(device), opt, loader, torch.amp.GradScaler("cuda"), device, False)
            """,
    })
    results = check_files(["train.py", "logs.py"], Settings(root=str(project), select=("TD603",)))
    # the logger's read, named at the loop's call with a tensor (or None); not the call with the scale, a float;
    # and the scaler's state_dict() read itself
    assert codes(results, "train.py") == [(19, "TD603"), (20, "TD603")]


def test_a_collate_function_of_another_module_that_regroups_with_python_gives_nothing_to_pin(project: Path) -> None:
    write(project, {
        "batching.py": """\
            from itertools import chain
            import torch

            def join_rows(rows):
                docs, summaries = zip(*rows)
                docs = [s for d in docs for s in d if s]
                return docs, list(chain.from_iterable(summaries))

            def pad_rows(rows):
                return torch.nn.utils.rnn.pad_sequence([torch.tensor(r) for r in rows], batch_first=True)
            """,
        "train.py": """\
            import torch
            from torch.utils.data import DataLoader
            from batching import join_rows, pad_rows

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            def main(rows, net, vocab):
                texts = DataLoader(rows, batch_size=64, num_workers=2, collate_fn=join_rows)
                padded = DataLoader(rows, batch_size=64, num_workers=2, collate_fn=pad_rows)
                net = net.to(device)
                for docs, sums in texts:
                    ids = torch.tensor([[vocab[w] for w in d.split()] for d in docs]).to(device)
                    net(ids).sum().backward()
                for batch in padded:
                    net(batch.to(device)).sum().backward()
            """,
    })
    results = check_files(["train.py", "batching.py"], Settings(root=str(project), select=("TD304",)))
    assert codes(results, "train.py") == [(9, "TD304")]  # the padded tensors, not the regrouped text


def test_an_options_object_made_by_a_config_module_that_sets_a_cuda_device(project: Path) -> None:
    write(project, {
        "config.py": """\
            import argparse
            import torch

            class OptInit:
                def __init__(self):
                    args = argparse.ArgumentParser().parse_args([])
                    args.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                    self.args = args

                def get_args(self):
                    return self.args

            def plain_options():
                args = argparse.ArgumentParser().parse_args([])
                args.device = "cpu"
                return args
            """,
        "train.py": """\
            import torch
            from torch import nn
            from torch.utils.data import DataLoader
            from config import OptInit

            def main(data):
                opt = OptInit().get_args()
                loader = DataLoader(data, batch_size=8, shuffle=True, num_workers=4)
                model = nn.Linear(3, 2).to(opt.device)
                optim = torch.optim.SGD(model.parameters(), lr=0.1)
                for pts, lab in loader:
                    pts, lab = pts.to(opt.device), lab.to(opt.device)
                    loss = nn.functional.cross_entropy(model(pts), lab)
                    optim.zero_grad()
                    loss.backward()
                    optim.step()
                    print(loss.item())
            """,
        "train_cpu.py": """\
            import torch
            from torch import nn
            from torch.utils.data import DataLoader
            from config import plain_options

            def main(data):
                opt = plain_options()
                loader = DataLoader(data, batch_size=8, shuffle=True, num_workers=4)
                model = nn.Linear(3, 2).to(opt.device)
                optim = torch.optim.SGD(model.parameters(), lr=0.1)
                for pts, lab in loader:
                    pts, lab = pts.to(opt.device), lab.to(opt.device)
                    loss = nn.functional.cross_entropy(model(pts), lab)
                    optim.zero_grad()
                    loss.backward()
                    optim.step()
                    print(loss.item())
            """,
    })
    results = check_files(["train.py", "train_cpu.py", "config.py"],
                          Settings(root=str(project), select=("TD304", "TD603")))
    assert codes(results, "train.py") == [(8, "TD304"), (17, "TD603")]
    assert codes(results, "train_cpu.py") == []


def test_a_runner_subclass_of_a_base_runner_that_trains_on_the_gpu(project: Path) -> None:
    write(project, {
        "base_runner.py": """\
            import torch

            class BaseRunner:
                def __init__(self):
                    self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

                def fit(self, model, loader):
                    model.to(self.device)
                    for x, y in loader:
                        loss = model.loss(model(x.to(self.device)), y.to(self.device))
                        model.optimizer.zero_grad()
                        loss.backward()
                        model.optimizer.step()
            """,
        "pair_runner.py": """\
            import numpy as np
            import torch
            from base_runner import BaseRunner

            class PairRunner(BaseRunner):
                def fit(self, model, loader):
                    losses = []
                    for batch in loader:
                        batch = {k: v.to(model.device) for k, v in batch.items()}
                        loss = model.loss(model(batch))
                        model.optimizer.zero_grad()
                        loss.backward()
                        model.optimizer.step()
                        losses.append(loss.detach().cpu().numpy())
                    return np.mean(losses)
            """,
        "plain_runner.py": """\
            import numpy as np
            import torch

            class PlainRunner:
                def fit(self, model, loader):
                    losses = []
                    for batch in loader:
                        loss = model.loss(model(batch))
                        model.optimizer.zero_grad()
                        loss.backward()
                        model.optimizer.step()
                        losses.append(loss.detach().cpu().numpy())
                    return np.mean(losses)
            """,
    })
    results = check_files(["pair_runner.py", "plain_runner.py", "base_runner.py"],
                          Settings(root=str(project), select=("TD603",)))
    assert codes(results, "pair_runner.py") == [(14, "TD603")]
    assert codes(results, "plain_runner.py") == []


def test_a_wrapped_save_read_back_by_a_project_helper_that_slices_the_prefix(project: Path) -> None:
    write(project, {
        "helpers/__init__.py": "from .checkpoints import *\n",
        "helpers/checkpoints.py": """\
            from collections import OrderedDict
            import torch

            def load_checkpoint(net, path):
                blob = torch.load(path, map_location="cpu", weights_only=True)
                try:
                    net.load_state_dict(blob["weights"])
                except RuntimeError:
                    fixed = OrderedDict()
                    for k, v in blob["weights"].items():
                        fixed[k[7:] if "module." in k else k] = v
                    net.load_state_dict(fixed)
            """,
        "train.py": """\
            import torch
            from torch import nn
            import helpers

            def train(net, opt, loader, path, resume):
                net = nn.DataParallel(net).cuda()
                if resume:
                    helpers.load_checkpoint(net, path)
                for x, y in loader:
                    opt.zero_grad()
                    nn.functional.mse_loss(net(x.cuda()), y.cuda()).backward()
                    opt.step()
                torch.save({"weights": net.state_dict()}, path)
            """,
        "export.py": """\
            import torch
            from torch import nn

            def export(net, path):
                net = nn.DataParallel(net).cuda()
                torch.save({"weights": net.state_dict()}, path)
            """,
    })
    results = check_files(["train.py", "export.py", "helpers/__init__.py", "helpers/checkpoints.py"],
                          Settings(root=str(project), select=("TD205",)))
    assert codes(results, "train.py") == []  # the program reads its checkpoints back through the stripping helper
    assert codes(results, "export.py") == [(6, "TD205")]


def test_the_output_of_a_buffer_only_layer_of_another_module_needs_no_detach(project: Path) -> None:
    write(project, {
        "layers.py": """\
            from pathlib import Path

            import numpy as np
            import torch
            from torch import nn

            class Continuation(nn.Module):
                def __init__(self, d, extra):
                    super().__init__()
                    self.d, self.extra = d, extra

            class GramContinuation(Continuation):
                def __init__(self, d=3, extra=20, folder=None):
                    super().__init__(d, extra)
                    self.folder = Path(__file__).parent / "matrices" if folder is None else Path(folder)
                    self.register_buffer("left", torch.from_numpy(np.eye(d)))

                def forward(self, x):
                    return torch.cat([x, x[..., -self.d:] @ self.left], dim=-1)

            class Learned(Continuation):
                def __init__(self, d=3, extra=20):
                    super().__init__(d, extra)
                    self.proj = nn.Linear(d, d)

                def forward(self, x):
                    return self.proj(x)
            """,
        "plot.py": """\
            import torch
            from layers import GramContinuation, Learned

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            signal = torch.rand(1, 8, 3, dtype=torch.float64)
            extension = GramContinuation(d=3, extra=20)
            extended = extension(signal)
            print(extended[0].numpy())
            layer = Learned()
            learned = layer(signal.float())
            print(learned[0].numpy())
            """,
    })
    results = check_files(["plot.py", "layers.py"], Settings(root=str(project), select=("TD501",)))
    assert codes(results, "plot.py") == [(11, "TD501")]  # the layer with parameters records a graph


def test_a_subclass_hook_behind_a_debug_switch_of_the_base_loop_is_not_every_step(project: Path) -> None:
    write(project, {
        "base_trainer.py": """\
            import torch

            class BaseTrainer:
                def __init__(self, opt, model):
                    self.opt = opt
                    self.model = model.to(torch.device("cuda" if torch.cuda.is_available() else "cpu"))

                def run_epoch(self, loader, optimizer):
                    for batch in loader:
                        batch = {k: v.to(self.opt.device) for k, v in batch.items()}
                        output = self.model(batch["input"])
                        loss = self.loss(output, batch)
                        optimizer.zero_grad()
                        loss.backward()
                        optimizer.step()
                        self.after_step(output)
                        if self.opt.debug > 0:
                            self.debug(batch, output)
            """,
        "det_trainer.py": """\
            import torch
            from base_trainer import BaseTrainer

            class DetTrainer(BaseTrainer):
                def loss(self, output, batch):
                    return (output - batch["target"]).pow(2).mean()

                def after_step(self, output):
                    self.last = output.max().item()

                def debug(self, batch, output):
                    self.shown = output.detach().cpu().numpy()
            """,
    })
    results = check_files(["det_trainer.py", "base_trainer.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "det_trainer.py") == [(9, "TD603")]  # after_step runs every step; debug only when asked


def test_a_kernel_module_imported_relatively_from_its_own_cuda_extension(project: Path) -> None:
    write(project, {
        "pkg/__init__.py": "",
        "pkg/ops/__init__.py": "",
        "pkg/ops/setup.py": """\
            from setuptools import setup
            from torch.utils.cpp_extension import BuildExtension, CUDAExtension

            setup(name="_kern", ext_modules=[CUDAExtension("_kern", ["src/kern.cpp", "src/kern_cuda.cu"])],
                  cmdclass={"build_ext": BuildExtension})
            """,
        "pkg/ops/pool.py": """\
            import torch
            from torch.autograd import Function
            from ._kern import pool_forward

            class PoolFn(Function):
                @staticmethod
                def forward(ctx, feats, size):
                    out = torch.zeros((size, feats.size(1)), device="cuda")
                    pool_forward(feats, torch.LongTensor([1, 2, 3]).cuda(), out)
                    return out
            """,
        "pkg/plain.py": """\
            import torch

            def scratch(n):
                return torch.zeros(n, device="cuda")
            """,
    })
    results = check_files(["pkg/ops/pool.py", "pkg/plain.py"], Settings(root=str(project), select=("TD101",)))
    assert codes(results, "pool.py") == []  # GPU-only: its kernels are built from .cu sources
    assert codes(results, "plain.py") == [(4, "TD101")]


def test_a_save_helper_called_unguarded_only_to_load_writes_on_rank_zero(project: Path) -> None:
    """``def checkpoint(path, model=None)`` saves when handed a model (always behind a rank guard) and loads
    otherwise: the unguarded start-up call passes no model, so it never reaches ``torch.save``. A call that does pass
    one on every rank writes on every rank."""
    write(project, {
        "utils.py": """\
            import torch
            import torch.distributed as dist

            def init_distributed():
                dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")

            def is_main_process():
                return not dist.is_initialized() or dist.get_rank() == 0

            def checkpoint(path, model=None, step=0):
                if model is not None:
                    torch.save({"model": model.state_dict(), "step": step}, path)
                else:
                    return torch.load(path, map_location="cpu", weights_only=True)

            def snapshot(path, model=None):
                if model is None:
                    return None
                torch.save(model.state_dict(), path)
            """,
        "train.py": """\
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP
            from utils import checkpoint, init_distributed, is_main_process, snapshot

            def main(resume, loader):
                init_distributed()
                state = checkpoint("m.pt") if resume else None
                model = DDP(torch.nn.Linear(2, 2).cuda())
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                for step, (x, y) in enumerate(loader):
                    loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    if step % 10 == 0 and is_main_process():
                        checkpoint("m.pt", model.module, step)
                    snapshot("s.pt", model=model.module)

            if __name__ == "__main__":
                main(True, [])
            """,
    })
    results = check_files(["utils.py", "train.py"], Settings(root=str(project), select=("TD703",)))
    assert codes(results, "utils.py") == [(19, "TD703")]  # snapshot: handed a model on every rank


def test_a_method_nothing_calls_writes_on_no_rank(project: Path) -> None:
    """``State.save`` is named nowhere but as ``torch.save``: the training script saves through
    ``save_checkpoint(state, ...)`` behind its rank guard, so the method's write runs on no rank. ``Saver.dump`` is
    called on every rank, and ``Hook.save`` of a library base may be called by the library: both stay."""
    write(project, {
        "utils.py": """\
            import torch
            import torch.distributed as dist

            def init_distributed():
                dist.init_process_group("nccl")

            class State:
                def __init__(self, model):
                    self.model = model

                def snapshot(self):
                    return {"model": self.model.state_dict()}

                def save(self, f):
                    torch.save(self.snapshot(), f)

            class Saver:
                def dump(self, model, f):
                    torch.save(model.state_dict(), f)

            class Hook(torch.nn.Module):
                def save(self, f):
                    torch.save(self.state_dict(), f)

            def save_checkpoint(state, f):
                torch.save(state.snapshot(), f)
            """,
        "train.py": """\
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP
            from utils import Saver, State, init_distributed, save_checkpoint

            def main(loader):
                init_distributed()
                model = DDP(torch.nn.Linear(2, 2).cuda())
                state = State(model.module)
                saver = Saver()
                for x in loader:
                    model(x.cuda()).sum().backward()
                if dist.get_rank() == 0:
                    save_checkpoint(state, "m.pt")
                saver.dump(model.module, "last.pt")

            if __name__ == "__main__":
                main([])
            """,
    })
    results = check_files(["utils.py", "train.py"], Settings(root=str(project), select=("TD703",)))
    assert codes(results, "utils.py") == [(19, "TD703"), (23, "TD703")]


def test_a_batch_the_model_of_another_module_moves_in_its_forward_is_handed_over_as_it_is(project: Path) -> None:
    """``loss = model(batch)`` where ``model``'s class (another module) has a forward, inherited from its base, that
    hands the batch to ``self.process_data``, which moves each element: the batch needs no move of its own. A model
    whose forward moves nothing is handed a batch on the host."""
    write(project, {
        "main_model.py": """\
            import torch
            import torch.nn as nn

            class Base(nn.Module):
                def __init__(self, device):
                    super().__init__()
                    self.device = device
                    self.net = nn.Linear(4, 1)

                def forward(self, batch, is_train=1):
                    x = self.process_data(batch)
                    return self.net(x).mean()

            class Physio(Base):
                def process_data(self, batch):
                    return batch["x"].to(self.device).float()

            class Plain(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.net = nn.Linear(4, 1)

                def forward(self, batch):
                    return self.net(batch["x"]).mean()
            """,
        "exe.py": """\
            import torch
            from torch.utils.data import DataLoader
            from main_model import Physio, Plain

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = Physio(device).to(device)
            plain = Plain().to(device)
            opt = torch.optim.Adam([*model.parameters(), *plain.parameters()])
            loader = DataLoader([{"x": torch.randn(4)}] * 8, batch_size=2, pin_memory=True, num_workers=2)
            for epoch in range(3):
                for batch in loader:
                    opt.zero_grad()
                    loss = model(batch)
                    loss = loss + plain(batch)
                    loss.backward()
                    opt.step()
            """,
    })
    results = check_files(["main_model.py", "exe.py"], Settings(root=str(project), select=("TD302",)))
    assert codes(results, "exe.py") == [(14, "TD302")]  # plain(batch) only: Physio moves what it is given


def test_an_evaluation_through_a_model_method_of_another_module_that_runs_its_layers(project: Path) -> None:
    """``self.m.process(x)`` in an evaluation loop, where ``process`` (a method of the model class in ``models.py``)
    runs the generator: a forward by another name, with autograd on. Its ``metrics`` method runs no layer, and the
    same ``process`` under ``no_grad`` records nothing."""
    write(project, {
        "models.py": """\
            import torch
            import torch.nn as nn

            class Inpaint(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.generator = nn.Linear(4, 4)
                    self.opt = torch.optim.Adam(self.generator.parameters())

                def process(self, x):
                    self.opt.zero_grad()
                    out = self.generator(x)
                    return out, (out ** 2).mean()

                def metrics(self, out, x):
                    return (out - x).abs().mean()

                def backward(self, loss):
                    loss.backward()
                    self.opt.step()
            """,
        "run.py": """\
            import torch
            from models import Inpaint

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            class Runner:
                def __init__(self):
                    self.model = Inpaint().to(device)

                def train(self, loader):
                    for x in loader:
                        out, loss = self.model.process(x.to(device))
                        self.model.backward(loss)

                def eval(self, loader):
                    self.model.eval()
                    for x in loader:
                        x = x.to(device)
                        out, loss = self.model.process(x)
                        score = self.model.metrics(x, x)

                def test(self, loader):
                    self.model.eval()
                    with torch.no_grad():
                        for x in loader:
                            out, loss = self.model.process(x.to(device))
            """,
    })
    results = check_files(["models.py", "run.py"], Settings(root=str(project), select=("TD401",)))
    assert codes(results, "run.py") == [(19, "TD401")]


def test_a_detector_of_another_module_built_for_inference_records_no_graph(project: Path) -> None:
    """``net = yolo_net(device, trainable=False)`` of a class in ``models/yolo.py`` whose forward returns
    ``self.inference(x)`` (``@torch.no_grad()``) unless built trainable: the demo's helper and the test loop run it
    without autograd. The same class built ``trainable=True``, and a class without the switch, still record one."""
    write(project, {
        "models/__init__.py": "",
        "models/yolo.py": """\
            import torch
            import torch.nn as nn

            class YOLO(nn.Module):
                def __init__(self, device, input_size=416, trainable=False):
                    super().__init__()
                    self.trainable = trainable
                    self.head = nn.Conv2d(3, 25, 1)

                @torch.no_grad()
                def inference(self, x):
                    return self.head(x).sigmoid()

                def forward(self, x, target=None):
                    if not self.trainable:
                        return self.inference(x)
                    return self.head(x).mean()

            class Plain(nn.Module):
                def __init__(self, device):
                    super().__init__()
                    self.head = nn.Conv2d(3, 25, 1)

                def forward(self, x):
                    return self.head(x)
            """,
        "demo.py": """\
            import torch
            from models.yolo import YOLO as yolo_net
            from models.yolo import Plain

            def detect(net, device, frames):
                for frame in frames:
                    x = frame.unsqueeze(0).to(device)
                    boxes = net(x)
                    print(boxes.shape)

            def run(net, frames):
                for frame in frames:
                    print(net(frame[None]).shape)

            if __name__ == "__main__":
                device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                net = yolo_net(device=device, input_size=416, trainable=False).to(device)
                net.eval()
                detect(net, device, [torch.rand(3, 8, 8)])
                other = yolo_net(device, 416, True).to(device)
                other.eval()
                detect_all = [other(torch.rand(1, 3, 8, 8, device=device)) for _ in range(2)]
                plain = Plain(device).to(device)
                plain.eval()
                run(plain, [torch.rand(3, 8, 8, device=device)])
            """,
    })
    results = check_files(["models/yolo.py", "demo.py"], Settings(root=str(project), select=("TD401",)))
    assert codes(results, "demo.py") == [(13, "TD401"), (22, "TD401")]


def test_a_method_its_init_calls_and_another_modules_loop_calls_every_step(project: Path) -> None:
    """``init_hidden`` of an LSTM classifier makes ``torch.zeros(...).cuda()``: its ``__init__`` calls it once, and the
    training loop of ``main.py`` calls ``model.init_hidden()`` on every batch, through ``model = model.cuda()`` after
    ``model = lstm.LSTMClassifier(...)`` (a module imported under an alias): a CPU allocation and a copy every step.
    ``init_table``, which only ``__init__`` calls, runs once."""
    write(project, {
        "utils/__init__.py": "",
        "utils/lstm.py": """\
            import torch
            import torch.nn as nn

            class LSTMClassifier(nn.Module):
                def __init__(self, hidden_dim, batch_size, use_gpu):
                    super().__init__()
                    self.use_gpu, self.batch_size, self.hidden_dim = use_gpu, batch_size, hidden_dim
                    self.lstm = nn.LSTM(8, hidden_dim, batch_first=True)
                    self.hidden = self.init_hidden()
                    self.table = self.init_table()

                def init_hidden(self):
                    if self.use_gpu:
                        return torch.zeros(1, self.batch_size, self.hidden_dim).cuda()
                    return torch.zeros(1, self.batch_size, self.hidden_dim)

                def init_table(self):
                    return torch.zeros(4, self.hidden_dim).cuda() if self.use_gpu else torch.zeros(4, self.hidden_dim)

                def forward(self, x):
                    out, _ = self.lstm(x, (self.hidden, self.hidden))
                    return out[:, -1]
            """,
        "main.py": """\
            import torch
            import utils.lstm as LSTMC

            use_gpu = torch.cuda.is_available()
            model = LSTMC.LSTMClassifier(hidden_dim=16, batch_size=4, use_gpu=use_gpu)
            if use_gpu:
                model = model.cuda()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in [torch.rand(4, 5, 8) for _ in range(3)]:
                x = x.cuda() if use_gpu else x
                model.zero_grad()
                model.hidden = model.init_hidden()
                loss = model(x).sum()
                loss.backward()
                opt.step()
            """,
    })
    results = check_files(["utils/lstm.py", "main.py"], Settings(root=str(project), select=("TD611",)))
    assert codes(results, "lstm.py") == [(14, "TD611")]


def test_a_training_helper_handed_a_ddp_wrapper_of_a_moved_model_reads_on_the_gpu(project: Path) -> None:
    """``utils.train_step(ddp_model, ...)`` where ``ddp_model = DDP(model, device_ids=[rank])`` wraps a model moved
    with ``.to(rank)``: the helper's loop runs on the GPU, so its per-iteration ``loss.item()`` waits for it. Handed
    an unmoved model's wrapper (a CPU ``gloo`` run), it does not."""
    write(project, {
        "utils.py": """\
            import torch

            def train_step(model, optimizer, inputs, targets, loss_fn, num_iters):
                for i in range(num_iters):
                    optimizer.zero_grad()
                    loss = loss_fn(model(inputs), targets)
                    loss.backward()
                    optimizer.step()
                    print(f"iter {i}: {loss.item()}")
            """,
        "ddp_train.py": """\
            import torch
            import torch.distributed as dist
            import torch.nn as nn
            from torch.nn.parallel import DistributedDataParallel as DDP
            import utils

            def run(rank):
                dist.init_process_group("nccl")
                inputs = torch.randn(3, 5).to(rank)
                targets = torch.randn(3, 5).to(rank)
                model = nn.Linear(5, 5).to(rank)
                ddp_model = DDP(model, device_ids=[rank])
                opt = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
                utils.train_step(ddp_model, opt, inputs, targets, nn.MSELoss(), 100)
            """,
    })
    results = check_files(["utils.py", "ddp_train.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "utils.py") == [(9, "TD603")]
    write(project, {"ddp_train.py": """\
        import torch
        import torch.distributed as dist
        import torch.nn as nn
        from torch.nn.parallel import DistributedDataParallel as DDP
        import utils

        def run(rank):
            dist.init_process_group("gloo")
            model = nn.Linear(5, 5)
            ddp_model = DDP(model)
            opt = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
            utils.train_step(ddp_model, opt, torch.randn(3, 5), torch.randn(3, 5), nn.MSELoss(), 100)
        """})
    results = check_files(["utils.py", "ddp_train.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "utils.py") == []


def test_a_save_helper_of_another_module_handed_a_data_parallel_wrapper(project: Path) -> None:
    """``utils.train(args, model=model)`` and ``Trainer(args, model)`` after ``model = nn.DataParallel(model)``: the
    helper's ``torch.save({"model": model.state_dict()})`` and the trainer's ``self.model.state_dict()`` (``self.model
    = model`` in ``__init__``, moved in place later) save ``module.`` keys. The same helpers handed the inner model
    (``model.module``) save plain keys."""
    write(project, {
        "utils.py": """\
            import torch

            def train(args, model, *, loader, path):
                for x in loader:
                    model(x).sum().backward()
                torch.save({"model": model.state_dict(), "epoch": 1}, path)

            class Trainer:
                def __init__(self, args, model, device="cuda"):
                    self.args = args
                    self.model = model
                    self.model = self.model.to(device)

                def save(self, path):
                    torch.save({"state_dict": self.model.state_dict()}, path)
            """,
        "main.py": """\
            import torch
            import torch.nn as nn
            import utils
            from utils import Trainer

            model = nn.Linear(4, 4)
            if torch.cuda.device_count() > 1:
                model = nn.DataParallel(model).cuda()
            utils.train(None, model=model, loader=[torch.rand(2, 4)], path="m.pt")
            Trainer(None, model).save("t.pt")
            """,
    })
    results = check_files(["utils.py", "main.py"], Settings(root=str(project), select=("TD205",)))
    assert codes(results, "utils.py") == [(6, "TD205"), (15, "TD205")]
    write(project, {"main.py": """\
        import torch
        import torch.nn as nn
        import utils
        from utils import Trainer

        net = nn.DataParallel(nn.Linear(4, 4))
        utils.train(None, model=net.module, loader=[torch.rand(2, 4)], path="m.pt")
        Trainer(None, net.module).save("t.pt")
        """})
    results = check_files(["utils.py", "main.py"], Settings(root=str(project), select=("TD205",)))
    assert codes(results, "utils.py") == []


def test_hard_coded_cuda_in_a_helper_no_module_calls_never_crashes(project: Path) -> None:
    """``losses.py`` (no script itself) hard-codes ``.cuda()`` in ``adj_loss_``, which neither it nor ``train.py``,
    its importer, ever calls: that code never runs, so it crashes nowhere (TD102 still names the ``.cuda()``). Its
    ``local_loss``, which ``train.py`` calls, crashes without a GPU."""
    write(project, {
        "losses.py": """\
            import torch

            def local_loss(x):
                return (x - torch.ones(x.shape).cuda()).pow(2).mean()

            def adj_loss_(x):
                mask = torch.eye(x.size(0)).cuda()
                return (x * mask).sum()
            """,
        "train.py": """\
            import torch
            from losses import local_loss

            net = torch.nn.Linear(4, 4)
            opt = torch.optim.SGD(net.parameters(), lr=0.1)
            for x in [torch.rand(2, 4)]:
                loss = local_loss(net(x))
                loss.backward()
                opt.step()
            """,
    })
    results = check_files(["losses.py", "train.py"], Settings(root=str(project), select=("TD101", "TD102")))
    assert codes(results, "losses.py") == [(4, "TD101"), (4, "TD102"), (7, "TD102")]


def test_a_dataset_of_slices_a_project_helper_made_on_the_device_it_was_handed(project: Path) -> None:
    """``samples, labels = charnn.chars_to_labelled_samples(text, idx, n, device)`` (the device by position), then
    ``TensorDataset(samples[:k], labels[:k])``: the helper of another module builds its tensors on that device, so
    the loader yields device tensors and pinning would fail. A dataset of the host lists it also returns is
    pinned as usual."""
    write(project, {
        "charnn.py": """\
            import torch

            def chars_to_labelled_samples(text, idx, n, device="cpu"):
                samples = torch.tensor([idx[c] for c in text[:-1]]).view(-1, n)
                labels = torch.tensor([idx[c] for c in text[1:]]).view(-1, n)
                return samples.to(device=device), labels.to(device=device)

            def host_samples(text, n):
                return torch.tensor([ord(c) for c in text]).view(-1, n)
            """,
        "train.py": """\
            import torch
            import charnn

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            samples, labels = charnn.chars_to_labelled_samples("abcdefghij" * 10, {}, 9, device)
            ds = torch.utils.data.TensorDataset(samples[:8], labels[:8])
            dl = torch.utils.data.DataLoader(ds, 4, shuffle=False, drop_last=True)
            host = charnn.host_samples("abcdefghij" * 10, 10)
            dl_host = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(host[:8]), 4, num_workers=2)
            model = torch.nn.Embedding(128, 8).to(device)
            for loader in (dl, dl_host):
                for (x, *rest) in loader:
                    model(x.to(device)).sum().backward()
            """,
    })
    results = check_files(["charnn.py", "train.py"], Settings(root=str(project), select=("TD304",)))
    assert codes(results, "train.py") == [(9, "TD304")]


def test_a_factory_handed_to_a_moving_helper_of_another_module_is_copied_every_step(project: Path) -> None:
    """``cuda_variable(torch.zeros(1, b, 8))`` in a forward, where ``utils.cuda_variable`` moves its parameter to the
    GPU when there is one: made on the CPU and copied every step. ``utils.wrap`` moves nothing."""
    write(project, {
        "utils.py": """\
            import torch
            from torch.autograd import Variable

            def cuda_variable(tensor):
                if torch.cuda.is_available():
                    tensor = tensor.cuda()
                return Variable(tensor)

            def wrap(tensor):
                return Variable(tensor)
            """,
        "model.py": """\
            import torch
            import torch.nn as nn
            from utils import cuda_variable, wrap

            class RNN(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.gru = nn.GRU(4, 8, batch_first=True)

                def forward(self, x):
                    h = cuda_variable(torch.zeros(1, x.size(0), 8))
                    c = wrap(torch.zeros(1, x.size(0), 8))
                    out, _ = self.gru(x, h + c)
                    return out
            """,
    })
    results = check_files(["utils.py", "model.py"], Settings(root=str(project), select=("TD611",)))
    assert codes(results, "model.py") == [(11, "TD611")]


def test_a_loader_handed_with_a_cuda_device_to_a_trainer_class_of_another_module(project: Path) -> None:
    """``Trainer(device, loader).train(10)``, where ``device`` is a CUDA choice and the trainer (another module) moves
    each batch to the device it is given: the loader feeds the GPU. The same trainer told to use the CPU does not."""
    write(project, {
        "trainer.py": """\
            import torch
            import torch.nn as nn

            class Trainer(object):
                def __init__(self, device, data_loader):
                    self.device, self.data_loader = device, data_loader
                    self.net = nn.Linear(4, 1).to(device)
                    self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1)

                def train(self, epochs):
                    for _ in range(epochs):
                        for batch in self.data_loader:
                            loss = self.net(batch["x"].to(self.device)).pow(2).mean()
                            self.opt.zero_grad()
                            loss.backward()
                            self.opt.step()
            """,
        "main.py": """\
            import torch
            from torch.utils.data import DataLoader
            from trainer import Trainer

            device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
            loader = DataLoader([{"x": torch.randn(4)}] * 8, batch_size=8, shuffle=True)
            Trainer(device, loader).train(10)
            """,
        "cpu_main.py": """\
            import torch
            from torch.utils.data import DataLoader
            from trainer import Trainer

            loader = DataLoader([{"x": torch.randn(4)}] * 8, batch_size=8, shuffle=True)
            Trainer("cpu", loader).train(10)
            """,
    })
    results = check_files(["trainer.py", "main.py", "cpu_main.py"], Settings(root=str(project), select=("TD304", "TD305")))
    assert codes(results, "main.py") == [(6, "TD304")]  # (TD305, no workers, named in its message)
    assert codes(results, "cpu_main.py") == []


def test_a_non_blocking_copy_from_a_loader_a_factory_of_another_module_leaves_unpinned(project: Path) -> None:
    """``train_loader, test_loader = get_loaders(4)`` where ``data.get_loaders`` pins the test loader only: the
    non-blocking copies of the training batches come from pageable memory (TD306); the test batches' do not."""
    write(project, {
        "data.py": """\
            import torch
            from torch.utils.data import DataLoader

            def get_loaders(bs):
                train_ds = torch.utils.data.TensorDataset(torch.randn(16, 4))
                test_ds = torch.utils.data.TensorDataset(torch.randn(8, 4))
                return DataLoader(train_ds, bs, shuffle=True), DataLoader(test_ds, bs, pin_memory=True)
            """,
        "train.py": """\
            import torch
            from data import get_loaders

            train_loader, test_loader = get_loaders(4)
            model = torch.nn.Linear(4, 1).cuda()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                for (x,) in train_loader:
                    x = x.cuda(non_blocking=True)
                    loss = model(x).mean()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                with torch.no_grad():
                    for (x,) in test_loader:
                        y = model(x.cuda(non_blocking=True))
            """,
    })
    results = check_files(["data.py", "train.py"], Settings(root=str(project), select=("TD306",)))
    assert codes(results, "train.py") == [(9, "TD306")]


def test_cuda_of_a_tensorless_loss_class_of_another_module_cannot_fail(project: Path) -> None:
    """``criteria.MaskedL1Loss().cuda()``: the loss class (another module) holds no tensor (the loss its forward keeps
    is a result of the inputs), so ``.cuda()`` moves nothing and runs without a GPU (TD102 only); a loss class that
    keeps a weight tensor, or a module that keeps and calls the module it is handed, does need one (TD101)."""
    write(project, {
        "criteria.py": """\
            import torch
            import torch.nn as nn

            class MaskedL1Loss(nn.Module):
                def forward(self, pred, target):
                    valid = target > 0
                    diff = pred[valid] - target[valid]
                    self.loss = diff.abs().mean()
                    return self.loss

            class WeightedLoss(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.register_buffer("w", torch.ones(3))

                def forward(self, pred, target):
                    return ((pred - target).abs() * self.w).mean()

            class Features(nn.Module):
                def __init__(self, maker):
                    super().__init__()
                    self.maker = maker

                def forward(self, x):
                    return self.maker(x)
            """,
        "main.py": """\
            import criteria
            import torch

            l1 = criteria.MaskedL1Loss().cuda()
            weighted = criteria.WeightedLoss().cuda()
            features = criteria.Features(torch.nn.Linear(2, 2)).cuda()
            """,
    })
    results = check_files(["criteria.py", "main.py"], Settings(root=str(project), select=("TD101", "TD102")))
    found = codes(results, "main.py")
    assert (4, "TD101") not in found and (4, "TD102") in found and (5, "TD101") in found and (6, "TD101") in found


def test_cuda_of_a_loss_class_of_another_module_made_without_its_class_weights(project: Path) -> None:
    """``CrossEntropyLoss2d(ignore_index=255).cuda()`` of a class (another module) that builds ``nn.NLLLoss(weight)``
    from its ``weight=None``: made without weights it holds no tensor, so ``.cuda()`` cannot fail (TD102 only); made
    with weights, by position or by name, it holds them (TD101)."""
    write(project, {
        "losses.py": """\
            import torch.nn as nn
            import torch.nn.functional as F

            class CrossEntropyLoss2d(nn.Module):
                def __init__(self, weight=None, size_average=True, ignore_index=255):
                    super().__init__()
                    self.nll_loss = nn.NLLLoss(weight, ignore_index=ignore_index)

                def forward(self, inputs, targets):
                    return self.nll_loss(F.log_softmax(inputs, dim=1), targets)
            """,
        "train.py": """\
            import torch
            from losses import CrossEntropyLoss2d

            plain = CrossEntropyLoss2d(size_average=True, ignore_index=255).cuda()
            weighted = CrossEntropyLoss2d(torch.ones(21)).cuda()
            named = CrossEntropyLoss2d(weight=torch.ones(21)).cuda()
            """,
    })
    results = check_files(["losses.py", "train.py"], Settings(root=str(project), select=("TD101", "TD102")))
    found = codes(results, "train.py")
    assert (4, "TD101") not in found and (4, "TD102") in found and (5, "TD101") in found and (6, "TD101") in found


def test_a_meter_fed_elements_of_a_fresh_host_tensor_another_module_returns(project: Path) -> None:
    """``acc = score(out, y)`` of ``metrics.score``, which returns a ``torch.zeros(2)`` it filled on the host: a meter
    fed ``acc[0]`` holds host values, and formatting its average reads nothing. ``mean_err`` computes on its arguments
    (device tensors): its meter's average is read back from the GPU."""
    write(project, {
        "metrics.py": """\
            import torch


            def score(out, tgt):
                acc = torch.zeros(2)
                for n in range(out.size(0)):
                    if out[n].argmax() == tgt[n]:
                        acc[0] += 1.0 / out.size(0)
                return acc


            def mean_err(out, tgt):
                return (out - tgt).abs().mean(1)
            """,
        "train.py": """\
            import torch
            from metrics import mean_err, score


            class AverageMeter:
                def __init__(self):
                    self.sum, self.count, self.avg = 0.0, 0, 0.0

                def update(self, val, n=1):
                    self.sum += val * n
                    self.count += n
                    self.avg = self.sum / self.count


            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(4, 3).to(device)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = torch.utils.data.DataLoader(list(range(8)), batch_size=2, pin_memory=True, num_workers=2)
            meter, errs = AverageMeter(), AverageMeter()
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                out = model(x)
                loss = torch.nn.functional.cross_entropy(out, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                acc = score(out, y)
                meter.update(acc[0], x.size(0))
                err = mean_err(out, out)
                errs.update(err[0], x.size(0))
                print("acc {a:.3f} err {e:.3f}".format(a=meter.avg, e=errs.avg))
            """,
    })
    results = check_files(["metrics.py", "train.py"], Settings(root=str(project), select=("TD603",)))
    found = results[1].findings
    assert [(f.location.line, f.code) for f in found] == [(31, "TD603")] and "errs.avg" in found[0].message


def test_loaders_a_script_hands_to_training_code_of_other_modules(project: Path) -> None:
    """``train(model, opt, train_dataloader=loader, device=device)`` of another module that backpropagates: the loader
    feeds training (TD305), given by keyword too. A loader factory whose importer hands a CUDA device choice to a
    trainer class of a third module (``Trainer(model, opt, device).fit(train_loader)``) feeds that GPU (TD304)."""
    write(project, {
        "utils.py": """\
            import torch
            from torch.utils.data import DataLoader, TensorDataset


            def create_data_loaders(bs):
                ds = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
                train_loader = DataLoader(ds, batch_size=bs, shuffle=True)
                val_loader = DataLoader(ds, batch_size=bs)
                return train_loader, val_loader
            """,
        "training.py": """\
            import torch


            class Trainer:
                def __init__(self, model, optimizer, device="cpu"):
                    self.model, self.optimizer, self.device = model.to(device), optimizer, device

                def fit(self, train_loader, val_loader=None):
                    for epoch in range(3):
                        self.model.train()
                        for x, y in train_loader:
                            x, y = x.to(self.device), y.to(self.device)
                            loss = ((self.model(x) - y) ** 2).mean()
                            self.optimizer.zero_grad()
                            loss.backward()
                            self.optimizer.step()
            """,
        "train.py": """\
            import torch
            import torch.nn as nn
            from training import Trainer
            from utils import create_data_loaders

            device = "cuda" if torch.cuda.is_available() else "cpu"
            train_loader, val_loader = create_data_loaders(8)
            model = nn.Linear(4, 1)
            trainer = Trainer(model, torch.optim.Adam(model.parameters()), device)
            trainer.fit(train_loader, val_loader)
            """,
        "kw/trainlib.py": """\
            import torch


            def train(model=None, opt=None, train_dataloader=None, device="cpu"):
                for x, y in train_dataloader:
                    loss = ((model(x.to(device)) - y.to(device)) ** 2).mean()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            """,
        "kw/main.py": """\
            import torch
            import torch.nn as nn
            from torch.utils.data import DataLoader, TensorDataset
            from trainlib import train

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            ds = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
            model = nn.Linear(4, 1).to(device)
            loader = DataLoader(ds, batch_size=8, shuffle=True, pin_memory=True)
            train(model, torch.optim.SGD(model.parameters(), 0.1), train_dataloader=loader, device=device)
            """,
    })
    results = check_files(["utils.py", "training.py", "train.py"], Settings(root=str(project), select=("TD304", "TD305")))
    assert codes(results, "utils.py") == [(7, "TD304"), (7, "TD305"), (8, "TD304"), (8, "TD305")]
    results = check_files(["kw/trainlib.py", "kw/main.py"], Settings(root=str(project / "kw"), select=("TD304", "TD305")))
    assert codes(results, "main.py") == [(9, "TD305")]


def test_loader_modules_imported_in_branches_all_feed_the_importer(project: Path) -> None:
    """``if aug == "a": from ds.data_a import Wrapper`` / ``elif aug == "b": from ds.data_b import Wrapper``: either
    module's loader feeds the importer's GPU loop, not only the last one imported."""
    write(project, {
        "ds/__init__.py": "",
        "ds/data_a.py": """\
            import torch
            from torch.utils.data import DataLoader, TensorDataset


            class Wrapper:
                def get_loaders(self):
                    ds = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
                    return DataLoader(ds, batch_size=8, num_workers=2)
            """,
        "ds/data_b.py": """\
            import torch
            from torch.utils.data import DataLoader, TensorDataset


            class Wrapper:
                def get_loaders(self):
                    ds = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
                    return DataLoader(ds, batch_size=8, num_workers=2)
            """,
        "main.py": """\
            import torch
            import torch.nn as nn

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


            def main(aug):
                if aug == "a":
                    from ds.data_a import Wrapper
                elif aug == "b":
                    from ds.data_b import Wrapper
                model = nn.Linear(4, 1).to(device)
                opt = torch.optim.SGD(model.parameters(), 0.1)
                for x, y in Wrapper().get_loaders():
                    loss = ((model(x.to(device)) - y.to(device)) ** 2).mean()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            """,
    })
    results = check_files(["ds/data_a.py", "ds/data_b.py", "main.py"], Settings(root=str(project), select=("TD304",)))
    assert codes(results, "data_a.py") == [(8, "TD304")] and codes(results, "data_b.py") == [(8, "TD304")]


def test_torch_module_aliases_a_chain_of_star_imports_brings_in(project: Path) -> None:
    """``from net import *`` where ``net`` does ``from layers import *`` and ``layers`` does ``import torch.nn as nn``,
    ``import torch as t``: ``nn.DataParallel`` is torch's (TD204), its ``state_dict()`` saved has the prefix (TD205),
    and ``t.randn(8, 4).cuda()`` in the loop is a factory made then moved (TD611)."""
    write(project, {
        "layers.py": """\
            import torch.nn as nn
            import torch as t
            """,
        "net.py": """\
            from layers import *


            class Model(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(4, 2)

                def forward(self, x):
                    return self.fc(x) + t.ones(x.size(0), 2).cuda()
            """,
        "train.py": """\
            from net import *

            m = nn.DataParallel(Model().cuda())
            opt = t.optim.Adam(m.parameters())
            for step in range(100):
                loss = m(t.randn(8, 4).cuda()).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            t.save(m.state_dict(), "m.pt")
            """,
    })
    results = check_files(["layers.py", "net.py", "train.py"], Settings(root=str(project), select=("TD204", "TD205", "TD611")))
    assert codes(results, "train.py") == [(3, "TD204"), (6, "TD611"), (10, "TD205")]
    assert codes(results, "net.py") == [(10, "TD611")]


def test_a_flag_a_star_imported_module_sets_to_true_chooses_nothing(project: Path) -> None:
    """``if USE_CUDA: model = model.cuda()`` with ``USE_CUDA = True`` in ``model.py``, brought in by ``from model
    import *``: the flag is always True, so the script crashes without a GPU (TD101). A flag set from
    ``torch.cuda.is_available()`` is a fallback."""
    write(project, {
        "model.py": """\
            import torch
            import torch.nn as nn

            USE_CUDA = True
            HAS_GPU = torch.cuda.is_available()

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(4, 2)

                def forward(self, x):
                    return self.fc(x)
            """,
        "train.py": """\
            import torch
            from model import *

            model = Net()
            if USE_CUDA:
                model = model.cuda()
            other = Net()
            if HAS_GPU:
                other = other.cuda()
            """,
    })
    results = check_files(["model.py", "train.py"], Settings(root=str(project), select=("TD101",)))
    assert codes(results, "train.py") == [(6, "TD101")]


def test_a_loader_subclass_named_in_lower_case_is_a_loader(project: Path) -> None:
    """``class myLoader(DataLoader)`` in ``data.py``, made unpinned in a CUDA training script: a DataLoader (TD304),
    whatever the case of its name."""
    write(project, {
        "data.py": """\
            from torch.utils.data import DataLoader


            class myLoader(DataLoader):
                def __init__(self, *args, **kwargs):
                    super().__init__(*args, **kwargs)
            """,
        "train.py": """\
            import torch
            from data import myLoader

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            ds = torch.utils.data.TensorDataset(torch.randn(16, 4), torch.randn(16, 2))
            loader = myLoader(ds, batch_size=8, shuffle=True, num_workers=4)
            model = torch.nn.Linear(4, 2).to(device)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                loss = (model(x) - y).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            """,
    })
    results = check_files(["data.py", "train.py"], Settings(root=str(project), select=("TD304",)))
    assert codes(results, "train.py") == [(6, "TD304")]


def test_a_read_in_a_trainer_method_a_script_told_to_use_cuda_calls_every_step(project: Path) -> None:
    """``trainer = Trainer(net, torch.cuda.is_available())``, then ``trainer.update(batch)`` for every batch: the
    script runs on the GPU through the trainer (another module), and ``loss.item()`` in ``update`` reads back every
    step."""
    write(project, {
        "trainer.py": """\
            import torch


            class Trainer:
                def __init__(self, model, cuda):
                    self.model = model.cuda() if cuda else model
                    self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
                    self.cuda = cuda

                def update(self, batch):
                    x, y = [b.cuda() for b in batch] if self.cuda else batch
                    self.opt.zero_grad()
                    loss = torch.nn.functional.cross_entropy(self.model(x), y)
                    loss_val = loss.item()
                    loss.backward()
                    self.opt.step()
                    return loss_val
            """,
        "train.py": """\
            import torch
            from trainer import Trainer

            trainer = Trainer(torch.nn.Linear(4, 2), torch.cuda.is_available())
            batches = [(torch.randn(8, 4), torch.randint(0, 2, (8,))) for _ in range(10)]
            total = 0.0
            for epoch in range(3):
                for batch in batches:
                    total += trainer.update(batch)
            """,
    })
    results = check_files(["trainer.py", "train.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "trainer.py") == [(14, "TD603")]


def test_a_method_whose_callers_in_other_modules_put_its_model_in_eval_mode(project: Path) -> None:
    """``learner.model.eval()`` then ``learner.infer(xs)`` in a script: the method's forwards run in eval mode, though
    ``learner.py`` never says so (InsightFace's face_learner)."""
    write(project, {
        "learner.py": """\
            import torch
            import torch.nn as nn


            class Learner:
                def __init__(self, device):
                    self.device = device
                    self.model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Dropout(0.5)).to(device)

                def infer(self, xs):
                    with torch.no_grad():
                        return [self.model(x.to(self.device)) for x in xs]
            """,
        "run.py": """\
            import torch
            from learner import Learner

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            learner = Learner(device)
            learner.model.load_state_dict(torch.load("m.pth", map_location=device, weights_only=True))
            learner.model.eval()
            print(learner.infer([torch.randn(2, 4)]))
            """,
    })
    results = check_files(["learner.py", "run.py"], Settings(root=str(project), select=("TD402",)))
    assert codes(results, "learner.py") == []


def test_a_device_an_options_factory_of_another_module_sets_reaches_the_learner(project: Path) -> None:
    """``conf = get_config()`` (config.py sets ``conf.device`` to CUDA when available), ``Learner(conf)``: the
    learner moves its model and batches to ``conf.device``, a GPU, so its per-step ``loss.item()`` is a sync
    (InsightFace's learner)."""
    write(project, {
        "config.py": """\
            import torch
            from easydict import EasyDict as edict


            def get_config():
                conf = edict()
                conf.device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
                conf.lr = 0.1
                return conf
            """,
        "learner.py": """\
            import torch
            import torch.nn as nn
            import torch.nn.functional as F


            class Learner:
                def __init__(self, conf):
                    self.model = nn.Linear(4, 8).to(conf.device)
                    self.opt = torch.optim.SGD(self.model.parameters(), lr=conf.lr)

                def train(self, conf, loader):
                    running = 0.0
                    for x, y in loader:
                        loss = F.cross_entropy(self.model(x.to(conf.device)), y.to(conf.device))
                        self.opt.zero_grad()
                        loss.backward()
                        self.opt.step()
                        running += loss.item()
                    return running
            """,
        "train.py": """\
            from config import get_config
            from learner import Learner

            conf = get_config()
            learner = Learner(conf)
            learner.train(conf, [])
            """,
    })
    results = check_files(["config.py", "learner.py", "train.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "learner.py") == [(18, "TD603")]


def test_a_factory_in_a_helper_another_module_steps_is_made_then_moved(project: Path) -> None:
    """``to_matrix(net(x))`` in train.py's batch loop, where ``geo.to_matrix`` makes ``torch.zeros(...)`` on the CPU and
    moves it to its input's device: a copy every step, told at the helper with the loop that calls it."""
    write(project, {
        "geo.py": """\
            import torch


            def to_matrix(t):
                m = torch.zeros(t.shape[0], 4, 4).to(device=t.device)
                m[:, :3, 3] = t[:, :3]
                return m
            """,
        "train.py": """\
            import torch
            from geo import to_matrix

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            net = torch.nn.Linear(4, 4).to(device)
            opt = torch.optim.SGD(net.parameters(), lr=0.1)
            loader = torch.utils.data.DataLoader(torch.randn(16, 4), batch_size=4, pin_memory=True, num_workers=2)
            for x in loader:
                m = to_matrix(net(x.to(device)))
                loss = m.pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            """,
    })
    results = check_files(["geo.py", "train.py"], Settings(root=str(project), select=("TD611",)))
    found = results[0].findings
    assert [(f.location.line, f.code) for f in found] == [(5, "TD611")] and "train.py:9" in found[0].message


def test_a_kernel_module_reached_through_a_star_import_is_gpu_only(project: Path) -> None:
    """``from .functions import *`` runs ``functions.py``, which compiles ``.cu`` sources on import: the layers
    module and every model built from it need a GPU, as with ``from .functions import _backend``."""
    write(project, {
        "pkg/__init__.py": "",
        "pkg/functions.py": """\
            from os import path
            from torch.utils.cpp_extension import load

            _backend = load(name="abn", sources=[path.join(path.dirname(__file__), "src", f)
                                                  for f in ["abn.cpp", "abn_cuda.cu"]])
            """,
        "pkg/helpers.py": """\
            def pair(x):
                return (x, x)
            """,
        "pkg/bn.py": """\
            import torch.nn as nn
            from .functions import *

            class FusedBN(nn.BatchNorm2d):
                pass
            """,
        "pkg/plain.py": """\
            import torch.nn as nn
            from .helpers import *

            class Block(nn.Conv2d):
                pass
            """,
        "model.py": """\
            import torch.nn as nn
            from pkg.bn import FusedBN

            net = nn.Sequential(nn.Conv2d(3, 8, 3), FusedBN(8)).cuda()
            """,
        "other.py": """\
            import torch.nn as nn
            from pkg.plain import Block

            net = nn.Sequential(Block(3, 8, 3)).cuda()
            """,
    })
    results = check_files(["model.py", "other.py", "pkg/bn.py", "pkg/plain.py"],
                          Settings(root=str(project), select=("TD101",)))
    assert codes(results, "model.py") == []  # pkg.bn runs pkg.functions, which builds CUDA kernels
    assert codes(results, "other.py") == [(4, "TD101")]  # a star import of a plain module changes nothing


def test_a_validation_batch_a_helper_of_another_module_turns_into_numpy_needs_no_pinning(project: Path) -> None:
    write(project, {
        "val_utils.py": """\
            import numpy as np
            import torch

            def test_single_volume(image, label, net, device):
                image, label = image.squeeze(0).cpu().numpy(), label.squeeze(0).cpu().numpy()
                hits = 0.0
                for k in range(image.shape[0]):
                    inp = torch.from_numpy(image[k])[None, None].float().to(device)
                    with torch.no_grad():
                        pred = net(inp).argmax(1)[0].cpu().numpy()
                    hits += (pred == label[k]).mean()
                return hits / image.shape[0]

            """,
        "train.py": """\
            import torch
            from torch.utils.data import DataLoader
            from val_utils import test_single_volume

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            def validate(net, volumes, batches):
                by_volume = DataLoader(volumes, batch_size=1, num_workers=1)
                by_batch = DataLoader(batches, batch_size=16, num_workers=1)
                net.eval()
                a = 0.0
                for i, v in enumerate(by_volume):
                    a += test_single_volume(v["image"], v["label"], net, device)
                b = []
                for x, y in by_batch:
                    with torch.no_grad():
                        b.append(net(x.to(device, non_blocking=True)).argmax(1))
                return a, b
            """,
    })
    results = check_files(["train.py", "val_utils.py"], Settings(root=str(project), select=("TD304",)))
    assert codes(results, "train.py") == [(9, "TD304")]  # the batches copied to the GPU, not those made NumPy at once


def test_a_model_from_a_factory_of_another_module_that_moves_it_in_every_branch(project: Path) -> None:
    write(project, {
        "factory.py": """\
            import torch.nn as nn

            class TinySeg(nn.Module):
                def __init__(self, c):
                    super().__init__()
                    self.conv = nn.Conv2d(1, c, 3, padding=1)

                def forward(self, x):
                    return self.conv(x)

            def net_factory(kind="tiny", classes=4):
                if kind == "tiny":
                    net = TinySeg(classes).cuda()
                elif kind == "wide":
                    net = nn.Sequential(TinySeg(classes), nn.Conv2d(classes, classes, 1)).cuda()
                else:
                    net = None
                return net

            def plain_factory(classes=4):
                return TinySeg(classes)
            """,
        "train.py": """\
            import torch
            from factory import net_factory, plain_factory

            def create_model(ema=False):
                model = net_factory("tiny", 4)
                if ema:
                    for p in model.parameters():
                        p.detach_()
                return model

            def create_plain():
                model = plain_factory(4)
                return model

            student = create_model()
            teacher = create_model(ema=True)
            other = create_plain()
            x = torch.rand(2, 1, 8, 8).cuda()
            with torch.no_grad():
                t = teacher(x)
            loss = ((student(x) - t) ** 2).mean() + other(x).mean()
            loss.backward()
            """,
    })
    results = check_files(["train.py", "factory.py"], Settings(root=str(project), select=("TD201",)))
    assert codes(results, "train.py") == [(17, "TD201")]  # only the model of the factory that moves nothing


def test_the_copies_of_a_no_grad_prediction_step_the_base_loop_calls_are_kept(project: Path) -> None:
    write(project, {
        "base.py": """\
            import torch

            class Parser:
                def __init__(self, model):
                    self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                    self.model = model.to(self.device)

                def predict(self, loader):
                    self.model.eval()
                    preds = []
                    for batch in loader:
                        preds.append(self.pred_step(batch.to(self.device)))
                    return preds
            """,
        "dep.py": """\
            import torch
            from base import Parser

            class DependencyParser(Parser):
                @torch.no_grad()
                def pred_step(self, batch):
                    scores = self.model(batch)
                    lens = (batch.sum(-1) > 0).sum(-1).tolist()
                    best = scores.argmax(-1).cpu()
                    return best, lens, scores.max().item()
            """,
    })
    results = check_files(["dep.py", "base.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "dep.py") == [(10, "TD603")]  # the scalar read; the copies are the step's outputs


def test_a_device_that_a_star_import_of_a_project_module_brings(project: Path) -> None:
    write(project, {
        "textkit.py": """\
            import torch

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            """,
        "plainkit.py": """\
            import torch

            device = torch.device("cpu")
            """,
        "finetune.py": """\
            import torch
            from torch.utils.data import DataLoader
            from textkit import *

            def train(rows, net, opt):
                feed = DataLoader(rows, batch_size=8, shuffle=True, num_workers=2)
                net = net.to(device)
                for x, y in feed:
                    loss = torch.nn.functional.cross_entropy(net(x.to(device)), y.to(device))
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            """,
        "cpu_finetune.py": """\
            import torch
            from torch.utils.data import DataLoader
            from plainkit import *

            def train(rows, net, opt):
                feed = DataLoader(rows, batch_size=8, shuffle=True, num_workers=2)
                net = net.to(device)
                for x, y in feed:
                    loss = torch.nn.functional.cross_entropy(net(x.to(device)), y.to(device))
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            """,
    })
    results = check_files(["finetune.py", "cpu_finetune.py", "textkit.py", "plainkit.py"],
                          Settings(root=str(project), select=("TD304",)))
    assert codes(results, "finetune.py") == [(6, "TD304")]
    assert codes(results, "cpu_finetune.py") == []


def test_a_dataset_of_text_from_another_module_gives_nothing_to_pin(project: Path) -> None:
    write(project, {
        "name_dataset.py": """\
            import csv
            import gzip
            from torch.utils.data import Dataset

            class NameDataset(Dataset):
                def __init__(self, path):
                    with gzip.open(path, "rt") as f:
                        rows = list(csv.reader(f))
                    self.names = [row[0] for row in rows]

                def __getitem__(self, index):
                    return self.names[index]

                def __len__(self):
                    return len(self.names)
            """,
        "train.py": """\
            import torch
            from torch.utils.data import DataLoader, TensorDataset
            from name_dataset import NameDataset

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            def train(model, to_tensor, optimizer):
                names = DataLoader(NameDataset("n.csv.gz"), batch_size=64, num_workers=2)
                numbers = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4, num_workers=2)
                for loader in (names, numbers):
                    for batch in loader:
                        loss = model(to_tensor(batch).to(device)).sum()
                        optimizer.zero_grad()
                        loss.backward()
                        optimizer.step()
            """,
    })
    results = check_files(["train.py", "name_dataset.py"], Settings(root=str(project), select=("TD304",)))
    assert codes(results, "train.py") == [(9, "TD304")]


def test_a_device_set_in_a_config_module_makes_its_users_gpu_programs(project: Path) -> None:
    write(project, {
        "config.py": 'import torch\n\ndevice = torch.device("cuda" if torch.cuda.is_available() else "cpu")\nlr = 1e-3\n',
        "engine.py": """\
            import torch

            def eval_fn(loader, model, device):
                outs = []
                with torch.no_grad():
                    for x, y in loader:
                        outs.append(model(x.to(device)).sum().item())
                return outs
            """,
        "main.py": """\
            import torch
            import config as CFG
            import engine

            def main(model, loader):
                model.to(CFG.device)
                for x, y in loader:
                    print(model(x.to(CFG.device)).sum().item())
                engine.eval_fn(loader, model, CFG.device)
            """,
        "tune.py": """\
            import torch
            import config
            import engine

            def main(model, loader):
                model.to("cpu")
                for x, y in loader:
                    print(model(x).sum().item(), config.lr)
            """,
    })
    settings = Settings(root=str(project), select=("TD603",))
    results = check_files(["config.py", "engine.py", "main.py", "tune.py"], settings)
    assert codes(results, "main.py") == [(8, "TD603")]
    assert codes(results, "engine.py") == [(7, "TD603")]  # its device comes from main.py's CFG.device
    assert codes(results, "tune.py") == []


def test_a_training_function_given_the_device_but_moving_nothing_runs_where_its_caller_put_the_model(project: Path) -> None:
    write(project, {
        "engine.py": """\
            import torch

            def train_one_epoch(model, loader, optimizer, device, epoch):
                for step, (examples, labels) in enumerate(loader):
                    loss = model(examples, labels)
                    print(loss.item())
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
            """,
        "finetune.py": """\
            import torch
            from engine import train_one_epoch

            def get_args(parser):
                parser.add_argument("--device", default="cuda")
                return parser.parse_args()

            def main(args, model, loader, optimizer):
                device = torch.device(args.device)
                model.to(device)
                for epoch in range(3):
                    train_one_epoch(model, loader, optimizer, device, epoch)
            """,
        "cpu_finetune.py": """\
            import torch
            from engine import train_one_epoch

            def main(model, loader, optimizer):
                train_one_epoch(model, loader, optimizer, torch.device("cpu"), 0)
            """,
    })
    settings = Settings(root=str(project), select=("TD603",))
    assert codes(check_files(["finetune.py", "engine.py"], settings), "engine.py") == [(6, "TD603")]
    assert codes(check_files(["cpu_finetune.py", "engine.py"], settings), "engine.py") == []


SETUP_DDP = """\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP


def setup_model(model, local_rank):
    model = model.to(torch.device("cuda", local_rank))
    return DDP(model, device_ids=[local_rank])


def plain_model(model, local_rank):
    return model.to(torch.device("cuda", local_rank))
"""

SAVES_WRAPPED = """\
import torch
import torch.nn as nn
from setup_ddp import plain_model, setup_model


def main(local_rank, loader):
    model = setup_model(nn.Linear(4, 2), local_rank)
    other = plain_model(nn.Linear(4, 2), local_rank)
    if local_rank == 0:
        torch.save(model.state_dict(), "ckpt.pt")
        torch.save(other.state_dict(), "other.pt")
"""


@pytest.mark.parametrize("together", [True, False])
def test_a_model_wrapped_by_a_helper_of_another_module_is_saved_with_its_prefix(project: Path, together: bool) -> None:
    write(project, {"setup_ddp.py": SETUP_DDP, "train.py": SAVES_WRAPPED})
    settings = Settings(root=str(project))
    results = check_files(["setup_ddp.py", "train.py"], settings) if together else [check_file("train.py", settings)]
    assert [c for c in codes(results, "train.py") if c[1] == "TD205"] == [(10, "TD205")]  # not plain_model's (11)


def test_a_metric_helper_fed_the_data_of_packed_sequences_every_step_is_a_sync(project: Path) -> None:
    # The captioning tutorials' shape: scores and targets are the data of PackedSequences, unpacked or `.data`.
    write(project, {
        "metrics.py": """\
            def accuracy(scores, targets, k):
                _, ind = scores.topk(k, 1, True, True)
                correct = ind.eq(targets.view(-1, 1).expand_as(ind))
                return correct.view(-1).float().sum().item() * (100.0 / targets.size(0))
            """,
        "train.py": """\
            import torch
            from torch.nn.utils.rnn import pack_padded_sequence
            from metrics import *

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            def train(loader, decoder, criterion, optimizer):
                for imgs, caps, lengths in loader:
                    imgs, caps = imgs.to(device), caps.to(device)
                    scores, decode_lengths = decoder(imgs, caps, lengths)
                    scores, _ = pack_padded_sequence(scores, decode_lengths, batch_first=True)
                    targets = pack_padded_sequence(caps[:, 1:], decode_lengths, batch_first=True).data
                    loss = criterion(scores, targets)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    top5 = accuracy(scores, targets, 5)
                    _, sizes = pack_padded_sequence(scores, decode_lengths, batch_first=True)
                    rate = accuracy(sizes, decode_lengths, 1)  # batch_sizes: a CPU tensor, no device read
            """,
    })
    results = check_files(["metrics.py", "train.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "train.py") == [(17, "TD603")]


def test_a_reverse_question_does_not_parse_again_a_checked_file_that_cannot_call_the_function(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = _count_parses(monkeypatch)
    write(project, {
        "a_other.py": "import torch\nfrom tools import engine  # another package's `engine`\n\nengine.train_one_epoch(torch.zeros(1))\n",
        "b_main.py": "import torch\nfrom engine import train_one_epoch\n\ndevice = torch.device('cuda')\n"
                     "model = torch.nn.Linear(2, 2).to(device)\ntrain_one_epoch(model, None, [], None, device)\n",
        "engine.py": """\
            import torch


            def train_one_epoch(model, criterion, data_loader, optimizer, device):
                for samples, targets in data_loader:
                    samples = samples.to(device)
                    loss = criterion(model(samples), targets.to(device))
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    print(loss.item())
            """,
    })
    results = check_files(["a_other.py", "b_main.py", "engine.py"], Settings(root=str(project)), jobs=1)
    assert codes(results, "engine.py") == [(11, "TD603")]  # b_main.py, checked already, gives it a GPU
    # a_other.py says `engine` on an import line but imports another module: only b_main.py is read again
    assert sorted(parsed) == ["a_other.py", "b_main.py", "b_main.py", "engine.py"]


def test_the_tests_of_a_cuda_kernel_built_beside_them_need_no_cpu_fallback(project: Path) -> None:
    test = """\
        import unittest
        import torch
        import window_process_ext


        class TestKernel(unittest.TestCase):
            def test_forward(self):
                x = torch.randn(2, 8).cuda()
                self.assertTrue(torch.equal(window_process_ext.forward(x), x))
        """
    write(project, {"kernels/unit_test.py": test, "kernels/kernel.cu": "// the CUDA source\n", "other/unit_test.py": test})
    settings = Settings(root=str(project), select=("TD101",))
    assert [f.code for f in check_file("kernels/unit_test.py", settings).findings] == []
    assert [f.code for f in check_file("other/unit_test.py", settings).findings] == ["TD101"]  # no CUDA source there


def test_a_save_helper_that_a_ddp_training_loop_calls_on_every_rank_writes_from_every_rank(project: Path) -> None:
    write(project, {
        "ckpt/__init__.py": "from .handler import save_checkpoint, save_summary, save_single\n",
        "ckpt/handler.py": """\
            import torch


            def save_checkpoint(model, path):
                torch.save(model.state_dict(), path)


            def save_summary(model, path):
                torch.save({"n": sum(p.numel() for p in model.parameters())}, path)


            def save_single(model, path):
                torch.save(model.state_dict(), path)
            """,
        "train.py": """\
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP
            from ckpt import save_checkpoint, save_summary, save_single


            def train(args, model, loader, optimizer):
                dist.init_process_group("gloo")
                model = DDP(model)
                for epoch in range(args.epochs):
                    for x in loader:
                        model(x).sum().backward()
                        optimizer.step()
                    save_checkpoint(model, f"epoch{epoch}.pt")
                    if dist.get_rank() == 0:
                        save_summary(model, "summary.pt")
                    if not args.distributed:
                        save_single(model, "single.pt")
            """,
    })
    results = check_files(["ckpt/__init__.py", "ckpt/handler.py", "train.py"],
                          Settings(root=str(project), select=("TD703",)))
    assert codes(results, "handler.py") == [(5, "TD703")]
    message = next(f.message for r in results if r.path.endswith("handler.py") for f in r.findings)
    assert "calls `save_checkpoint` at train.py:14" in message


def test_a_write_helper_handed_a_per_rank_file_name_by_the_ddp_program_writes_apart(project: Path) -> None:
    """NMT: the multi-GPU evaluation hands ``write_data(pred_data, p)`` a path of its own per rank (``p =
    os.path.join(out, "{}_translations.rank{}".format(prefix, rank))``), and a script merges the shards later: every
    rank writes its own file. The same helper handed one shared path is written by every rank."""
    write(project, {
        "utils/tools.py": """\
            import torch


            def write_data(data, write_path):
                with open(write_path, "w") as f:
                    f.write("\\n".join(data))
            """,
        "evaluation/multi_gpu_eval.py": """\
            import os
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP
            from utils.tools import write_data


            def evaluate(args, model, batches):
                dist.init_process_group("gloo")
                rank = dist.get_rank()
                model = DDP(model)
                for epoch in range(args.epochs):
                    pred_data = [str(model(x)) for x in batches]
                    p = os.path.join(args.out, "{}_translations.rank{}".format(args.prefix, rank))
                    write_data(pred_data, p)
                    write_data(pred_data, SHARED)
            """.replace("SHARED", "os.path.join(args.out, 'all.txt')"),
    })
    results = check_files(["utils/tools.py", "evaluation/multi_gpu_eval.py"], Settings(root=str(project), select=("TD703",)))
    assert codes(results, "tools.py") == [(5, "TD703")]
    message = next(f.message for r in results if r.path.endswith("tools.py") for f in r.findings)
    assert "calls `write_data` at evaluation/multi_gpu_eval.py:15" in message


def test_a_loader_factory_counts_for_the_gpu_modules_that_import_it_not_for_those_that_take_other_names(
        project: Path) -> None:
    helpers = """\
        import torch
        from torch import nn
        from torch.utils.data import DataLoader, TensorDataset


        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 2)


        def create_dataloader(n):
            return DataLoader(TensorDataset(torch.randn(n, 4)), batch_size=8, num_workers=2)
        """
    train = """\
        import torch
        from helpers import {names}

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model = Model().to(device)
        """
    write(project, {"helpers.py": helpers, "train.py": train.format(names="Model")})
    settings = Settings(root=str(project), select=("TD304",))
    assert codes(check_files(["helpers.py", "train.py"], settings), "helpers.py") == []
    write(project, {"train.py": train.format(names="Model, create_dataloader")})
    assert codes(check_files(["helpers.py", "train.py"], settings), "helpers.py") == [(13, "TD304")]


def test_a_script_named_test_something_is_a_program_unless_it_holds_tests(project: Path) -> None:
    script = """\
        import argparse
        import torch
        from torch import nn

        parser = argparse.ArgumentParser()
        parser.add_argument("--checkpoint")
        opt = parser.parse_args()
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        generator = nn.Conv2d(3, 3, 3).to(device)
        generator.load_state_dict(torch.load(opt.checkpoint, weights_only=True))
        """
    script = textwrap.dedent(script)  # (what is appended below starts at column 0)
    evaluated = script + "\n\ndef test():\n    return generator(torch.zeros(1, 3, 8, 8))\n\n\nprint(test())\n"
    write(project, {"esrgan/test_on_image.py": script,
                    "esrgan/test_model.py": script + "\n\ndef test_generator():\n    assert generator\n",
                    "mnist/pixel_test.py": evaluated,  # a training script whose evaluation it calls test()
                    "tests/test_launch.py": script})
    settings = Settings(root=str(project), select=("TD502",))
    assert [f.code for f in check_file("esrgan/test_on_image.py", settings).findings] == ["TD502"]
    assert [f.code for f in check_file("mnist/pixel_test.py", settings).findings] == ["TD502"]
    tested = check_file("esrgan/test_model.py", settings)
    assert tested.findings == [] and not tested.errors  # pytest collects it: test code
    assert check_file("tests/test_launch.py", settings).findings == []  # a script a test suite launches


def test_a_submodule_of_a_class_whose_module_base_is_a_few_imports_away_moves_with_it(project: Path) -> None:
    write(project, {
        "models/base_model.py": "from torch import nn\n\n\nclass BaseModel(nn.Module):\n    pass\n",
        "models/minigpt_base.py": "from models.base_model import BaseModel\n\n\nclass MiniGPTBase(BaseModel):\n    pass\n",
        "models/helpers.py": "class Registry:\n    pass\n",
        "models/minigpt4.py": """\
            import torch
            from torch import nn
            from models.minigpt_base import MiniGPTBase
            from models.helpers import Registry

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


            class MiniGPT4(MiniGPTBase):
                def __init__(self):
                    super().__init__()
                    self.proj = nn.Linear(8, 8)

                def encode(self, x):
                    return self.proj(x.to(device))


            class Runner(Registry):
                def __init__(self):
                    self.proj = nn.Linear(8, 8)

                def run(self, x):
                    return self.proj(x.to(device))
            """,
    })
    results = check_files(["models/minigpt4.py"], Settings(root=str(project), select=("TD201",)))
    assert codes(results, "minigpt4.py") == [(20, "TD201")]  # the Runner is no module: its layer stays behind


def test_a_step_method_a_base_class_of_another_module_calls_every_step(project: Path) -> None:
    write(project, {
        "engine/base.py": """\
            class Engine:
                def train(self, loader):
                    for batch_idx, data in enumerate(loader):
                        summary = self.forward_backward(data)
                        if batch_idx % 100 == 0:
                            self.report(summary)

                def forward_backward(self, data):
                    raise NotImplementedError
            """,
        "engine/softmax.py": """\
            import torch
            from engine.base import Engine


            class SoftmaxEngine(Engine):
                def __init__(self, model, optimizer):
                    self.model = model.cuda() if torch.cuda.is_available() else model
                    self.optimizer = optimizer

                def forward_backward(self, data):
                    imgs, pids = data
                    loss = self.model(imgs.cuda()).sum()
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
                    return {"loss": loss.item()}

                def report(self, summary):
                    print(self.model.weight.sum().item())
            """,
    })
    results = check_files(["engine/base.py", "engine/softmax.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "softmax.py") == [(16, "TD603")]  # not report(): the base calls it every 100 steps
    message = next(f.message for r in results if r.path.endswith("softmax.py") for f in r.findings)
    assert "batch loop of `Engine` that calls `self.forward_backward()`" in message


def test_a_read_after_a_helper_that_copies_to_the_host_then_loops_over_the_copies_waits_for_nothing(project: Path) -> None:
    """graph-convnet-tsp's shape: ``mean_tour_len_nodes`` (another module) copies its inputs with ``.cpu().numpy()``,
    then sums in Python loops over the copies; after it (and NumPy work), the loop's ``loss.item()`` waits for
    nothing. After a helper that queues GPU work after its copy, the read waits again."""
    write(project, {
        "utils.py": """\
            def tour_len(x, nodes):
                y = nodes.cpu().numpy()
                w = x.cpu().numpy()
                total = 0
                for b in range(y.shape[0]):
                    for k in range(y.shape[1] - 1):
                        total += w[b][y[b][k]][y[b][k + 1]]
                return total / y.shape[0]

            def tour_len_then_more(x, nodes):
                y = nodes.cpu().numpy()
                return y.mean(), (x * 2).sum()
            """,
        "train.py": """\
            import numpy as np
            import torch
            from torch import nn
            from utils import tour_len, tour_len_then_more

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = nn.Linear(4, 4).to(device)
            opt = torch.optim.Adam(model.parameters())
            for step in range(100):
                x = torch.randn(8, 4, 4, device=device)
                pred = model(x)
                loss = pred.pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                length = tour_len(x, pred.argmax(-1))
                mean = np.mean([length, 1.0])
                print(loss.item())
                other, more = tour_len_then_more(x, pred.argmax(-1))
                print(loss.item())
            """,
    })
    results = check_files(["utils.py", "train.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "train.py") == [(16, "TD603"), (19, "TD603"), (20, "TD603")]


def test_a_mask_helper_forwards_of_another_module_call_and_its_own_demo_calls(project: Path) -> None:
    """``utils.causal_mask(x)``, called by a model's forward in model.py, also called once by utils.py's own ``__main__``
    demo: the demo does not make it a helper of its module; its host-made mask is copied on every forward."""
    write(project, {
        "utils.py": """\
            import torch

            def causal_mask(x):
                n = x.size(1)
                return torch.triu(torch.ones(n, n), 1).to(x.device).bool()

            if __name__ == "__main__":
                print(causal_mask(torch.zeros(2, 5)))
            """,
        "model.py": """\
            import torch.nn as nn
            import utils

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.f = nn.Linear(4, 4)

                def forward(self, x):
                    m = utils.causal_mask(x)
                    return self.f(x).masked_fill(m[None, :, :, None].any(-2), 0.0)
            """,
        "train.py": """\
            import torch
            from model import Net

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            net = Net().to(device)
            opt = torch.optim.SGD(net.parameters(), lr=0.1)
            for _ in range(100):
                loss = net(torch.randn(8, 5, 4, device=device)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            """,
    })
    results = check_files(["utils.py", "model.py", "train.py"], Settings(root=str(project), select=("TD611",)))
    assert codes(results, "utils.py") == [(5, "TD611")]


def test_a_device_a_helper_of_another_module_returns_first_in_a_tuple(project: Path) -> None:
    """squad's shape: ``device, gpu_ids = util.get_available_devices()``, whose helper picks a CUDA device when there
    is one and returns it with the GPU ids: the script runs on a GPU (TD304 for its loader, TD603 for its
    per-step read). A helper that only ever returns the CPU device leaves the script on the CPU."""
    write(project, {
        "util.py": """\
            import torch

            def get_available_devices():
                ids = []
                if torch.cuda.is_available():
                    ids = list(range(torch.cuda.device_count()))
                    device = torch.device(f"cuda:{ids[0]}")
                else:
                    device = torch.device("cpu")
                return device, ids

            def get_cpu():
                return torch.device("cpu"), []
            """,
        "train.py": """\
            import torch
            import torch.nn.functional as F
            from torch.utils.data import DataLoader, TensorDataset
            import util

            device, gpu_ids = util.get_available_devices()
            model = torch.nn.Linear(4, 3).to(device)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randint(0, 3, (64,))), batch_size=8, num_workers=2)
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                loss = F.cross_entropy(model(x), y)
                print(loss.item())
                opt.zero_grad()
                loss.backward()
                opt.step()
            """,
        "cpu_train.py": """\
            import torch
            import torch.nn.functional as F
            from torch.utils.data import DataLoader, TensorDataset
            import util

            device, ids = util.get_cpu()
            model = torch.nn.Linear(4, 3).to(device)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randint(0, 3, (64,))), batch_size=8, num_workers=2)
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                loss = F.cross_entropy(model(x), y)
                print(loss.item())
                opt.zero_grad()
                loss.backward()
                opt.step()
            """,
    })
    results = check_files(["util.py", "train.py", "cpu_train.py"], Settings(root=str(project), select=("TD304", "TD603")))
    assert codes(results, "train.py") == [(9, "TD304"), (13, "TD603")]
    assert codes(results, "cpu_train.py") == []


def test_a_script_that_trains_through_a_method_of_a_project_object_run_on_every_batch(project: Path) -> None:
    """mt-dnn's shape: ``for x, y in train_loader: model.update(x, y)`` of ``model = MTModel(device)``, whose ``update``
    (another module) backpropagates: the script trains, so its test loader without workers is told (TD305). A
    script whose loop only calls a method that trains nothing stays quiet."""
    write(project, {
        "pkg/__init__.py": "",
        "pkg/model.py": """\
            import torch
            import torch.nn as nn

            class MTModel:
                def __init__(self, device):
                    self.net = nn.Linear(4, 3).to(device)
                    self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1)

                def update(self, x, y):
                    loss = nn.functional.cross_entropy(self.net(x), y)
                    self.opt.zero_grad()
                    loss.backward()
                    self.opt.step()

                @torch.no_grad()
                def predict(self, x):
                    return self.net(x).argmax(1)
            """,
        "train.py": """\
            import torch
            from torch.utils.data import DataLoader, TensorDataset
            from pkg.model import MTModel

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            ds = TensorDataset(torch.randn(64, 4), torch.randint(0, 3, (64,)))
            train_loader = DataLoader(ds, batch_size=8, pin_memory=True, num_workers=2)
            test_loader = DataLoader(ds, batch_size=8, pin_memory=True)
            model = MTModel(device)
            for x, y in train_loader:
                model.update(x.to(device), y.to(device))
            print([model.predict(x.to(device)) for x, _ in test_loader])
            """,
        "predict.py": """\
            import torch
            from torch.utils.data import DataLoader, TensorDataset
            from pkg.model import MTModel

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            ds = TensorDataset(torch.randn(64, 4), torch.randint(0, 3, (64,)))
            test_loader = DataLoader(ds, batch_size=8, pin_memory=True)
            model = MTModel(device)
            for x, _ in test_loader:
                print(model.predict(x.to(device)))
            """,
    })
    results = check_files(["pkg/__init__.py", "pkg/model.py", "train.py", "predict.py"],
                          Settings(root=str(project), select=("TD305",)))
    assert codes(results, "train.py") == [(8, "TD305")]
    assert codes(results, "predict.py") == []


def test_a_host_tensor_a_loss_method_makes_for_a_step_a_base_class_of_another_module_runs(project: Path) -> None:
    """SPIN's shape: ``BaseTrainer.train`` (another module) calls ``self.train_step(batch)`` every step; the subclass's
    ``train_step`` calls ``self.shape_loss(...)``, whose empty-batch branch makes ``torch.FloatTensor(1).fill_(0.)`` on
    the host and moves it. The fix names a constructor that takes the device (the legacy one makes CPU tensors only).
    A helper the subclass calls only from a method nothing runs per step is quiet."""
    write(project, {
        "utils/base_trainer.py": """\
            import torch

            class BaseTrainer:
                def __init__(self, loader):
                    self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                    self.loader = loader
                    self.init_fn()

                def train(self):
                    for epoch in range(10):
                        for batch in self.loader:
                            batch = {k: v.to(self.device) for k, v in batch.items()}
                            self.train_step(batch)
            """,
        "train/trainer.py": """\
            import torch
            from utils.base_trainer import BaseTrainer

            class Trainer(BaseTrainer):
                def init_fn(self):
                    self.model = torch.nn.Linear(4, 4).to(self.device)
                    self.opt = torch.optim.Adam(self.model.parameters())

                def shape_loss(self, pred, gt, has):
                    if has.sum() > 0:
                        return ((pred[has == 1] - gt[has == 1]) ** 2).mean()
                    return torch.FloatTensor(1).fill_(0.).to(self.device)

                def report_loss(self):
                    return torch.FloatTensor(1).fill_(0.).to(self.device)

                def train_step(self, batch):
                    loss = self.shape_loss(self.model(batch["x"]), batch["y"], batch["has"])
                    self.opt.zero_grad()
                    loss.backward()
                    self.opt.step()

                def summary(self):
                    return self.report_loss()
            """,
    })
    results = check_files(["utils/base_trainer.py", "train/trainer.py"], Settings(root=str(project), select=("TD611",)))
    assert codes(results, "trainer.py") == [(12, "TD611")]
    finding = next(f for r in results if r.path.endswith("trainer.py") for f in r.findings)
    assert "batch loop of `BaseTrainer` that calls `self.train_step()` (which calls `shape_loss`)" in finding.message
    assert "torch.empty(1, device=self.device)" in (finding.fix or "")


def test_an_evaluations_outputs_copied_to_the_host_by_a_helper_of_another_module_are_no_pitfall(project: Path) -> None:
    """``detections = nms(outputs)`` in an evaluation loop, whose helper copies each image's boxes to the host
    (``to_cpu(x[i])``): the results must reach the host, as an evaluation's collected outputs. A helper that reads a
    scalar (``.item()``) in that loop still syncs each step, and so does the copying helper in a training loop."""
    write(project, {
        "utils.py": """\
            import torch

            def to_cpu(t):
                return t.detach().cpu()

            def nms(prediction):
                out = [torch.zeros((0, 6))] * prediction.shape[0]
                for i, x in enumerate(prediction):
                    out[i] = to_cpu(x[x[:, 4] > 0.5])
                return out

            def log_loss(meter, loss):
                meter.append(loss.item())
            """,
        "evaluate.py": """\
            import torch
            from utils import nms, log_loss

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            @torch.no_grad()
            def evaluate(model, val_loader, meter):
                model.eval()
                found = []
                for imgs, targets in val_loader:
                    outputs = model(imgs.to(device))
                    found += nms(outputs)
                    log_loss(meter, outputs.mean())
                return found

            def train(model, loader, opt):
                for imgs, targets in loader:
                    outputs = model(imgs.to(device))
                    loss = outputs.mean()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    boxes = nms(outputs)
            """,
    })
    results = check_files(["utils.py", "evaluate.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "evaluate.py") == [(23, "TD603")]
    assert codes(results, "utils.py") == [(13, "TD603")]  # at the helper's read, naming the loop at evaluate.py:13


def test_a_helper_called_every_step_by_two_loops_names_both(project: Path) -> None:
    """``misc.all_reduce_mean(loss_value)`` in the pre-training and the fine-tuning engine: the helper's ``.item()``
    is one finding (one site), and its message names both loops that call it."""
    write(project, {
        "util/misc.py": """\
            import torch

            def all_reduce_mean(x):
                t = torch.tensor(x, device="cuda" if torch.cuda.is_available() else "cpu")
                return t.item()
            """,
        "engine_pretrain.py": """\
            import torch
            from util import misc

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            def train_one_epoch(model, loader, opt):
                for samples, _ in loader:
                    loss = model(samples.to(device))
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    print(misc.all_reduce_mean(loss))
            """,
        "engine_finetune.py": """\
            import torch
            from util import misc

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            def train_one_epoch(model, loader, opt):
                for samples, targets in loader:
                    loss = model(samples.to(device)).sum()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    print(misc.all_reduce_mean(loss))
            """,
    })
    results = check_files(["util/misc.py"], Settings(root=str(project), select=("TD603",)))
    found = [f for r in results for f in r.findings]
    assert [(f.location.line, f.code) for f in found] == [(5, "TD603")]
    assert "../engine_finetune.py:12" in found[0].message and "../engine_pretrain.py:12" in found[0].message


def test_inputs_left_to_a_data_parallel_wrapper_made_by_the_caller_are_not_unmoved(project: Path) -> None:
    """``train_epoch(loader, model, ...)`` moves only the targets: the caller wrapped the model in DataParallel
    (through a helper of its own), whose forward scatters the inputs to the GPUs. Without the wrapper the same
    loop feeds CPU inputs to a CUDA model."""
    training = """\
        import torch

        def train_epoch(loader, model, criterion, optimizer, device):
            model.train()
            for inputs, targets in loader:
                targets = targets.to(device, non_blocking=True)
                outputs = model(inputs)
                loss = criterion(outputs, targets)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        """
    write(project, {
        "training.py": training,
        "main.py": """\
            import torch
            from torch import nn
            from training import train_epoch

            def make_data_parallel(model, device):
                return nn.DataParallel(model).cuda() if device.type == "cuda" else model

            def main(model, loader, criterion, optimizer):
                device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                model = make_data_parallel(model, device)
                train_epoch(loader, model, criterion, optimizer, device)
            """,
    })
    settings = Settings(root=str(project), select=("TD302",))
    assert codes(check_files(["training.py", "main.py"], settings), "training.py") == []
    write(project, {"main.py": """\
            import torch
            from training import train_epoch

            def main(model, loader, criterion, optimizer):
                device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                train_epoch(loader, model.to(device), criterion, optimizer, device)
            """})
    found = [f for r in check_files(["training.py", "main.py"], settings) for f in r.findings]
    assert [(f.location.line, f.code) for f in found] == [(7, "TD302")]
    assert "(other batch elements were moved)" in found[0].message


def test_a_helper_module_function_that_nothing_calls_runs_on_no_rank(project: Path) -> None:
    """A data module of a DDP program (it shards with a DistributedSampler) that the training script imports:
    a utility in it that no module calls writes on no rank, nor one only a single-process module calls through a
    star import (tools.py). One the script calls on every rank, and the script's own functions (torchrun runs
    that file) stay reported."""
    write(project, {
        "data.py": """\
            import os

            from torch.utils.data import DataLoader
            from torch.utils.data.distributed import DistributedSampler


            def make_loader(dataset, rank):
                sampler = DistributedSampler(dataset) if rank != -1 else None
                return DataLoader(dataset, batch_size=4, sampler=sampler)


            def split_lists(folder, names):
                for n, name in enumerate(names):
                    with open(os.path.join(folder, "val.txt" if n % 10 == 0 else "train.txt"), "a") as f:
                        f.write(name + "\\n")


            def dump_stats(values, path):
                with open(path, "w") as f:
                    f.write(str(values))


            def export_lists(folder):
                with open(os.path.join(folder, "all.txt"), "w") as f:
                    f.write("")
            """,
        "tools.py": """\
            from data import *

            export_lists("lists")
            """,
        "train.py": """\
            import os

            import torch.distributed as dist
            from data import make_loader, dump_stats


            def write_notes(path):
                with open(path, "w") as f:
                    f.write("notes")


            def main(dataset, epochs):
                rank = int(os.environ.get("RANK", "-1"))
                if rank != -1:
                    dist.init_process_group("gloo")
                loader = make_loader(dataset, rank)
                for epoch in range(epochs):
                    for batch in loader:
                        pass
                    dump_stats([epoch], "stats.txt")


            if __name__ == "__main__":
                main(list(range(8)), 2)
            """,
    })
    expected = [(19, "TD703")]  # dump_stats (every rank of train.py); export_lists runs in tools.py's one process
    results = check_files(["data.py", "tools.py", "train.py"], Settings(root=str(project), select=("TD703",)))
    assert codes(results, "data.py") == expected
    assert codes(results, "train.py") == [(8, "TD703")]  # the script's own function, even uncalled
    assert codes([check_file("data.py", Settings(root=str(project), select=("TD703",)))], "data.py") == expected


def test_a_helper_called_only_after_an_assert_of_one_process(project: Path) -> None:
    """``assert opt.local_rank == -1`` before the loop that calls a helper of another module: one process
    runs it. A helper called after an assert that a distributed run passes too is written by every rank."""
    write(project, {
        "records.py": """\
            import numpy as np
            import torch


            def record_trial(values, path):
                np.savetxt(path, np.array(values))


            def record_device(values, path):
                with open(path, "a") as f:
                    f.write(str(values))
            """,
        "train.py": """\
            import argparse

            import torch
            import torch.distributed as dist
            from records import record_device, record_trial


            def fit(opt, model, loader):
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for epoch in range(opt.epochs):
                    for x, y in loader:
                        optimizer.zero_grad()
                        torch.nn.functional.mse_loss(model(x), y).backward()
                        optimizer.step()
                return [0.5]


            if __name__ == "__main__":
                parser = argparse.ArgumentParser()
                parser.add_argument("--local_rank", type=int, default=-1)
                parser.add_argument("--evolve", action="store_true")
                opt = parser.parse_args()
                if opt.local_rank != -1:
                    dist.init_process_group("gloo")
                if not opt.evolve:
                    assert opt.local_rank < max(torch.cuda.device_count(), 1)
                    for trial in range(3):
                        record_device(fit(opt, torch.nn.Linear(2, 1), []), "device.txt")
                else:
                    assert opt.local_rank == -1, "evolve runs in one process"
                    for generation in range(10):
                        record_trial(fit(opt, torch.nn.Linear(2, 1), []), "evolve.txt")
            """,
    })
    results = check_files(["records.py", "train.py"], Settings(root=str(project), select=("TD703",)))
    assert codes(results, "records.py") == [(10, "TD703")]  # record_device; record_trial runs in one process


SAVE_HELPER = """\
import torch


def save_on_master(*args, **kwargs):
    if torch.distributed.get_rank() == 0:
        torch.save(*args, **kwargs)
"""
SAVES_ARGS = """\
from utils import save_on_master


def save_model(args, epoch, model):
    to_save = {"model": model.state_dict(), "epoch": epoch, "args": args}
    save_on_master(to_save, "checkpoint.pth")
"""
FINETUNE = """\
import torch


def load_pretrained(args, model):
    checkpoint = torch.load(args.finetune, map_location="cpu")
    model.load_state_dict(checkpoint["model"])
"""


@pytest.mark.parametrize("helpers", [{"utils.py": SAVE_HELPER + "\n\n" + SAVES_ARGS.split("\n", 2)[2]},
                                     {"utils.py": SAVE_HELPER, "engine.py": SAVES_ARGS}])
def test_a_checkpoint_with_args_saved_through_a_helper_makes_weights_only_an_unsafe_fix(project: Path, helpers) -> None:
    """mae's shape: the dict holding the argparse Namespace is built apart from torch.save(*args, **kwargs), in the
    helper's module or another one; a finetune script loading such a file would fail with weights_only=True."""
    write(project, {**helpers, "finetune.py": FINETUNE})
    [load] = [f for f in check_file("finetune.py", Settings(root=str(project))).findings if f.code == "TD503"]
    assert load.unsafe_fixable and not load.fixable


def test_a_save_helper_whose_callers_save_only_state_keeps_weights_only_a_safe_fix(project: Path) -> None:
    plain = SAVES_ARGS.replace(', "args": args', ', "lr": args.lr')
    write(project, {"utils.py": SAVE_HELPER, "engine.py": plain, "finetune.py": FINETUNE})
    [load] = [f for f in check_file("finetune.py", Settings(root=str(project))).findings if f.code == "TD503"]
    assert load.fixable


NMT_TOOLS = """\
import torch


def save_model(s2s_model, optimizer, args):
    return {"model_dict": s2s_model.state_dict(), "optimizer_state_dict": optimizer.state_dict(), "args": args}


def load_model(model, model_path):
    model_ckpt = torch.load(model_path, map_location="cpu")
    model.load_state_dict(model_ckpt["model_dict"])
    return model
"""


@pytest.mark.parametrize("saved, unsafe", [("save_model(s2s, optimizer, args)", True), ("s2s.state_dict()", False)])
def test_a_checkpoint_a_helper_builds_with_the_options_makes_weights_only_an_unsafe_fix(project: Path, saved: str,
                                                                                        unsafe: bool) -> None:
    """NMT's shape: ``torch.save(save_model(s2s, optimizer, args), path)`` in the trainer, of a helper that returns
    ``{..., "args": args}``: the file holds an argparse Namespace, which ``weights_only=True`` refuses. A trainer that
    saves ``s2s.state_dict()`` keeps the fix safe (the helper's dict is never saved)."""
    write(project, {
        "utils/tools.py": NMT_TOOLS,
        "trainer/train.py": f"""\
            import torch
            from utils.tools import save_model

            def train(s2s, optimizer, args, loader):
                for i, (x, y) in enumerate(loader):
                    optimizer.zero_grad()
                    s2s(x, y).backward()
                    optimizer.step()
                torch.save({saved}, args.checkpoint)
            """,
    })
    [load] = [f for f in check_file("utils/tools.py", Settings(root=str(project))).findings if f.code == "TD503"]
    assert (load.unsafe_fixable and not load.fixable) if unsafe else load.fixable


def test_a_checkpoint_dict_built_before_its_save_with_the_options_makes_weights_only_an_unsafe_fix(project: Path) -> None:
    """attention-is-all-you-need's shape: train.py builds {'settings': opt, ...} on its own line, then saves it;
    translate.py loads the file and reads checkpoint['settings']."""
    write(project, {
        "train.py": """\
            import torch

            def save(model, opt, epoch_i, model_name):
                checkpoint = {'epoch': epoch_i, 'settings': opt, 'model': model.state_dict()}
                torch.save(checkpoint, model_name)
            """,
        "translate.py": """\
            import torch

            def load(opt, device, model):
                checkpoint = torch.load(opt.model, map_location=device)
                model.load_state_dict(checkpoint['model'])
                return checkpoint['settings']
            """,
    })
    [load] = [f for f in check_file("translate.py", Settings(root=str(project))).findings if f.code == "TD503"]
    assert load.unsafe_fixable and not load.fixable


PRETRAIN_DDP = """\
import torch
import torch.nn as nn


def main(gpu, loader):
    model = nn.Linear(4, 2).cuda(gpu)
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[gpu])
    if gpu == 0:
        torch.save({"state_dict": model.state_dict()}, "checkpoint.pth.tar")
"""

LINCLS_READER = """\
import torch


def load_pretrained(model, path):
    state_dict = torch.load(path, map_location="cpu")["state_dict"]
    for k in list(state_dict.keys()):
        if k.startswith("module.encoder") and not k.startswith("module.encoder.fc"):
            state_dict[k[len("module.encoder."):]] = state_dict[k]
        del state_dict[k]
    model.load_state_dict(state_dict, strict=False)
"""


RENAMING_READER = """\
import torch
import torch.nn as nn

backbone = nn.Linear(4, 2)
weights = torch.load("checkpoint.pth.tar", map_location="cpu", weights_only=True)["state_dict"]
weights = {key.replace("module.encoder.", ""): value for key, value in weights.items()}
backbone.load_state_dict(weights, strict=False)
"""

STRIPPING_READER = RENAMING_READER.replace('"module.encoder."', '"module."')


@pytest.mark.parametrize("reader", [LINCLS_READER, RENAMING_READER], ids=["startswith", "replace"])
@pytest.mark.parametrize("together", [True, False])
def test_a_wrapped_state_dict_whose_sibling_reader_picks_keys_by_the_ddp_prefix_is_the_programs_format(
        project: Path, together: bool, reader: str) -> None:
    """moco/simsiam's shape: main_simsiam.py saves the DDP model's state_dict and main_lincls.py, beside it, selects
    the keys starting with 'module.encoder': stripping the prefix at the save would break the program's own reader.
    vicreg's evaluate.py renames them instead (key.replace("module.backbone.", "")), then loads with strict=False:
    the same reliance on the prefix."""
    write(project, {"main_pretrain.py": PRETRAIN_DDP, "main_lincls.py": reader})
    settings = Settings(root=str(project), select=("TD205",))
    results = check_files(["main_pretrain.py", "main_lincls.py"], settings) if together \
        else [check_file("main_pretrain.py", settings)]
    assert codes(results, "main_pretrain.py") == []


@pytest.mark.parametrize(("reader", "text"), [(None, ""), ("other/main_lincls.py", LINCLS_READER),
                                               ("main_lincls.py", STRIPPING_READER)], ids=["none", "elsewhere", "strips"])
def test_a_wrapped_state_dict_with_no_reader_of_the_prefix_beside_it_is_still_td205(project: Path, reader, text) -> None:
    """No reader, one in another folder, or one beside it that strips the prefix off an entry every checkpoint has
    (``ckpt["state_dict"]``): it may read another checkpoint (DINO's linear evaluation saves its classifier under
    "state_dict", and its reader strips the pretrained backbone's)."""
    write(project, {"main_pretrain.py": PRETRAIN_DDP, **({reader: text} if reader else {})})
    settings = Settings(root=str(project), select=("TD205",))
    assert codes([check_file("main_pretrain.py", settings)], "main_pretrain.py") == [(9, "TD205")]
    if reader:
        assert codes(check_files(["main_pretrain.py", reader], settings), "main_pretrain.py") == [(9, "TD205")]


GAN_TRAIN = """\
import torch
import torch.nn as nn

net_g = nn.Linear(4, 2).cuda()
if torch.cuda.device_count() > 1:
    net_g = nn.DataParallel(net_g)
for epoch in range(10):
    checkpoint = {"g_model_state_dict": net_g.state_dict(), "epoch": epoch}
    torch.save(checkpoint, f"checkpoint_{epoch}_epoch.pkl")
"""

GAN_INFERENCE = """\
import torch
import torch.nn as nn


def remove_module(state_dict):
    out = {}
    for k, v in state_dict.items():
        out[k[7:] if k.startswith("module.") else k] = v
    return out


net_g = nn.Linear(4, 2)
checkpoint = torch.load("checkpoint_9_epoch.pkl", map_location="cpu", weights_only=True)
net_g.load_state_dict(remove_module(checkpoint[ENTRY]))
"""


@pytest.mark.parametrize("slicing", ['k[7:] if k.startswith("module.") else k', 'k.replace("module.", "")'],
                         ids=["slice", "replace"])
@pytest.mark.parametrize(("entry", "expected"), [('"g_model_state_dict"', []), ('"d_model_state_dict"', [(8, "TD205")])],
                         ids=["same-entry", "other-entry"])
def test_a_wrapped_state_dict_a_sibling_reads_back_with_the_prefix_sliced_off_is_quiet(
        project: Path, entry: str, expected: list, slicing: str) -> None:
    """PyTorch_Practice's GAN lesson: the training script saves ``{"g_model_state_dict": net_g.state_dict()}`` from a
    DataParallel, and the inference script beside it reads that entry through a helper that slices ``module.`` off
    (``k[7:] if k.startswith("module.") else k``): the program reads its own checkpoints back, as when the saving file
    itself slices. A sibling slicing another entry says nothing about this one."""
    reader = GAN_INFERENCE.replace("ENTRY", entry).replace('k[7:] if k.startswith("module.") else k', slicing)
    write(project, {"train.py": GAN_TRAIN, "infer.py": reader})
    settings = Settings(root=str(project), select=("TD205",))
    assert codes([check_file("train.py", settings)], "train.py") == expected
    assert codes(check_files(["train.py", "infer.py"], settings), "train.py") == expected


SIMCLR_TRAINER = """\
import torch
import torch.nn.functional as F


class SimCLR:
    def __init__(self, *args, **kwargs):
        self.args = kwargs["args"]
        self.model = kwargs["model"].to(self.args.device)
        self.optimizer = kwargs["optimizer"]

    def info_nce_loss(self, features):
        sim = F.normalize(features, dim=1) @ F.normalize(features, dim=1).T
        mask = torch.eye(sim.shape[0], dtype=torch.bool).to(self.args.device)
        return sim[~mask].view(sim.shape[0], -1)

    def train(self, loader):
        for images, _ in loader:
            logits = self.info_nce_loss(self.model(images.to(self.args.device)))
            loss = logits.logsumexp(1).mean()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
"""


@pytest.mark.parametrize("device", ["torch.device('cuda')", "torch.device('cpu')"])
def test_an_options_object_given_a_cuda_device_by_the_script_that_builds_the_trainer(project: Path, device: str) -> None:
    """SimCLR's shape: run.py sets ``args.device = torch.device('cuda')`` and hands ``args=args`` to a trainer
    class that keeps ``self.args = kwargs['args']`` and moves to ``self.args.device``: it runs on the GPU."""
    write(project, {"simclr.py": SIMCLR_TRAINER, "run.py": f"""\
        import torch
        from simclr import SimCLR

        def main(args, model, optimizer, loader):
            if not args.disable_cuda:
                args.device = {device}
            SimCLR(model=model, optimizer=optimizer, args=args).train(loader)
        """})
    found = codes([check_file("simclr.py", Settings(root=str(project), select=("TD611",)))], "simclr.py")
    assert found == ([(13, "TD611")] if "cuda" in device else [])


FACE_STAGES = """\
import torch.nn.functional as F


def detect_faces(images, stage_net):
    found = []
    for factor in (1.0, 0.7, 0.5):
        found.append(stage_net(F.interpolate(images, scale_factor=factor)))
    return found


def detect_edges(images, edge_net):
    return edge_net(images)
"""

FACE_FINDER = """\
import torch
from torch import nn
from stages import detect_faces, detect_edges


class FaceFinder(nn.Module):
    def __init__(self):
        super().__init__()
        self.stage = nn.Conv2d(3, 2, 3)
        self.edge = nn.Conv2d(3, 1, 3)

    def find(self, images):
        with torch.no_grad():
            return detect_faces(images, self.stage)

    def edges(self, images):
        return detect_edges(images, self.edge)
"""


@pytest.mark.parametrize("together", [True, False])
def test_an_inference_helper_that_every_caller_in_another_module_runs_under_no_grad(project: Path, together: bool) -> None:
    """facenet-pytorch's shape: detect_face() in a utils module is called only by MTCNN.detect, under no_grad, in
    another module: autograd is off where its forwards run. The helper beside it, called with autograd on, is TD401."""
    write(project, {"stages.py": FACE_STAGES, "finder.py": FACE_FINDER})
    settings = Settings(root=str(project), select=("TD401",))
    results = check_files(["stages.py", "finder.py"], settings) if together else [check_file("stages.py", settings)]
    assert codes(results, "stages.py") == [(12, "TD401")]


@pytest.mark.parametrize("trained, expected", [(True, []), (False, [(7, "TD401")])])
def test_an_evaluate_helper_another_module_trains_through_is_a_training_forward(
        project: Path, trained: bool, expected: list) -> None:
    """Raindrop's baselines: ``evaluate_standard(model, P, ...)`` in ``utils_phy12.py`` is called by each baseline
    script's training loop, whose loss of its output is backpropagated, and by its validation, under no_grad: the
    helper is that training's forward too (TD401 quiet). Called only to evaluate, with autograd on, it is TD401."""
    loss = "loss = criterion(outputs, y.cuda()); loss.backward(); opt.step()" if trained else "print(outputs.shape)"
    write(project, {
        "utils_phy12.py": """\
            import torch


            def evaluate_standard(model, P_tensor, P_time_tensor):
                P_tensor = P_tensor.cuda()
                lengths = torch.sum(P_time_tensor > 0, dim=0)
                out = model.forward(P_tensor, lengths)
                return out
            """,
        "baseline.py": f"""\
            import torch
            from utils_phy12 import evaluate_standard

            model = torch.nn.Linear(4, 2).cuda()
            criterion = torch.nn.CrossEntropyLoss()
            opt = torch.optim.Adam(model.parameters())
            for epoch in range(3):
                for P, Ptime, y in [(torch.randn(8, 4), torch.ones(8), torch.zeros(8, dtype=torch.long))]:
                    outputs = evaluate_standard(model, P, Ptime)
                    {loss}
                with torch.no_grad():
                    out_val = evaluate_standard(model, P, Ptime)
            """,
    })
    results = check_files(["utils_phy12.py", "baseline.py"], Settings(root=str(project), select=("TD401",)))
    assert codes(results, "utils_phy12.py") == expected


IMAGE_HELPERS = """\
import torch


def tensor_to_image(tensor, range_norm=False, half=False):
    if range_norm:
        tensor = tensor.add(1.0).div(2.0)
    if half:
        tensor = tensor.half()
    return tensor.squeeze(0).permute(1, 2, 0).mul(255).clamp(0, 255).cpu().numpy().astype("uint8")


def noise_image(size):
    noise = torch.randn(size, device="cuda")
    noise = noise.mul(255)
    return noise.cpu().numpy()
"""

IMAGE_WRITER = """\
import cv2
import torch
from helpers import noise_image, tensor_to_image


def run(net, loader, device=torch.device("cuda" if torch.cuda.is_available() else "cpu")):
    net.eval()
    with torch.no_grad():
        for k, (low, high) in enumerate(loader):
            pred = net(low.to(device))
            cv2.imwrite(f"{k}.png", tensor_to_image(pred, range_norm=True))
            cv2.imwrite(f"{k}-noise.png", noise_image((8, 8)))
"""


@pytest.mark.parametrize("together", [True, False])
def test_a_helper_that_copies_its_rebound_input_to_the_host_is_the_callers_business(project: Path, together: bool) -> None:
    """SRGAN-PyTorch's imgproc.tensor_to_image: the tensor it is given, rescaled in place (tensor = tensor.add(1.0)),
    copied to the host to be written: whether that copy is wasted is the caller's question (an evaluation loop that
    writes images needs it). A helper that copies a tensor it made on the GPU itself is still reported."""
    write(project, {"helpers.py": IMAGE_HELPERS, "writer.py": IMAGE_WRITER})
    settings = Settings(root=str(project), select=("TD603",))
    results = check_files(["helpers.py", "writer.py"], settings) if together else [check_file("helpers.py", settings)]
    assert codes(results, "helpers.py") == [(15, "TD603")]


PROJECT_LOADER = """\
import torch
import torch.utils.data as tud


class DataLoader:
    def __init__(self, opt):
        data = tud.TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,)))
        self.loader = tud.DataLoader(data, batch_size=opt["batch_size"], pin_memory=True, num_workers=4)
        self.batches = iter(self.loader)

    def get_batch(self):
        return next(self.batches)
"""

CAPTION_TRAIN = """\
import torch
import torch.nn as nn
from captioning.dataloader import *
from captioning.evaluation import language_eval

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
net = nn.Linear(8, 3).to(device)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
loader = DataLoader({"batch_size": 16})
plain = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 8)), batch_size=4)
for step in range(100):
    x, y = loader.get_batch()
    x, y = x.to(device), y.to(device)
    opt.zero_grad()
    nn.functional.cross_entropy(net(x), y).backward()
    opt.step()
    if step % 50 == 0:
        print(language_eval(net, loader))
for (x,) in plain:
    net(x.to(device)).sum().backward()
"""


@pytest.mark.parametrize("together", [True, False])
def test_a_projects_own_class_named_dataloader_from_a_star_import_is_not_torchs(project: Path, together: bool) -> None:
    """ImageCaptioning.pytorch's shape: ``from captioning.data.dataloader import *`` brings the project's own
    DataLoader (which builds pinned torch loaders with workers itself): no TD304 on it; torch's is still judged."""
    write(project, {"captioning/__init__.py": "", "captioning/dataloader.py": PROJECT_LOADER, "train.py": CAPTION_TRAIN,
                    "captioning/evaluation.py": "def language_eval(model, loader):\n    return model(loader.get_batch()[0])\n"})
    settings = Settings(root=str(project), select=("TD304",))
    results = check_files(["train.py", "captioning/dataloader.py"], settings) if together \
        else [check_file("train.py", settings)]
    assert codes(results, "train.py") == [(10, "TD304")]


def test_a_program_on_the_projects_own_cuda_extension_needs_a_gpu_anyway(project: Path) -> None:
    write(project, {
        "setup.py": """\
            from setuptools import setup
            from torch.utils.cpp_extension import BuildExtension, CUDAExtension

            setup(name="ranker", ext_modules=[CUDAExtension(name="ranker.knn_cuda", sources=["knn.cpp", "knn.cu"])],
                  cmdclass={"build_ext": BuildExtension})
            """,
        "tools/rerank.py": """\
            import torch
            from ranker import knn_cuda

            def main(q, g):
                q, g = torch.as_tensor(q).to("cuda"), torch.as_tensor(g).to("cuda")
                return knn_cuda.forward((q @ g.t()).topk(20).indices.float())
            """,
        "tools/plain.py": """\
            import torch

            def main(q, g):
                return torch.as_tensor(q).to("cuda") @ torch.as_tensor(g).to("cuda").t()
            """,
    })
    results = check_files(["tools/rerank.py", "tools/plain.py"], Settings(root=str(project), select=("TD101",)))
    assert codes(results, "rerank.py") == []  # its kernels run on CUDA only: no CPU fallback to write
    assert codes(results, "plain.py") == [(4, "TD101"), (4, "TD101")]


@pytest.mark.parametrize("together", [True, False])
def test_a_model_on_a_kernel_compiled_when_its_module_is_imported_needs_a_gpu_anyway(project: Path, together: bool) -> None:
    write(project, {
        "video/__init__.py": "",
        "video/ops/__init__.py": "",
        "video/ops/shift.py": """\
            import os
            from torch.utils.cpp_extension import load

            here = os.path.dirname(__file__)
            shift_ext = load("shift_ext", sources=[os.path.join(here, "shift.cpp"), os.path.join(here, "shift_kernel.cu")])

            def shift(x, offsets):
                return shift_ext.forward(x, offsets)
            """,
        "video/ops/maybe.py": """\
            from torch.utils.cpp_extension import load

            try:
                fused = load("fused", sources=["fused.cpp", "fused_kernel.cu"])
            except Exception:
                fused = None
            """,
        "video/net.py": """\
            import torch
            import torch.nn as nn
            from .ops.shift import shift

            class Shifter(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.offsets = nn.Conv2d(4, 2, 3, padding=1)

                def forward(self, frames, keep_on_host):
                    out = torch.zeros_like(frames[0]).cuda() if keep_on_host else torch.zeros_like(frames[0])
                    for f in frames:
                        out = out + shift(f, self.offsets(f))
                    return out
            """,
        "video/optional.py": """\
            import torch
            from .ops.maybe import fused

            def run(frames):
                return [f.cuda() for f in frames]
            """,
        "video/sparse.py": """\
            def attend(q, k):
                from xformers.ops import memory_efficient_attention
                return memory_efficient_attention(q, k, k)
            """,
        "demo.py": """\
            import torch
            from video.net import Shifter

            device = "cuda"
            print(Shifter().to(device)([torch.rand(1, 4, 8, 8, device=device)], False).shape)
            """,
        "bench.py": """\
            import torch
            from video.sparse import attend

            device = "cuda"
            print(attend(torch.rand(1, 4, 8, device=device), torch.rand(1, 4, 8, device=device)).shape)
            """,
    })
    settings = Settings(root=str(project), select=("TD101",))
    files = ["video/net.py", "video/optional.py", "demo.py", "bench.py"]
    results = check_files(files, settings) if together else [check_file(f, settings) for f in files]
    assert codes(results, "net.py") == []  # the kernel runs on CUDA only: no CPU fallback to write
    assert codes(results, "demo.py") == []  # nor in a program on that model (two imports away from the kernel)
    assert codes(results, "optional.py") == [(5, "TD101")]  # the kernel is optional there: the program runs without it
    assert codes(results, "bench.py") == [(4, "TD101")]  # the GPU-only library is imported only if ``attend`` runs


def test_cuda_of_a_project_class_that_is_no_module_is_its_own_method(project: Path) -> None:
    write(project, {
        "kit/__init__.py": "",
        "kit/bundle.py": """\
            import torch.nn as nn

            class Bundle:
                def __init__(self):
                    self.net = nn.Linear(4, 2)

                def cuda(self):
                    self.net = self.net.to("cuda")
                    return self

            class Head(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(4, 2)
            """,
        "serve.py": """\
            import torch
            from kit.bundle import Bundle, Head

            use_gpu = torch.cuda.is_available()
            bundle, head = Bundle(), Head()
            if use_gpu:
                bundle.cuda()
                head.cuda()
            """,
    })
    results = check_files(["serve.py", "kit/bundle.py"], Settings(root=str(project), select=("TD102",)))
    assert codes(results, "serve.py") == [(8, "TD102")]  # the module's .cuda(), not the plain class's own method


def test_a_model_whose_parts_of_other_modules_move_themselves_is_not_td201(project: Path) -> None:
    write(project, {
        "nets/encoder.py": """\
            import torch.nn as nn

            class Encoder(nn.Module):
                def __init__(self, cfg):
                    super().__init__()
                    self.gpu = cfg.gpu
                    self.rnn = nn.LSTM(8, 8)
                    self.out = nn.Linear(8, 4)
                    if self.gpu:
                        self.rnn = self.rnn.cuda()
                        self.out = self.out.cuda()
            """,
        "nets/crf.py": """\
            import torch
            import torch.nn as nn

            class CRF(nn.Module):
                def __init__(self, n, gpu):
                    super().__init__()
                    init = torch.zeros(n, n)
                    if gpu:
                        init = init.cuda()
                    self.trans = nn.Parameter(init)

            class Plain(nn.Module):
                def __init__(self, n):
                    super().__init__()
                    self.trans = nn.Parameter(torch.zeros(n, n))
            """,
        "nets/tagger.py": """\
            import torch.nn as nn
            from .encoder import Encoder
            from .crf import CRF, Plain

            class Tagger(nn.Module):
                def __init__(self, cfg):
                    super().__init__()
                    self.use_crf = cfg.use_crf
                    self.enc = Encoder(cfg)
                    if self.use_crf:
                        self.crf = CRF(4, cfg.gpu)

            class Mixed(nn.Module):
                def __init__(self, cfg):
                    super().__init__()
                    self.enc = Encoder(cfg)
                    self.crf = Plain(4)
            """,
        "train.py": """\
            import torch
            from nets.tagger import Tagger, Mixed
            from nets.encoder import Encoder

            def train(cfg, batches):
                tagger = Tagger(cfg)
                encoder = Encoder(cfg)
                mixed = Mixed(cfg)
                opt = torch.optim.SGD(tagger.parameters(), lr=0.1)
                for x, y in batches:
                    x, y = x.cuda(), y.cuda()
                    loss = (tagger(x) - y).pow(2).mean() + encoder(x).sum() + mixed(x).sum()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            """,
    })
    results = check_files(["train.py"], Settings(root=str(project), select=("TD201",)))
    # the one with a part that keeps an unmoved parameter; not the one whose parts all move themselves
    assert codes(results, "train.py") == [(8, "TD201")]


def test_a_loss_of_another_module_keeping_a_list_of_numbers_has_nothing_to_move(project: Path) -> None:
    write(project, {
        "layers/__init__.py": "from .box_loss import *\n",
        "layers/box_loss.py": """\
            import torch.nn as nn

            class BoxLoss(nn.Module):
                def __init__(self, n_classes, overlap):
                    super().__init__()
                    self.n_classes, self.overlap = n_classes, overlap
                    self.variance = [0.1, 0.2]

                def forward(self, pred, target):
                    return (pred - target).abs().mean() * self.variance[0]

            class AnchoredLoss(nn.Module):
                def __init__(self, anchors):
                    super().__init__()
                    self.anchors = [anchors, anchors * 2]

                def forward(self, pred, target):
                    return (pred - target - self.anchors[0]).abs().mean()
            """,
        "train.py": """\
            import torch
            from layers import BoxLoss, AnchoredLoss

            def train(model, loader, optimizer, anchors):
                criterion = BoxLoss(2, 0.35)
                anchored = AnchoredLoss(anchors)
                for x, y in loader:
                    x, y = x.cuda(), y.cuda()
                    loss = criterion(model(x), y) + anchored(model(x), y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
            """,
    })
    results = check_files(["train.py"], Settings(root=str(project), select=("TD201",)))
    assert codes(results, "train.py") == [(6, "TD201")]  # a list of tensors may be state; a list of numbers is not


def test_an_evaluation_loop_whose_callers_in_other_modules_hold_no_grad(project: Path) -> None:
    write(project, {
        "utils/__init__.py": "",
        "utils/validation.py": """\
            import torch

            def validate(generator, loader, device):
                generator.eval()
                total = 0.0
                for mel, audio in loader:
                    fake = generator(mel.to(device))
                    total += (fake - audio.to(device)).abs().mean()
                generator.train()
                return total

            def validate_loosely(generator, loader, device):
                generator.eval()
                for mel, audio in loader:
                    fake = generator(mel.to(device))
                generator.train()
            """,
        "trainer.py": """\
            import torch
            from utils.validation import validate, validate_loosely

            def train(generator, loader, valloader, optimizer, device):
                for mel, audio in loader:
                    loss = (generator(mel.to(device)) - audio.to(device)).abs().mean()
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                with torch.no_grad():
                    validate(generator, valloader, device)
                validate_loosely(generator, valloader, device)
            """,
    })
    results = check_files(["utils/validation.py", "trainer.py"], Settings(root=str(project), select=("TD401",)))
    assert codes(results, "validation.py") == [(15, "TD401")]


def test_a_feature_module_of_another_module_that_keeps_buffers_only_records_no_graph(project: Path) -> None:
    write(project, {
        "modules.py": """\
            import torch
            import torch.nn as nn

            class Audio2Mel(nn.Module):
                def __init__(self, n_fft=1024):
                    super().__init__()
                    self.register_buffer("window", torch.hann_window(n_fft).float())
                    self.n_fft = n_fft

                def forward(self, audio):
                    return torch.stft(audio, self.n_fft, window=self.window, return_complex=True).abs()

            class Generator(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.register_buffer("window", torch.hann_window(16))
                    self.up = nn.ConvTranspose1d(80, 1, 16)

                def forward(self, mel):
                    return self.up(mel)
            """,
        "train.py": """\
            import torch
            from modules import Audio2Mel, Generator

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            fft = Audio2Mel().to(device)
            netG = Generator().to(device)

            def dump(test_loader):
                netG.eval()
                for x_t in test_loader:
                    s_t = fft(x_t.to(device))
                    out = netG(s_t)
            """,
    })
    results = check_files(["modules.py", "train.py"], Settings(root=str(project), select=("TD401",)))
    assert codes(results, "train.py") == [(12, "TD401")]  # the generator's forward; the buffer-only front end is quiet


def test_modules_of_another_module_with_nothing_to_move_need_no_move(project: Path) -> None:
    write(project, {
        "losses.py": """\
            import torch
            from torch import nn

            class SoftTargetCE(nn.Module):
                def __init__(self, classes, smooth):
                    super().__init__()
                    self.classes, self.smooth = classes, smooth
                    self.logp = nn.LogSoftmax(dim=1)

                def forward(self, logits, target):
                    soft = torch.zeros_like(logits).scatter_(1, target.unsqueeze(1), 1)
                    return (-soft * self.logp(logits)).sum(1).mean()

            class MixedCE(nn.Module):
                def __init__(self, classes, smooth):
                    super().__init__()
                    self.inner = SoftTargetCE(classes, smooth)

                def forward(self, logits, a, b, lam):
                    return lam * self.inner(logits, a) + (1 - lam) * self.inner(logits, b)

            class Gain(nn.Module):
                def __init__(self, low=0.5, high=1.5):
                    super().__init__()
                    self.low, self.high = low, high

                def forward(self, x):
                    return x * torch.empty(x.shape[0], 1, device=x.device).uniform_(self.low, self.high)

            class Learned(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.scale = nn.Linear(1, 1)

                def forward(self, x):
                    return self.scale(x)
            """,
        "train.py": """\
            import torch
            from torch import nn
            from losses import Gain, Learned, MixedCE

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            net = nn.Linear(8, 4).to(device)
            opt = torch.optim.SGD(net.parameters(), lr=0.1)
            crit = MixedCE(4, 0.1)

            def fit(loader, use_gain, learned):
                augment = []
                if use_gain:
                    augment.append(Gain())
                aug = nn.Sequential(*augment)
                parts = []
                if learned:
                    parts.append(Learned())
                trained = nn.Sequential(*parts)
                for x, y in loader:
                    x, y = x.to(device), y.to(device)
                    loss = crit(net(aug(x)), y, y.flip(0), 0.7) + trained(x).mean()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            """,
    })
    results = check_files(["losses.py", "train.py"], Settings(root=str(project), select=("TD201",)))
    assert codes(results, "train.py") == [(18, "TD201")]  # only the Sequential of a module with a layer


def test_a_loader_factory_that_returns_the_dataset_with_the_loader(project: Path) -> None:
    write(project, {
        "data_factory.py": """\
            import torch
            from torch.utils.data import DataLoader, TensorDataset

            def data_provider(args, flag):
                data_set = TensorDataset(torch.randn(256, 12), torch.randn(256, 1))
                data_loader = DataLoader(data_set, batch_size=args.batch_size, shuffle=flag == "train",
                                         num_workers=args.num_workers, drop_last=True)
                return data_set, data_loader

            def sizes(args):
                data_set = TensorDataset(torch.randn(256, 12))
                counted = DataLoader(data_set, batch_size=args.batch_size)
                return len(data_set), len(counted)
            """,
        "exp_main.py": """\
            import torch
            from data_factory import data_provider

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            def train(args, model, optimizer):
                _, train_loader = data_provider(args, "train")
                for x, y in train_loader:
                    loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
            """,
    })
    results = check_files(["data_factory.py", "exp_main.py"], Settings(root=str(project), select=("TD304",)))
    assert codes(results, "data_factory.py") == [(6, "TD304")]  # not the loader only counted


def test_a_helper_that_hands_its_callers_host_arrays_is_no_sync_to_report(project: Path) -> None:
    write(project, {
        "utils.py": """\
            import torch

            def remove_pad(inputs, lengths):
                results = []
                for item, length in zip(inputs, lengths):
                    results.append(item[:length].view(-1).cpu().numpy())
                return results

            def scalar(loss):
                return loss.item()
            """,
        "evaluate.py": """\
            import torch
            from utils import remove_pad, scalar

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            def evaluate(model, loader):
                model.eval()
                with torch.no_grad():
                    for mixture, lengths in loader:
                        estimate = model(mixture.to(device))
                        kept = remove_pad(estimate, lengths)
                        print(scalar(estimate.mean()), len(kept))
            """,
    })
    results = check_files(["utils.py", "evaluate.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "utils.py") == [(10, "TD603")]  # the .item(); not the copies handed back as arrays


def test_a_reduced_loss_from_a_helper_module_is_a_tensor_where_the_loss_is(project: Path) -> None:
    write(project, {
        "util.py": """\
            import torch.distributed as dist

            def reduce_mean(tensor, nprocs):
                rt = tensor.clone()
                dist.all_reduce(rt, op=dist.ReduceOp.SUM)
                rt /= nprocs
                return rt

            def world_name(nprocs):
                return "world-%d" % nprocs
            """,
        "train.py": """\
            import torch
            from util import reduce_mean, world_name

            def train(model, loader, optimizer, criterion, local_rank, nprocs):
                for step, (images, labels) in enumerate(loader):
                    images, labels = images.cuda(local_rank), labels.cuda(local_rank)
                    loss = criterion(model(images), labels)
                    reduced_loss = reduce_mean(loss, nprocs)
                    name = world_name(nprocs)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    if local_rank == 0:
                        print("{} loss {:0.4f}".format(name, reduced_loss))
            """,
    })
    results = check_files(["util.py", "train.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "train.py") == [(14, "TD603")]


def test_a_trainer_handed_a_model_its_caller_moved_to_the_gpu_runs_there(project: Path) -> None:
    write(project, {
        "solver.py": """\
            import torch.nn.functional as F

            class Solver:
                def __init__(self, model, optimizer, args):
                    self.model = model
                    self.optimizer = optimizer
                    self.device = args.device

                def epoch(self, loader):
                    total = 0.0
                    for noisy, clean in loader:
                        noisy, clean = noisy.to(self.device), clean.to(self.device)
                        loss = F.l1_loss(self.model(noisy), clean)
                        self.optimizer.zero_grad()
                        loss.backward()
                        self.optimizer.step()
                        total += loss.item()
                    return total
            """,
        "train.py": """\
            import torch

            def run(args, model, loader):
                from solver import Solver
                if torch.cuda.is_available():
                    model.cuda()
                optimizer = torch.optim.Adam(model.parameters())
                Solver(model, optimizer, args).epoch(loader)
            """,
        "cpu_train.py": """\
            import torch
            from solver import Solver

            def run(args, model, loader):
                Solver(model, torch.optim.Adam(model.parameters()), args).epoch(loader)
            """,
    })
    results = check_files(["solver.py", "train.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "solver.py") == [(17, "TD603")]
    (project / "train.py").unlink()  # only a caller that moves nothing: no GPU in sight
    results = check_files(["solver.py", "cpu_train.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "solver.py") == []


def test_each_rank_bound_to_its_gpu_by_a_helper_of_another_module(project: Path) -> None:
    write(project, {
        "dist_helpers.py": """\
            import torch
            import torch.distributed as dist

            def start_group(rank, world):
                torch.cuda.set_device(rank % torch.cuda.device_count())
                dist.init_process_group("nccl", rank=rank, world_size=world)
            """,
        "train.py": """\
            import torch
            import torch.nn as nn
            from torch.nn.parallel import DistributedDataParallel as DDP
            from dist_helpers import start_group

            def run(rank, world, batches):
                if world > 1:
                    start_group(rank, world)
                model = nn.Linear(8, 1).cuda()
                for x in batches:
                    model(x.cuda()).mean().backward()

            if __name__ == "__main__":
                import os
                run(int(os.getenv("RANK", "0")), int(os.getenv("WORLD_SIZE", "1")), [torch.randn(4, 8)])
            """,
        "bare.py": """\
            import torch
            import torch.nn as nn
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP

            dist.init_process_group("nccl")
            model = DDP(nn.Linear(8, 1).cuda())
            """,
    })
    results = check_files(["dist_helpers.py", "train.py", "bare.py"], Settings(root=str(project), select=("TD705",)))
    assert codes(results, "train.py") == []
    assert codes(results, "bare.py") == [(7, "TD705")]


def test_a_feature_extractor_of_another_module_that_freezes_itself_records_no_graph(project: Path) -> None:
    """An FID script's Inception network (``inception.py``) freezes every parameter in its ``__init__`` unless
    built with ``requires_grad=True``: its evaluation forward needs no ``no_grad`` then. A classifier that does
    not freeze itself is reported."""
    write(project, {
        "inception.py": """\
            import torch.nn as nn

            class InceptionV3(nn.Module):
                def __init__(self, output_blocks=(3,), resize_input=True, requires_grad=False):
                    super().__init__()
                    self.blocks = nn.Sequential(nn.Conv2d(3, 8, 3), nn.AdaptiveAvgPool2d(1))
                    for param in self.parameters():
                        param.requires_grad = requires_grad

                def forward(self, x):
                    return [self.blocks(x)]

            class Classifier(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(8, 2)

                def forward(self, x):
                    return self.fc(x)
            """,
        "fid.py": """\
            import torch
            from inception import Classifier, InceptionV3

            def activations(model, images):
                model.eval()
                feats = []
                for start in range(0, len(images), 50):
                    feats.append(model(images[start:start + 50])[0].cpu())
                return feats

            test_images = torch.rand(100, 3, 32, 32)
            frozen = activations(InceptionV3([3]), test_images)
            tuned = InceptionV3([3], True, True)
            tuned.eval()
            tuned_out = tuned(test_images)
            clf = Classifier()
            clf.eval()
            print(clf(torch.rand(4, 8)).sum(), tuned_out[0].sum())
            """,
    })
    results = check_file("fid.py", Settings(root=str(project), select=("TD401",)))
    assert codes([results], "fid.py") == [(15, "TD401"), (18, "TD401")]


def test_a_loader_handed_to_a_training_function_of_another_module_is_judged_for_workers(project: Path) -> None:
    """A GNN benchmark's main script builds its loaders and hands them to ``train_epoch`` of ``train/train_mol.py``,
    which backpropagates: a training program, so the loader without workers is TD305 beside TD304. A script that
    only evaluates through an imported function is not."""
    write(project, {
        "train/__init__.py": "",
        "train/train_mol.py": """\
            def train_epoch(model, optimizer, device, loader):
                model.train()
                for x, y in loader:
                    loss = (model(x.to(device)) - y.to(device)).pow(2).mean()
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()

            def evaluate(model, device, loader):
                return sum(float((model(x.to(device)) - y.to(device)).abs().mean()) for x, y in loader)
            """,
        "main.py": """\
            import torch
            from torch.utils.data import DataLoader, TensorDataset
            from train.train_mol import train_epoch

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(4, 1).to(device)
            optimizer = torch.optim.Adam(model.parameters())
            loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
            for epoch in range(3):
                train_epoch(model, optimizer, device, loader)
            """,
        "score.py": """\
            import torch
            from torch.utils.data import DataLoader, TensorDataset
            from train.train_mol import evaluate

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(4, 1).to(device)
            loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
            print(evaluate(model, device, loader))
            """,
    })
    results = check_files(["main.py", "score.py", "train/train_mol.py"], Settings(root=str(project), select=("TD304", "TD305")))
    assert codes(results, "main.py") == [(8, "TD304"), (8, "TD305")]
    assert codes(results, "score.py") == [(7, "TD304")]


def test_a_dataset_of_another_module_that_moves_its_items_gives_device_batches(project: Path) -> None:
    """A news classifier's ``Rows`` dataset (``dataset_utils.py``) moves each item to CUDA under the flag that moves
    the model: the batches are on the GPU already (no TD302 for them unmoved, nothing to pin). A dataset that keeps its
    items on the host is told."""
    write(project, {
        "rows.py": """\
            import torch
            from torch.utils.data import Dataset

            class Rows(Dataset):
                def __init__(self, rows, on_gpu):
                    self.rows, self.on_gpu = rows, on_gpu

                def __getitem__(self, i):
                    feats, label = torch.tensor(self.rows[i][0]), torch.tensor(self.rows[i][1])
                    if self.on_gpu:
                        feats, label = feats.cuda(), label.cuda()
                    return feats, label

                def __len__(self):
                    return len(self.rows)

            class HostRows(Rows):
                def __getitem__(self, i):
                    return torch.tensor(self.rows[i][0]), torch.tensor(self.rows[i][1])
            """,
        "train.py": """\
            import torch
            import torch.nn as nn
            from torch.utils.data import DataLoader
            from rows import HostRows, Rows

            use_gpu = torch.cuda.is_available()
            rows = [([0.0, 1.0], 1), ([1.0, 0.0], 0)]
            loader = DataLoader(Rows(rows, use_gpu), batch_size=2)
            host_loader = DataLoader(HostRows(rows, use_gpu), batch_size=2)
            net = nn.Linear(2, 2)
            if use_gpu:
                net = net.cuda()
            opt = torch.optim.SGD(net.parameters(), lr=0.1)
            for feats, label in loader:
                loss = nn.functional.cross_entropy(net(feats), label)
                opt.zero_grad()
                loss.backward()
                opt.step()
            for feats, label in host_loader:
                loss = nn.functional.cross_entropy(net(feats.cuda()), label)
                opt.zero_grad()
                loss.backward()
                opt.step()
            """,
    })
    results = check_file("train.py", Settings(root=str(project), select=("TD302", "TD304")))
    assert codes([results], "train.py") == [(9, "TD304"), (20, "TD302")]


def test_modules_handed_in_a_list_to_a_moving_helper_of_another_module_are_moved(project: Path) -> None:
    write(project, {
        "gpu.py": """\
            import torch

            def cuda(objs):
                if not torch.cuda.is_available():
                    return objs
                if isinstance(objs, (list, tuple)):
                    return [o.cuda() for o in objs]
                return objs.cuda()
            """,
        "gan.py": """\
            import torch
            import torch.nn as nn
            import gpu

            class Judge(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.layers = nn.Sequential(nn.Linear(6, 12), nn.LayerNorm(12), nn.Linear(12, 1))

                def forward(self, x):
                    return self.layers(x)

            judge, painter = Judge(), nn.Linear(3, 6)
            gpu.cuda([judge, painter])
            forgotten = Judge()
            opt = torch.optim.Adam(list(judge.parameters()) + list(painter.parameters()))
            for _ in range(10):
                z, real = gpu.cuda((torch.randn(2, 3), torch.randn(2, 6)))
                loss = judge(painter(z)).mean() - judge(real).mean() + forgotten(real).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            """,
    })
    results = check_files(["gan.py", "gpu.py"], Settings(root=str(project), select=("TD201",)))
    assert codes(results, "gan.py") == [(15, "TD201")]  # the one module no helper was handed
    [finding] = [f for r in results if r.path.endswith("gan.py") for f in r.findings]
    assert finding.fix.endswith("`forgotten = gpu.cuda(forgotten)`")  # the project's helper, not a method call


def test_a_module_level_helper_named_cuda_is_judged_like_any_code_and_its_callers_are_not(project: Path) -> None:
    write(project, {
        "dev.py": """\
            import torch

            def cuda(x):
                if not torch.cuda.is_available():
                    return x
                return x.cuda()

            class Mover:
                def __init__(self, device):
                    self.device = device

                def cuda(self, *xs):
                    return [x.to(self.device) for x in xs]

                def batch(self, a, b):
                    return self.cuda(a, b)
            """,
        "main.py": """\
            import torch.nn as nn
            import dev

            net = dev.cuda(nn.Linear(2, 2))
            """,
    })
    results = check_files(["main.py", "dev.py"], Settings(root=str(project), select=("TD102",)))
    assert codes(results, "dev.py") == [(6, "TD102")]  # guarded by nothing that names a device: its own .cuda()
    assert codes(results, "main.py") == []  # a call of the project's helper, not torch's Tensor.cuda


@pytest.mark.parametrize("alone", [False, True])
def test_a_helper_module_whose_importer_binds_each_process_to_its_gpu_is_not_td705(project: Path, alone: bool) -> None:
    helper = """\
        import pickle
        import torch
        import torch.distributed as dist

        def start(rank, world):
            dist.init_process_group("nccl", rank=rank, world_size=world)

        def gather_objects(obj, world):
            blob = torch.cuda.ByteTensor(list(pickle.dumps(obj)))
            out = [torch.cuda.ByteTensor(blob.numel()) for _ in range(world)]
            dist.all_gather(out, blob)
            return [pickle.loads(bytes(o.tolist())) for o in out]
        """
    write(project, {
        "comm.py": helper,
        "main.py": """\
            import torch
            import torch.multiprocessing as mp
            import comm

            def worker(gpu, world):
                torch.cuda.set_device(gpu)
                comm.start(gpu, world)
                print(comm.gather_objects({"gpu": gpu}, world))

            if __name__ == "__main__":
                mp.spawn(worker, args=(2,), nprocs=2)
            """,
        "other/comm.py": helper,
        "other/main.py": """\
            import torch.multiprocessing as mp
            import comm

            def worker(gpu, world):
                comm.start(gpu, world)
                print(comm.gather_objects({"gpu": gpu}, world))

            if __name__ == "__main__":
                mp.spawn(worker, args=(2,), nprocs=2)
            """,
    })
    settings = Settings(root=str(project), select=("TD705",))
    files = ["comm.py", "main.py", "other/comm.py", "other/main.py"]
    results = [check_file(f, settings) for f in files] if alone else check_files(files, settings)
    assert codes(results[:1], "comm.py") == []  # main.py calls torch.cuda.set_device(gpu) before it calls in
    assert codes(results[2:3], "comm.py") == [(9, "TD705"), (10, "TD705")]  # no importer binds a GPU: all on GPU 0


def test_a_loader_subclass_of_another_module_that_passes_its_workers_on_is_not_td305(project: Path) -> None:
    write(project, {
        "loaders.py": """\
            from torch.utils.data import DataLoader

            class MelLoader(DataLoader):
                def __init__(self, dataset, batch_size, num_workers=8):
                    super().__init__(dataset, batch_size=batch_size, num_workers=num_workers, shuffle=True)

            class SerialLoader(DataLoader):
                def __init__(self, dataset, batch_size):
                    super().__init__(dataset, batch_size=batch_size, num_workers=0, shuffle=True)
            """,
        "train.py": """\
            import torch
            import torch.nn as nn
            from loaders import MelLoader, SerialLoader

            data = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
            mels = MelLoader(data, batch_size=8)
            serial = SerialLoader(data, batch_size=8)
            net = nn.Linear(4, 1).cuda()
            opt = torch.optim.SGD(net.parameters(), lr=0.1)
            for source in (mels, serial):
                for x, y in source:
                    loss = nn.functional.mse_loss(net(x.cuda()), y.cuda())
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            """,
    })
    results = check_files(["train.py", "loaders.py"], Settings(root=str(project), select=("TD305",)))
    assert codes(results, "train.py") == [(7, "TD305")]  # the subclass that hands torch's num_workers=0


def test_a_decoding_helper_that_evaluation_loops_call_copies_their_outputs_to_the_host(project: Path) -> None:
    """``spans = decode_spans(start_logits, end_logits)`` in evaluation loops (``model.eval()`` first): the helper's
    ``torch.argmax(...).cpu().numpy()`` is the evaluation's outputs reaching the host, not a per-step sync. The same
    copy in a helper a training loop calls every step is one."""
    decode = """\
        import torch

        def decode_spans(start_logits, end_logits):
            starts = torch.argmax(start_logits, -1).cpu().numpy()[0]
            ends = torch.argmax(end_logits, -1).cpu().numpy()[0]
            return [(s, e) for s, e in zip(starts, ends) if s and e]
        """
    write(project, {
        "decode.py": decode,
        "train_decode.py": decode,
        "run.py": """\
            import torch
            from decode import decode_spans
            from train_decode import decode_spans as spans_while_training

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            def evaluate(model, loader):
                model.eval()
                found = []
                for ids, _ in loader:
                    with torch.no_grad():
                        start_logits, end_logits = model(ids.to(device))
                    found += decode_spans(start_logits, end_logits)
                return found

            def train(model, loader, opt):
                model.train()
                for ids, target in loader:
                    start_logits, end_logits = model(ids.to(device))
                    loss = (start_logits - target.to(device)).pow(2).mean() + end_logits.mean()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    print(spans_while_training(start_logits, end_logits))
            """,
    })
    results = check_files(["decode.py", "train_decode.py", "run.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "decode.py") == []
    assert codes(results, "train_decode.py") == [(4, "TD603"), (5, "TD603")]  # each copy, every training step


def test_a_volume_scoring_helper_copies_predictions_it_computes_from_the_model_it_is_handed(project: Path) -> None:
    """TransUNet's ``test_single_volume(image, label, net)``: each slice's ``out = torch.argmax(net(x), 1)`` copied
    with ``out.cpu().numpy()`` for SciPy resizing and the metrics, called once per volume by an evaluation loop of
    another module after ``model.eval()``: the evaluation's outputs reaching the host, not a per-step sync."""
    write(project, {
        "metrics.py": """\
            import numpy as np
            import torch

            def score_volume(image, label, net, classes):
                image, label = image.squeeze(0).cpu().numpy(), label.squeeze(0).cpu().numpy()
                prediction = np.zeros_like(label)
                for k in range(image.shape[0]):
                    x = torch.from_numpy(image[k]).unsqueeze(0).unsqueeze(0).float().cuda()
                    with torch.no_grad():
                        outputs = net(x)
                        out = torch.argmax(torch.softmax(outputs, dim=1), dim=1).squeeze(0)
                        prediction[k] = out.cpu().numpy()
                return [float((prediction == c).mean()) for c in range(1, classes)]
            """,
        "test.py": """\
            import torch
            from metrics import score_volume

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            def inference(model, loader):
                model.to(device)
                model.eval()
                scores = []
                for batch in loader:
                    scores.append(score_volume(batch["image"], batch["label"], model, classes=9))
                return scores
            """,
    })
    results = check_files(["metrics.py", "test.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "metrics.py") == []


def test_a_loss_class_of_another_module_whose_parameters_are_made_on_the_device_it_is_given(project: Path) -> None:
    """A speaker-verification loss keeps ``self.w = nn.Parameter(torch.tensor(10.0).to(device))``: built with the
    device, it is on it already. A loss keeping a layer it never moves is not."""
    write(project, {
        "losses.py": """\
            import torch
            import torch.nn as nn

            class ScaledCosine(nn.Module):
                def __init__(self, device):
                    super().__init__()
                    self.w = nn.Parameter(torch.tensor(10.0).to(device), requires_grad=True)
                    self.b = nn.Parameter(torch.tensor(-5.0).to(device), requires_grad=True)

                def forward(self, a, b):
                    return (self.w * (a * b).sum(-1) + self.b).mean()

            class Projected(nn.Module):
                def __init__(self, device):
                    super().__init__()
                    self.proj = nn.Linear(8, 8)
                    self.device = device

                def forward(self, a, b):
                    return (self.proj(a) * b).sum(-1).mean()
            """,
        "train.py": """\
            import torch
            import torch.nn as nn
            from losses import Projected, ScaledCosine

            def fit(loader):
                device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                enc = nn.Linear(8, 8).to(device)
                crit = ScaledCosine(device)
                proj = Projected(device)
                opt = torch.optim.SGD([*enc.parameters(), *crit.parameters(), *proj.parameters()], lr=0.1)
                for x in loader:
                    x = x.to(device)
                    loss = crit(enc(x), enc(x.flip(0))) + proj(enc(x), x)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            """,
    })
    results = check_files(["train.py", "losses.py"], Settings(root=str(project), select=("TD201",)))
    assert codes(results, "train.py") == [(9, "TD201")]


@pytest.mark.parametrize("alone", [False, True])
def test_modules_on_the_path_an_init_paths_script_adds_are_the_projects(project: Path, alone: bool) -> None:
    """HRNet's layout: ``tools/train.py`` runs ``import _init_paths`` (which puts ``../lib`` on ``sys.path``) and then
    ``from core.function import train``: the training function of ``lib/core/function.py`` is called with a model
    wrapped in DataParallel, which scatters its unmoved inputs itself (TD302 stays quiet there)."""
    write(project, {
        "tools/_init_paths.py": """\
            import os.path as osp
            import sys

            def add_path(path):
                if path not in sys.path:
                    sys.path.insert(0, path)

            this_dir = osp.dirname(__file__)
            add_path(osp.join(this_dir, '..', 'lib'))
            """,
        "tools/train.py": """\
            import torch
            import torch.nn as nn
            import _init_paths
            from core.function import train

            model = nn.DataParallel(nn.Linear(4, 2)).cuda()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            train([(torch.randn(2, 4), torch.zeros(2, dtype=torch.long))], model, opt)
            """,
        "lib/core/__init__.py": "",
        "lib/core/function.py": """\
            import torch.nn.functional as F

            def train(loader, model, optimizer):
                for i, (input, target) in enumerate(loader):
                    target = target.cuda(non_blocking=True)
                    loss = F.cross_entropy(model(input), target)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
            """,
    })
    settings = Settings(root=str(project), select=("TD302",))
    files = ["tools/train.py", "lib/core/function.py", "tools/_init_paths.py"]
    results = [check_file("lib/core/function.py", settings)] if alone else check_files(files, settings)
    assert codes(results, "function.py") == []


def test_a_dataset_of_another_module_whose_collate_method_pads_numpy_arrays_has_nothing_to_pin(project: Path) -> None:
    """FastSpeech2's layout: ``Dataset.collate_fn`` regroups and pads NumPy arrays (``pad_2D`` of the project's
    utils), and the training loop makes tensors of them after the loader: ``pin_memory`` pins tensors only. A
    dataset whose collate makes tensors (``torch.from_numpy``) feeds pageable host tensors."""
    write(project, {
        "utils.py": """\
            import numpy as np

            def pad_2D(rows):
                width = max(r.shape[0] for r in rows)
                return np.stack([np.pad(r, (0, width - r.shape[0])) for r in rows])
            """,
        "dataset.py": """\
            import numpy as np
            import torch
            from utils import pad_2D

            class MelDataset(torch.utils.data.Dataset):
                def __init__(self, rows):
                    self.rows = rows

                def __getitem__(self, i):
                    return self.rows[i]

                def __len__(self):
                    return len(self.rows)

                def reprocess(self, batch):
                    return pad_2D([b for b in batch]), np.array([len(b) for b in batch])

                def collate_fn(self, batch):
                    return self.reprocess(batch)

            class TensorMelDataset(MelDataset):
                def collate_fn(self, batch):
                    mels, lens = self.reprocess(batch)
                    return torch.from_numpy(mels), torch.from_numpy(lens)
            """,
        "train.py": """\
            import numpy as np
            import torch
            from torch.utils.data import DataLoader
            from dataset import MelDataset, TensorMelDataset

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            net = torch.nn.Linear(8, 8).to(device)
            opt = torch.optim.Adam(net.parameters())
            rows = [np.random.rand(8) for _ in range(32)]
            dataset = MelDataset(rows)
            loader = DataLoader(dataset, batch_size=4, num_workers=2, collate_fn=dataset.collate_fn)
            tensors = TensorMelDataset(rows)
            tensor_loader = DataLoader(tensors, batch_size=4, num_workers=2, collate_fn=tensors.collate_fn)
            for source in (loader, tensor_loader):
                for mels, lens in source:
                    mels = torch.as_tensor(mels, dtype=torch.float32).to(device)
                    loss = net(mels).pow(2).mean()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            """,
    })
    results = check_files(["train.py", "dataset.py", "utils.py"], Settings(root=str(project), select=("TD304",)))
    assert codes(results, "train.py") == [(13, "TD304")]


@pytest.mark.parametrize("together", [True, False])
def test_a_module_that_calls_a_kernel_builder_of_another_module_on_import_needs_a_gpu(project: Path, together: bool) -> None:
    """``act = build.compile_ops()`` at module level, where ``compile_ops`` hands ``.cu`` sources to
    ``cpp_extension.load`` through a nested helper: importing that module compiles a CUDA kernel, so its tests and
    the programs that import it cannot run without a GPU. Calling the builder only inside a function, or only in a
    ``__main__`` block, does not make an importer GPU-only."""
    write(project, {
        "fused/__init__.py": "",
        "fused/build.py": """\
            import pathlib
            from torch.utils import cpp_extension

            def compile_ops():
                folder = pathlib.Path(__file__).parent

                def _go(name, files):
                    return cpp_extension.load(name=name, sources=files)

                return _go("fused_ops", [folder / "ops.cpp", folder / "ops_kernel.cu"])

            def describe():
                return "ops"
            """,
        "fused/act.py": """\
            import torch
            from fused import build

            ops = build.compile_ops()

            class FusedAct(torch.nn.Module):
                def forward(self, x):
                    return ops.forward(x)
            """,
        "fused/lazy.py": """\
            from fused import build

            info = build.describe()

            def get_ops():
                return build.compile_ops()
            """,
        "check_act.py": """\
            import torch
            from fused import act

            x = torch.rand(2, 8, device="cuda")
            print(act.FusedAct().cuda()(x))
            """,
        "check_lazy.py": """\
            import torch
            from fused import lazy

            x = torch.rand(2, 8, device="cuda")
            print(lazy.info, x)
            """,
    })
    settings = Settings(root=str(project), select=("TD101",))
    files = ["check_act.py", "check_lazy.py"]
    results = check_files(files, settings) if together else [check_file(f, settings) for f in files]
    assert codes(results, "check_act.py") == []  # importing act compiles the kernel: a GPU is needed anyway
    assert codes(results, "check_lazy.py") == [(4, "TD101")]  # lazy builds it only when asked: a CPU run is possible


def test_a_test_script_named_for_cuda_needs_no_cpu_fallback(project: Path) -> None:
    """``tests/test_cuda_vs_eager.py``, a script comparing a CUDA build with the eager model, is GPU-only by its
    name; ``tests/test_export.py`` with the same code is not."""
    script = """\
        import torch

        if __name__ == "__main__":
            ref = torch.nn.Linear(8, 8).to("cuda")
            x = torch.rand(4, 8, device="cuda")
            print((ref(x) - ref(x)).abs().max())
        """
    write(project, {"tests/test_cuda_vs_eager.py": script, "tests/test_export.py": script})
    settings = Settings(root=str(project), select=("TD101",))
    assert [f.code for f in check_file("tests/test_cuda_vs_eager.py", settings).findings] == []
    assert [f.code for f in check_file("tests/test_export.py", settings).findings] == ["TD101", "TD101"]


def test_a_decoding_helper_of_another_module_that_returns_records_of_host_arrays_is_quiet(project: Path) -> None:
    """A detector's post-processing helper hands back, per image, a dict of NumPy arrays made from what its caller
    gave it (through ``refine``/``clip`` calls): the evaluation keeps them on the host. A helper that reads a count
    with ``.item()`` is still a sync on every step of the loop that calls it."""
    write(project, {
        "post.py": """\
            import numpy as np
            import torch


            def decode(anchors, deltas, scores, threshold):
                boxes = refine(anchors, deltas)
                boxes = clip(boxes)
                out = []
                for i in range(scores.shape[0]):
                    keep = scores[i] > threshold
                    kept = boxes[i, keep]
                    if kept.shape[0] == 0:
                        out.append({"boxes": np.zeros((0, 4)), "scores": np.zeros(0)})
                        continue
                    out.append({"boxes": kept.cpu().numpy(), "scores": scores[i, keep].cpu().numpy()})
                return out


            def refine(anchors, deltas):
                return anchors + deltas


            def clip(boxes):
                return boxes.clamp(0, 1)


            def count_hits(scores, threshold):
                return (scores > threshold).sum().item()
            """,
        "evaluate.py": """\
            import torch
            import torch.nn as nn
            from post import count_hits, decode

            use_gpu = torch.cuda.is_available()
            head = nn.Linear(4, 5)
            head.eval()
            if use_gpu:
                head.cuda()


            def evaluate(ids):
                results, hits = [], 0
                for i in ids:
                    x = torch.randn(10, 4)
                    if use_gpu:
                        x = x.cuda()
                    out = head(x)
                    results += decode(out[:, :4], out[:, :4], out[:, 4], 0.5)
                    hits += count_hits(out[:, 4], 0.5)
                return results, hits


            evaluate(range(3))
            """,
    })
    results = check_files(["evaluate.py", "post.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "post.py") == [(28, "TD603")]  # the count; not the records of arrays (line 15)


def test_a_helper_of_another_module_that_picks_the_action_for_the_environment_is_quiet(project: Path) -> None:
    """``act = epsilon_pick(q, eps)`` then ``env.step(act)``: the helper reads the Q-values back to choose the action,
    which the environment needs on the host; a helper that reads a number for a running sum is a sync. A helper's
    greedy branch (``if greedy:`` of a parameter that defaults to False) that the step loop never asks for is not
    run there."""
    write(project, {
        "pick.py": """\
            import random

            import numpy as np
            import torch
            from torch.distributions import Categorical


            def epsilon_pick(q_values, eps):
                scores = q_values.cpu().numpy().squeeze()
                if random.random() > eps:
                    return int(np.argmax(scores))
                return random.randrange(scores.shape[0])


            def sample_or_argmax(probs, greedy=False):
                if greedy:
                    return torch.argmax(probs, dim=1).item()
                return Categorical(probs).sample().unsqueeze(-1)


            def peak(q_values):
                return q_values.max().item()
            """,
        "train.py": """\
            import numpy as np
            import torch
            from torch import nn
            from pick import epsilon_pick, peak, sample_or_argmax


            def train(env, steps, eps=0.1):
                dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                qnet = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 2)).to(dev)
                opt = torch.optim.Adam(qnet.parameters())
                obs = env.reset()
                top_q = 0.0
                for t in range(steps):
                    with torch.no_grad():
                        q = qnet(torch.as_tensor(np.asarray(obs), dtype=torch.float32, device=dev).unsqueeze(0))
                    act = epsilon_pick(q, eps)
                    other = sample_or_argmax(q.softmax(-1))
                    obs, reward, done, _ = env.step(act)
                    top_q += peak(q)
                    nxt = torch.as_tensor(np.asarray(obs), dtype=torch.float32, device=dev).unsqueeze(0)
                    loss = (qnet(nxt).max(1)[0] - reward).pow(2).mean() + other.float().mean()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    if done:
                        obs = env.reset()
                return top_q
            """,
    })
    results = check_files(["train.py", "pick.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "pick.py") == [(22, "TD603")]  # peak's read; not the action's copy (9), not greedy (17)
    assert codes(results, "train.py") == [(19, "TD603")]  # the call of peak; not epsilon_pick's, whose action steps


QUIET_MODELS = """\
    import torch
    from torch import nn


    class TinyLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.out = nn.Linear(8, 30)

        def forward(self, x):
            return self.out(x)

        @torch.inference_mode()
        def inference(self, x):
            return self.forward(x).argmax(-1)


    class Denoiser(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(8, 8)

        def sample(self, x):
            with torch.no_grad():
                return self.net(x)

        def forward(self, x):
            return self.sample(x)
    """


def test_a_method_of_a_model_class_of_another_module_that_runs_without_grad_is_quiet(project: Path) -> None:
    """``lm.inference(seed)`` where ``TinyLM.inference`` (another module) is decorated with
    ``torch.inference_mode()``, and ``den(x)`` whose ``forward`` samples under ``no_grad``: no graph is recorded.
    The forward of a plain model is an inference with autograd on."""
    write(project, {
        "models.py": QUIET_MODELS,
        "demo.py": """\
            import torch
            from models import Denoiser, TinyLM

            dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            lm, den = TinyLM().to(dev), Denoiser().to(dev)
            lm.eval()
            den.eval()
            x = torch.load("clip.pt", map_location=dev, weights_only=True)
            text = lm.inference(x)
            clean = den(x)
            logits = lm(x)
            """,
    })
    results = check_files(["demo.py"], Settings(root=str(project), select=("TD401",)))
    assert codes(results, "demo.py") == [(11, "TD401")]


def test_a_parameter_annotated_with_a_model_class_runs_its_quiet_methods_without_grad(project: Path) -> None:
    """``def train(model: TinyLM, ...)`` then ``model.inference(x)``: the annotation names the class of another module
    whose ``inference`` is ``@torch.inference_mode()``, so no graph is recorded; an unannotated ``model`` calling
    ``inference`` after eval mode is still an inference with autograd on."""
    write(project, {
        "models.py": QUIET_MODELS,
        "train.py": """\
            import torch
            from models import TinyLM


            def train(model: TinyLM, x, epochs):
                for epoch in range(epochs):
                    model.eval()
                    print(model.inference(x))


            def train_any(model, x, epochs):
                for epoch in range(epochs):
                    model.eval()
                    print(model.inference(x))
            """,
    })
    results = check_files(["train.py"], Settings(root=str(project), select=("TD401",)))
    assert codes(results, "train.py") == [(14, "TD401")]


def test_an_inference_wrapper_s_call_every_caller_runs_under_no_grad(project: Path) -> None:
    """``Extractor.__call__`` puts its network in eval mode and runs it; the decode script calls ``extractor(sents)``
    under ``with torch.no_grad():`` only, so no graph is recorded (TD401 quiet). A script that calls it with autograd on
    keeps the finding."""
    decoding = """\
        import torch
        from torch import nn


        class Extractor:
            def __init__(self, cuda=True):
                self._device = torch.device("cuda" if cuda else "cpu")
                self._net = nn.Linear(8, 4).to(self._device)

            def __call__(self, sents):
                self._net.eval()
                scores = self._net(torch.tensor(sents, dtype=torch.float).to(self._device))
                return scores.argmax(-1).tolist()
        """
    decode = """\
        import torch
        from decoding import Extractor

        extractor = Extractor(cuda=torch.cuda.is_available())
        with torch.no_grad():
            for sents in [[[0.0] * 8] * 3] * 4:
                print(extractor(sents))
        """
    write(project, {"decoding.py": decoding, "decode.py": decode})
    results = check_files(["decoding.py", "decode.py"], Settings(root=str(project), select=("TD401",)))
    assert codes(results, "decoding.py") == []
    write(project, {"decode.py": decode.replace("with torch.no_grad():", "if True:")})
    results = check_files(["decoding.py", "decode.py"], Settings(root=str(project), select=("TD401",)))
    assert codes(results, "decoding.py") == [(12, "TD401")]


def test_reads_in_the_methods_of_a_trainer_object_of_another_module_run_every_step(project: Path) -> None:
    """``eng.fit_batch(x, y)`` on every batch, ``eng = Engine(net, lr, dev)`` imported from ``engine.py``: the
    method's ``.item()`` reads run on every step there. Its copies handed back (an image made for the caller) and an
    action read for the environment are not told; a method no step loop calls is not either."""
    write(project, {
        "engine.py": """\
            import torch


            class Engine:
                def __init__(self, net, lr, device):
                    self.net = net
                    self.net.to(device)
                    self.opt = torch.optim.Adam(self.net.parameters(), lr=lr)

                def fit_batch(self, x, y):
                    self.net.train()
                    self.opt.zero_grad()
                    err = (self.net(x) - y).abs().mean()
                    err.backward()
                    self.opt.step()
                    return err.item()

                def render(self, x):
                    with torch.no_grad():
                        return self.net(x).cpu().numpy()

                def act(self, env, x):
                    obs, reward, done, info = env.step(self.net(x).argmax().item())
                    return obs

                def summary(self, x):
                    return self.net(x).mean().item()
            """,
        "run.py": """\
            import torch
            import torch.nn as nn
            from engine import Engine

            dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
            eng = Engine(net, 1e-3, dev)
            train_loader = [(torch.randn(16, 4), torch.randn(16, 1)) for _ in range(10)]
            for epoch in range(5):
                for xb, yb in train_loader:
                    eng.fit_batch(xb.to(dev), yb.to(dev))
                    eng.render(xb.to(dev))
                    eng.act(None, xb.to(dev))
            print(eng.summary(torch.randn(2, 4, device=dev)))
            """,
    })
    results = check_files(["run.py", "engine.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "engine.py") == [(16, "TD603")]


@pytest.mark.parametrize("device", ["cuda:0", "cpu"])
def test_a_training_function_of_a_helper_module_handed_a_model_moved_to_the_gpu_syncs_every_step(
        project: Path, device: str) -> None:
    """``fit(net, loader, 3)`` of ``loops.py``, whose model moves its own batches (``batch["x"].to(self.dev)``), with
    ``net = Imputer(cfg.device).to(cfg.device)`` and ``--device`` defaulting to a GPU in the caller: the helper's
    ``loss.item()`` waits for the GPU every step. With a CPU default it waits for nothing."""
    write(project, {
        "loops.py": """\
            import torch


            def fit(net, loader, n_epochs):
                opt = torch.optim.Adam(net.parameters(), lr=1e-3)
                running = 0.0
                for ep in range(n_epochs):
                    for batch in loader:
                        opt.zero_grad()
                        loss = net(batch)
                        loss.backward()
                        running += loss.item()
                        opt.step()
                return running
            """,
        "cli.py": f"""\
            import argparse
            import torch
            import torch.nn as nn
            from loops import fit


            class Imputer(nn.Module):
                def __init__(self, dev):
                    super().__init__()
                    self.dev = dev
                    self.body = nn.Linear(12, 12)

                def forward(self, batch):
                    x = batch["x"].to(self.dev)
                    return ((self.body(x) - x) ** 2).mean()


            ap = argparse.ArgumentParser()
            ap.add_argument("--device", default="{device}")
            cfg = ap.parse_args()
            rows = [{{"x": torch.randn(16, 12)}} for _ in range(8)]
            net = Imputer(cfg.device).to(cfg.device)
            fit(net, rows, 3)
            """,
    })
    results = check_files(["loops.py", "cli.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "loops.py") == ([(12, "TD603")] if device.startswith("cuda") else [])


@pytest.mark.parametrize("fallback", ["raise NotImplementedError('this op needs CUDA')", "pass"])
def test_a_kernel_built_by_a_builder_chosen_through_a_variable_is_gpu_only_when_no_cpu_build_exists(
        project: Path, fallback: str) -> None:
    """``builder = CppExtension``, ``if torch.cuda.is_available(): builder = CUDAExtension`` ``else: raise``, then
    ``builder("_warpops", srcs)``: the kernel exists only for CUDA, so its test script has nothing to fall back to.
    When the ``else`` goes on with the C++ build, the kernel runs on the CPU too and ``.cuda()`` is a crash."""
    write(project, {
        "setup.py": f"""\
            import torch
            from setuptools import setup
            from torch.utils.cpp_extension import CppExtension, CUDAExtension, BuildExtension

            def make_exts():
                builder = CppExtension
                srcs = ["warp_api.cpp"]
                if torch.cuda.is_available():
                    builder = CUDAExtension
                    srcs += ["warp_kernel.cu"]
                else:
                    {fallback}
                return [builder("_warpops", srcs)]

            setup(name="warpops", ext_modules=make_exts(), cmdclass={{"build_ext": BuildExtension}})
            """,
        "warp_op.py": """\
            import _warpops as backend


            def warp_forward(x, offsets):
                return backend.forward(x, offsets)
            """,
        "check_warp.py": """\
            import torch
            import _warpops

            feats = torch.randn(2, 8, 16, 16).cuda()
            print(_warpops.forward(feats, feats).shape)
            """,
    })
    results = check_files(["check_warp.py"], Settings(root=str(project), select=("TD101",)))
    assert codes(results, "check_warp.py") == ([] if fallback.startswith("raise") else [(4, "TD101")])


@pytest.mark.parametrize("moved_first", [False, True])
def test_a_helper_that_reads_lengths_its_callers_give_before_moving_the_batch_waits_for_nothing(
        project: Path, moved_first: bool) -> None:
    """``concat(s1, l1, s2, l2, params.pad_index, 1)`` in a step that moves the batch only after the call
    (``x, lengths = x.to(dev), lengths.to(dev)``): the helper's ``lengths.max().item()`` and ``(x == eos).sum().item()``
    read host tensors. When the step moves the batch first, the same reads wait for the GPU (told at the call)."""
    step = ("    s1, l1, s2, l2 = s1.to(dev), l1.to(dev), s2.to(dev), l2.to(dev)\n"
            "    x, lengths = concat(s1, l1, s2, l2, params.pad_index, 1)\n") if moved_first else (
            "    x, lengths = concat(s1, l1, s2, l2, params.pad_index, 1)\n"
            "    x, lengths = x.to(dev), lengths.to(dev)\n")
    main = textwrap.dedent("""\
        import argparse
        import torch
        from helpers import concat

        params = argparse.Namespace(pad_index=0)
        dev = torch.device("cuda")
        net = torch.nn.Linear(4, 4).to(dev)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        batches = [((torch.zeros(5, 2, dtype=torch.long), torch.tensor([3, 4])),) * 2] * 4
        for (s1, l1), (s2, l2) in batches:
        """) + step + "    loss = net(x.float()).mean()\n    opt.zero_grad()\n    loss.backward()\n    opt.step()\n"
    write(project, {
        "helpers.py": """\
            def concat(x1, len1, x2, len2, pad_idx, eos_idx, reset=False):
                lengths = len1 + len2
                if not reset:
                    lengths -= 1
                slen, bs = lengths.max().item(), lengths.size(0)
                x = x1.new(slen, bs).fill_(pad_idx)
                for i in range(bs):
                    x[len1[i] - 1:len1[i] - 1 + len2[i], i].copy_(x2[:len2[i], i])
                assert (x == eos_idx).long().sum().item() == 3 * bs
                return x, lengths
            """,
        "main.py": main,
    })
    results = check_files(["helpers.py", "main.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "helpers.py") == []
    assert codes(results, "main.py") == ([(12, "TD603")] if moved_first else [])  # (the call reads device tensors)


def test_reads_in_the_step_methods_of_a_trainer_run_every_step_of_the_loop_of_another_module(project: Path) -> None:
    """A translation trainer (``trainer.py``) whose step methods each do one whole step (``self.optimize(loss)``, in
    the base class, backpropagates and steps), called from a ``while`` loop of ``train.py`` on a model that
    ``model.py``'s builder returns with ``.cuda()``: their ``loss.item()`` and the NaN test in ``optimize`` wait for
    the GPU every step. Reads of the batch before the step moves it (``to_cuda``) wait for nothing, nor does the
    ``lengths.max().item()`` of a helper method called with host tensors before that move."""
    write(project, {
        "model.py": """\
            import torch.nn as nn


            def build_model(dim):
                model = nn.Linear(dim, dim)
                return model.cuda()
            """,
        "trainer.py": """\
            import torch


            def to_cuda(*ts):
                return [t.cuda() for t in ts]


            class Trainer:
                def __init__(self, model):
                    self.model = model
                    self.opt = torch.optim.SGD(model.parameters(), lr=0.1)
                    self.stats = []
                    self.n_sentences = 0

                def optimize(self, loss):
                    if (loss != loss).data.any():
                        print("NaN")
                    self.opt.zero_grad()
                    loss.backward()
                    self.opt.step()

                def trim(self, x, lengths):
                    slen = lengths.max().item()
                    return x[:slen], lengths

                def get_batch(self):
                    return torch.randn(6, 4), torch.tensor([3, 6])


            class SeqTrainer(Trainer):
                def mt_step(self):
                    x, lengths = self.get_batch()
                    x, lengths = self.trim(x, lengths)
                    assert (lengths - 1).sum().item() > 0
                    x, lengths = to_cuda(x, lengths)
                    loss = self.model(x).pow(2).mean()
                    self.stats.append(loss.item())
                    self.optimize(loss)
                    self.n_sentences += len(lengths)
            """,
        "train.py": """\
            from model import build_model
            from trainer import SeqTrainer


            def main(epochs, epoch_size):
                model = build_model(4)
                trainer = SeqTrainer(model)
                for _ in range(epochs):
                    trainer.n_sentences = 0
                    while trainer.n_sentences < epoch_size:
                        trainer.mt_step()
            """,
    })
    results = check_files(["trainer.py", "train.py", "model.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "trainer.py") == [(16, "TD603"), (37, "TD603")]


@pytest.mark.parametrize("default", ["cuda:0", "cpu"])
def test_a_constructor_device_parameter_given_a_gpu_by_its_caller_puts_forward_on_the_gpu(
        project: Path, default: str) -> None:
    """``Denoiser(50, cfg.device)`` for ``__init__(self, n_steps, dev)``: ``self`` takes no argument slot, so ``dev``
    is the caller's second argument, a GPU when ``--device`` defaults to one. The timestep tensor ``forward`` makes
    on the host and copies to ``self.dev`` is then made and copied every step."""
    write(project, {
        "denoiser.py": """\
            import torch
            import torch.nn as nn


            class Denoiser(nn.Module):
                def __init__(self, n_steps, dev):
                    super().__init__()
                    self.dev = dev
                    self.n_steps = n_steps
                    self.net = nn.Linear(17, 16)

                def forward(self, x):
                    t = torch.randint(0, self.n_steps, [x.shape[0]]).to(self.dev)
                    return self.net(torch.cat([x, t[:, None].float()], 1)).pow(2).mean()
            """,
        "train.py": f"""\
            import argparse
            import torch
            from denoiser import Denoiser

            ap = argparse.ArgumentParser()
            ap.add_argument("--device", default="{default}")
            cfg = ap.parse_args()
            model = Denoiser(50, cfg.device).to(cfg.device)
            opt = torch.optim.Adam(model.parameters())
            data = torch.randn(512, 16)
            for i in range(0, 512, 32):
                loss = model(data[i:i + 32].to(cfg.device))
                opt.zero_grad()
                loss.backward()
                opt.step()
            """,
    })
    results = check_files(["denoiser.py", "train.py"], Settings(root=str(project), select=("TD611",)))
    assert codes(results, "denoiser.py") == ([(13, "TD611")] if default.startswith("cuda") else [])


def test_a_method_whose_every_caller_in_another_module_guards_by_rank_writes_once(project: Path) -> None:
    """``Engine.store`` (of a DDP trainer) saves a checkpoint; ``run.py`` calls ``eng.store(...)`` only behind ``if
    cfg.local_rank in [-1, 0]:``: one process writes. An unguarded write in ``run.py`` runs on every rank."""
    write(project, {
        "engine.py": """\
            import torch
            from torch.nn.parallel import DistributedDataParallel


            class Engine:
                def __init__(self, net):
                    self.net = net
                    self.wrapped = DistributedDataParallel(net)

                def store(self, path):
                    torch.save(self.net.state_dict(), path)
            """,
        "run.py": """\
            import argparse
            import torch
            import torch.distributed as dist
            from engine import Engine

            ap = argparse.ArgumentParser()
            ap.add_argument("--local_rank", type=int, default=-1)
            cfg = ap.parse_args()
            dist.init_process_group("gloo")
            net = torch.nn.Linear(4, 2)
            eng = Engine(net)
            for epoch in range(3):
                if cfg.local_rank in [-1, 0]:
                    eng.store(f"e{epoch}.txt")
                with open("unguarded.txt", "w") as fh:
                    fh.write(str(epoch))
            """,
    })
    results = check_files(["engine.py", "run.py"], Settings(root=str(project), select=("TD703",)))
    assert codes(results, "engine.py") == []
    assert codes(results, "run.py") == [(15, "TD703")]


@pytest.mark.parametrize("strip", ["weights[name[7:]] = weights.pop(name)",
                                   "weights[name[7:] if name.startswith('module.') else name] = weights.pop(name)"])
def test_a_wrapped_state_dict_whose_sibling_reader_strips_every_key_is_the_programs_format(
        project: Path, strip: str) -> None:
    """``torch.save(netG.state_dict(), f"{out_dir}/gen.pth")`` of a DDP wrapper, read back only by ``sample_gen.py``
    beside it (``gen.pth``), which drops the first 7 characters of every key: unwrapping the save would break that
    reader. A reader that strips the prefix only when it is there tolerates both, and the save is told."""
    write(project, {
        "sample_gen.py": f"""\
            import torch
            from train_gen import Gen


            def load_generator(folder):
                weights = torch.load(f"{{folder}}/gen.pth", map_location="cpu", weights_only=True)
                for name in list(weights.keys()):
                    {strip}
                g = Gen()
                g.load_state_dict(weights)
                return g.eval()
            """,
        "train_gen.py": """\
            import torch
            import torch.nn as nn
            import torch.distributed as dist


            class Gen(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.body = nn.Linear(8, 8)

                def forward(self, z):
                    return self.body(z)


            def run(rank, out_dir):
                dist.init_process_group("gloo")
                netG = nn.parallel.DistributedDataParallel(Gen())
                if rank == 0:
                    torch.save(netG.state_dict(), f"{out_dir}/gen.pth")
            """,
    })
    results = check_files(["train_gen.py", "sample_gen.py"], Settings(root=str(project), select=("TD205",)))
    assert codes(results, "train_gen.py") == ([] if "startswith" not in strip else [(19, "TD205")])


def test_a_program_that_imports_a_kernel_compiled_on_import_five_modules_down_needs_a_gpu(project: Path) -> None:
    """``sample.py`` imports ``blocks.net``, whose parts import ``blocks.resample``, which imports ``kern``, whose
    ``blur.py`` compiles ``.cu`` sources with ``cpp_extension.load`` when imported: the program runs on an NVIDIA GPU
    only, so its hard-coded ``"cuda:0"`` needs no CPU fallback."""
    write(project, {
        "kern/__init__.py": "from .blur import blur2d\n",
        "kern/blur.py": """\
            import os
            from torch.utils.cpp_extension import load

            _here = os.path.dirname(__file__)
            _ext = load("blur2d_ext", sources=[os.path.join(_here, "blur.cpp"), os.path.join(_here, "blur_kernel.cu")])


            def blur2d(x):
                return _ext.blur(x)
            """,
        "blocks/__init__.py": "",
        "blocks/resample.py": """\
            import torch.nn as nn
            from kern import blur2d


            class Down(nn.Module):
                def forward(self, x):
                    return blur2d(x)[:, :, ::2, ::2]
            """,
        "blocks/parts.py": """\
            import torch.nn as nn
            from blocks.resample import Down


            class Stage(nn.Module):
                def __init__(self, c):
                    super().__init__()
                    self.conv, self.down = nn.Conv2d(c, c, 3, padding=1), Down()

                def forward(self, x):
                    return self.down(self.conv(x))
            """,
        "blocks/net.py": """\
            import torch.nn as nn
            from blocks import parts


            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.s1 = parts.Stage(3)

                def forward(self, x):
                    return self.s1(x)
            """,
        "sample.py": """\
            import torch
            from blocks.net import Net

            device = "cuda:0"
            net = Net().to(device).eval()
            with torch.no_grad():
                print(net(torch.randn(2, 3, 32, 32, device=device)).shape)
            """,
    })
    results = check_files(["sample.py"], Settings(root=str(project), select=("TD101",)))
    assert codes(results, "sample.py") == []


@pytest.mark.parametrize("gpu", [True, False])
def test_a_loader_handed_to_a_trainer_of_a_module_that_runs_on_the_gpu_feeds_the_gpu(project: Path, gpu: bool) -> None:
    """``loader = DataLoader(...)`` handed to ``Coach(net, loader, args)``, whose module moves the model and every batch
    to the GPU: the loader feeds the GPU from pageable memory, in the training process (TD304, TD305 folded in). A
    coach that stays on the CPU is handed a loader with nothing to pin."""
    device = '"cuda" if torch.cuda.is_available() else "cpu"' if gpu else '"cpu"'
    write(project, {
        "coach.py": f"""\
            import torch
            import torch.nn as nn


            class Coach:
                def __init__(self, net, train_loader, args):
                    self.device = torch.device({device})
                    self.net = net.to(self.device)
                    self.train_loader = train_loader
                    self.opt = torch.optim.Adam(self.net.parameters())

                def fit(self):
                    self.net.train()
                    for xb, yb in self.train_loader:
                        xb, yb = xb.to(self.device), yb.to(self.device)
                        loss = nn.functional.mse_loss(self.net(xb), yb)
                        self.opt.zero_grad()
                        loss.backward()
                        self.opt.step()
            """,
        "run.py": """\
            import argparse
            import torch
            import torch.nn as nn
            from torch.utils.data import DataLoader, TensorDataset
            from coach import Coach

            args = argparse.ArgumentParser().parse_args()
            data = TensorDataset(torch.randn(256, 4), torch.randn(256, 1))
            loader = DataLoader(data, batch_size=32, shuffle=True)
            coach = Coach(nn.Linear(4, 1), loader, args)
            for epoch in range(5):
                coach.fit()
            """,
    })
    results = check_files(["run.py", "coach.py"], Settings(root=str(project), select=("TD304", "TD305")))
    assert codes(results, "run.py") == ([(9, "TD304"), (9, "TD305")] if gpu else [])


def test_a_model_method_that_every_caller_elsewhere_runs_without_grad(project: Path) -> None:
    write(project, {
        "head.py": """\
            import torch.nn as nn

            class Critic(nn.Module):
                def __init__(self, n):
                    super().__init__()
                    self.net = nn.Linear(n, 1)

                def forward(self, obs):
                    return self.net(obs)

                def estimate(self, obs):
                    self.eval()
                    return self.forward(obs)

                def score(self, obs):
                    self.eval()
                    return self.forward(obs)
            """,
        "agent.py": """\
            import torch
            from head import Critic

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            class Agent:
                def __init__(self):
                    self.critic = Critic(8).to(device)

                def value(self, obs):
                    return self.critic.estimate(obs)

                def rollout(self, observations):
                    with torch.no_grad():
                        return [self.value(o.to(device)) for o in observations]

                def report(self, obs):
                    return self.critic.score(obs.to(device))
            """,
    })
    results = check_files(["head.py", "agent.py"], Settings(root=str(project), select=("TD401",)))
    # ``estimate`` is reached under no_grad only (through ``value``); ``score`` with autograd on
    assert codes(results, "head.py") == [(17, "TD401")]


def test_own_kernels_reached_through_a_folder_the_script_puts_on_sys_path(project: Path) -> None:
    write(project, {
        "ops/setup.py": """\
            from setuptools import setup
            from torch.utils.cpp_extension import BuildExtension, CUDAExtension

            setup(name="ops", ext_modules=[CUDAExtension(name="ops._ext", sources=["src/knn.cpp", "src/knn.cu"])],
                  cmdclass={"build_ext": BuildExtension})
            """,
        "ops/ops_utils.py": """\
            import builtins

            try:
                import ops._ext as _ext
            except ImportError:
                if not getattr(builtins, "__OPS_SETUP__", False):
                    raise ImportError("build the ops first: python setup.py install")
            """,
        "ops/ops_modules.py": """\
            import torch.nn as nn
            import ops_utils

            class Grouper(nn.Module):
                def forward(self, xyz):
                    return xyz
            """,
        "models/head.py": """\
            import os
            import sys

            import torch

            BASE_DIR = os.path.dirname(os.path.abspath(__file__))
            ROOT_DIR = os.path.dirname(BASE_DIR)
            sys.path.append(os.path.join(ROOT_DIR, "ops"))
            from ops_modules import Grouper

            head = Grouper().cuda()
            points = torch.rand(2, 128, 3, device="cuda")
            """,
        "models/plain.py": """\
            import torch

            points = torch.rand(2, 128, 3, device="cuda")
            """,
    })
    results = check_files(["models/head.py", "models/plain.py", "ops/ops_modules.py"],
                          Settings(root=str(project), select=("TD101",)))
    # the kernels leave no CPU path to lose, through the folder on sys.path; a module without them has one
    assert codes(results, "head.py") == []
    assert codes(results, "plain.py") == [(3, "TD101")]


def test_an_eval_helper_reached_without_grad_on_every_path_here_and_elsewhere(project: Path) -> None:
    write(project, {
        "planner.py": """\
            import torch

            def forward_pass(net, seq):
                net.eval()
                return net(seq)[:, -1]

            def sample(net, seq):
                return torch.multinomial(forward_pass(net, seq).softmax(-1), 1)

            @torch.no_grad()
            def draw(net, seq, n):
                for _ in range(n):
                    seq = torch.cat([seq, sample(net, seq)], dim=1)
                return seq

            def score(net, seq):
                return forward_pass(net, seq).log_softmax(-1)

            def probe(net, seq):
                net.eval()
                return net(seq)
            """,
        "search.py": """\
            import torch
            from planner import probe, score

            @torch.no_grad()
            def beam(net, seq, steps):
                for _ in range(steps):
                    seq = torch.cat([seq, score(net, seq).argmax(-1, keepdim=True)], dim=1)
                return seq

            def look(net, seq):
                return probe(net, seq)
            """,
    })
    results = check_files(["planner.py", "search.py"], Settings(root=str(project), select=("TD401",)))
    # ``forward_pass`` runs under no_grad on both paths (``draw`` here, ``beam`` in search.py); ``probe`` does not
    assert codes(results, "planner.py") == [(21, "TD401")]


def test_a_notebook_checked_with_the_modules_is_one_of_their_callers(project: Path) -> None:
    import json

    cells = [
        "import torch\nimport torch.nn as nn\nfrom torch.utils.data import TensorDataset\nfrom fitting import Fitter",
        "device = torch.device(0 if torch.cuda.is_available() else 'cpu')\nnet = nn.Linear(4, 2).to(device)",
        "ds = TensorDataset(torch.randn(256, 4), torch.randint(0, 2, (256,)))\nfitter = Fitter(net, device=device)\n"
        "fitter.attach(ds)\nfor epoch in range(3):\n    fitter.one_epoch(nn.CrossEntropyLoss())",
    ]
    notebook = {"nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": {"language": "python", "name": "python3"}},
                "cells": [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": c}
                          for c in cells]}
    write(project, {
        "fitting.py": """\
            import torch
            from torch.utils.data import DataLoader

            class Fitter:
                def __init__(self, net, device):
                    self.net, self.device = net, device
                    self.opt = torch.optim.Adam(net.parameters(), lr=1e-3)

                def attach(self, train_set):
                    self.loader = DataLoader(train_set, shuffle=True, batch_size=32, num_workers=2)

                def one_epoch(self, loss_fn):
                    for xb, yb in self.loader:
                        loss = loss_fn(self.net(xb.to(self.device)), yb.to(self.device))
                        self.opt.zero_grad()
                        loss.backward()
                        self.opt.step()
                        print(loss.item())
            """,
    })
    (project / "run.ipynb").write_text(json.dumps(notebook))
    results = check_files(["fitting.py", "run.ipynb"], Settings(root=str(project), select=("TD304", "TD603")))
    # the notebook hands the trainer a GPU device: its loader feeds a GPU, its step reads the loss every step
    assert codes(results, "fitting.py") == [(10, "TD304"), (18, "TD603")]
    alone = check_files(["fitting.py"], Settings(root=str(project), select=("TD304", "TD603")))
    assert codes(alone, "fitting.py") == []


@pytest.mark.parametrize("image_bytes", [1_000, 3_000_000])
def test_a_notebook_with_large_saved_outputs_is_still_read_as_a_caller(project: Path, image_bytes: int) -> None:
    """A GAN course notebook saves its generated images in its outputs (3.4 MB of JSON, 20 kB of code): its code, not
    its file size, decides whether the index reads it."""
    import json

    cells = ["import torch\nfrom helper_train import train_gan",
             "DEVICE = torch.device('cuda:0' if torch.cuda.is_available() else 'cpu')\n"
             "model = torch.nn.Linear(4, 1).to(DEVICE)\nopt = torch.optim.Adam(model.parameters())\n"
             "log = train_gan(model, opt, device=DEVICE, train_loader=[(torch.randn(8, 4), torch.ones(8, 1))])"]
    image = {"output_type": "display_data", "metadata": {}, "data": {"image/png": "A" * image_bytes}}
    notebook = {"nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": {"language": "python", "name": "python3"}},
                "cells": [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [image], "source": c}
                          for c in cells]}
    write(project, {
        "helper_train.py": """\
            import torch

            def train_gan(model, optimizer, device, train_loader):
                losses = []
                for features, targets in train_loader:
                    loss = torch.nn.functional.mse_loss(model(features.to(device)), targets.to(device))
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    losses.append(loss.item())
                return losses
            """,
    })
    (project / "dcgan.ipynb").write_text(json.dumps(notebook))
    assert (project / "dcgan.ipynb").stat().st_size > (2_000_000 if image_bytes > 1_000_000 else 0)
    results = check_files(["helper_train.py", "dcgan.ipynb"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "helper_train.py") == [(10, "TD603")]


def test_a_loss_class_of_another_module_gives_a_loss_with_its_graph(project: Path) -> None:
    write(project, {
        "lossmod.py": """\
            import torch
            import torch.nn as nn

            class PairLoss(nn.Module):
                def __init__(self, device):
                    super().__init__()
                    self.w = nn.Parameter(torch.tensor(10.0).to(device))

                def forward(self, emb):
                    return (self.w * emb).pow(2).mean()
            """,
        "train.py": """\
            import torch
            import torch.nn as nn
            from lossmod import PairLoss

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = nn.Linear(4, 2).to(device)
            crit = PairLoss(device)
            opt = torch.optim.SGD([*model.parameters(), *crit.parameters()], lr=0.1)
            batches = [torch.randn(8, 4) for _ in range(8)]
            for epoch in range(3):
                total_loss, total_kept = 0, 0
                for x in batches:
                    loss = crit(model(x.to(device)))
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    total_loss = total_loss + loss
                    total_kept = total_kept + loss.item()
            """,
    })
    settings = Settings(root=str(project), select=("TD405",))
    results = check_files(["lossmod.py", "train.py"], settings)
    assert codes(results, "train.py") == [(17, "TD405")]


def test_a_tests_py_of_pytest_functions_is_test_code(project: Path) -> None:
    body = """\
        import torch
        import torch.nn as nn

        class Attn(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.proj = nn.Linear(d, d)
                self.drop = nn.Dropout(0.1)

            def forward(self, x):
                return self.drop(self.proj(x))

        def test_cached_matches_uncached():
            att = Attn(8)
            att.eval()
            x = torch.randn(1, 6, 8)
            assert torch.allclose(att(x), att(x))
        """
    write(project, {"ch04/tests.py": body, "ch04/demo.py": body.replace("def test_", "def check_") + "check_cached_matches_uncached()\n"})
    settings = Settings(root=str(project), select=("TD401",))
    results = check_files(["ch04/tests.py", "ch04/demo.py"], settings)
    assert codes(results, "tests.py") == []  # (a file pytest-style tests fill: test code, not judged)
    assert codes(results, "demo.py") == [(17, "TD401"), (17, "TD401")]  # (both forwards of the line)


def test_a_data_parallel_subclass_of_another_module(project: Path) -> None:
    write(project, {
        "utils/__init__.py": "",
        "utils/data_parallel.py": """\
            import torch.nn as nn
            from torch.nn.parallel import DataParallel

            class BalancedDataParallel(DataParallel):
                def __init__(self, gpu0_bsz, *args, **kwargs):
                    self.gpu0_bsz = gpu0_bsz
                    super().__init__(*args, **kwargs)

            class DictGatherDataParallel(nn.DataParallel):
                pass

            class UserScatteredDataParallel(DictGatherDataParallel):
                pass

            class ModelParallel(nn.Module):
                pass
            """,
        "train.py": """\
            import torch
            import torch.nn as nn
            from utils.data_parallel import BalancedDataParallel, ModelParallel, UserScatteredDataParallel

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = nn.Linear(8, 2).to(device)
            para = BalancedDataParallel(4, model, dim=1).to(device)
            seg = UserScatteredDataParallel(nn.Linear(8, 2), device_ids=[0, 1]).to(device)
            pipe = ModelParallel()
            """,
    })
    settings = Settings(root=str(project), select=("TD204",))
    results = check_files(["utils/data_parallel.py", "train.py"], settings)
    assert codes(results, "train.py") == [(7, "TD204"), (8, "TD204")]
    assert [f.location.line for f in check_file("train.py", settings).findings] == [7, 8]  # pre-commit, alone


def test_loaders_handed_to_a_gpu_trainer_a_package_re_exports(project: Path) -> None:
    write(project, {
        "pkg/__init__.py": "",
        "pkg/trainer/__init__.py": "from .pretrain import Trainer\n",
        "pkg/trainer/pretrain.py": """\
            import torch
            import torch.nn as nn

            class Trainer:
                def __init__(self, model, train_dataloader, test_dataloader=None):
                    self.device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
                    self.model = model.to(self.device)
                    self.train_data, self.test_data = train_dataloader, test_dataloader
                    self.optim = torch.optim.Adam(self.model.parameters())

                def train(self, epoch):
                    for x, y in self.train_data:
                        loss = nn.functional.cross_entropy(self.model(x.to(self.device)), y.to(self.device))
                        self.optim.zero_grad()
                        loss.backward()
                        self.optim.step()
            """,
        "pkg/__main__.py": """\
            import torch
            import torch.nn as nn
            from torch.utils.data import DataLoader, TensorDataset
            from .trainer import Trainer

            def main(test=True):
                ds = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
                train_loader = DataLoader(ds, batch_size=32, num_workers=4)
                test_loader = DataLoader(ds, batch_size=32, num_workers=4) if test else None
                trainer = Trainer(nn.Linear(8, 2), train_dataloader=train_loader, test_dataloader=test_loader)
                for epoch in range(3):
                    trainer.train(epoch)
            """,
    })
    settings = Settings(root=str(project), select=("TD304",))
    results = check_files(["pkg/__init__.py", "pkg/trainer/__init__.py", "pkg/trainer/pretrain.py", "pkg/__main__.py"],
                          settings)
    assert codes(results, "__main__.py") == [(8, "TD304"), (9, "TD304")]


def test_the_own_cuda_of_a_plain_class_made_by_its_factory_method(project: Path) -> None:
    write(project, {
        "reader.py": """\
            import torch.nn as nn

            class Reader:
                def __init__(self):
                    self.net = nn.Linear(4, 2)

                @staticmethod
                def load(path):
                    return Reader()

                def cuda(self):
                    self.net = self.net.cuda()
            """,
        "train.py": """\
            import torch
            from reader import Reader

            class Pipeline:
                def __init__(self, path):
                    self.reader = Reader.load(path)
                    if torch.cuda.is_available():
                        self.reader.cuda()

            model = Reader.load("ckpt.pt")
            if torch.cuda.is_available():
                model.cuda()
            net = torch.nn.Linear(2, 2)
            net.cuda()
            """,
    })
    settings = Settings(root=str(project), select=("TD102",))
    results = check_files(["reader.py", "train.py"], settings)
    assert codes(results, "reader.py") == [(12, "TD102")]  # (the torch call inside the class's own cuda())
    assert codes(results, "train.py") == [(14, "TD102")]  # (DrQA's DocReader: its own cuda(), no torch .cuda())


def test_numpy_of_an_action_whose_callers_in_other_modules_turn_grad_off(project: Path) -> None:
    write(project, {
        "agent.py": """\
            import torch
            import torch.nn as nn

            class Agent:
                def __init__(self):
                    self.actor = nn.Linear(4, 2)

                def act(self, obs):
                    action = self.actor(torch.as_tensor(obs).float())
                    return action.cpu().numpy()

                def explore(self, obs):
                    return self.actor(torch.as_tensor(obs).float()).cpu().numpy()
            """,
        "train.py": """\
            import torch
            from agent import Agent

            agent = Agent()
            for step in range(100):
                with torch.no_grad():
                    action = agent.act([0.0] * 4)
                noisy = agent.explore([0.0] * 4)
            """,
    })
    settings = Settings(root=str(project), select=("TD501",))
    results = check_files(["agent.py", "train.py"], settings)
    assert codes(results, "agent.py") == [(13, "TD501")]  # (act: its every caller turns grad off; explore: not)


METER_MODULE = """\
import torch


class Meter:
    def __init__(self):
        self.values = {}

    def update(self, **kwargs):
        for k, v in kwargs.items():
            if isinstance(v, torch.Tensor):
                v = v.item()
            self.values[k] = v
"""

METER_TRAIN = """\
import torch
from torch.utils.data import DataLoader, TensorDataset
from logger import Meter


def train(model, opt, loader, device, wandb_logger, log_writer):
    meter = Meter()
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        acc = (out.argmax(-1) == y).float().mean()
        meter.update(acc=acc)
        max_lr = 0.0
        for group in opt.param_groups:
            max_lr = max(max_lr, group["lr"])
        if log_writer is not None:
            log_writer.update(acc=acc, head="loss")
            log_writer.set_step()
        BETWEEN
        if wandb_logger:
            if acc:
                wandb_logger._wandb.log({"acc": acc}, commit=False)


device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
net = torch.nn.Linear(4, 3).to(device)
loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randint(0, 3, (64,))), batch_size=8, num_workers=2,
                    pin_memory=True)
train(net, torch.optim.SGD(net.parameters(), lr=0.1), loader, device, None, None)
"""


@pytest.mark.parametrize(("between", "expected"), [("pass", [(16, "TD603")]),
                                                   ("acc = acc * net(x).mean()", [(16, "TD603"), (25, "TD603")])],
                         ids=["host-work-only", "a-forward-between"])
def test_a_tensor_tested_after_a_meter_of_another_module_read_it_waits_for_nothing(
        project: Path, between: str, expected: list) -> None:
    """ConvNeXt's engine: ``metric_logger.update(class_acc=class_acc)``, whose ``update`` calls ``.item()`` in another
    module, reads the accuracy back (reported there); then Python's ``max`` of learning rates, a TensorBoard logger's
    update, and ``if class_acc:`` with only host work between: the test waits for nothing. A forward between queues
    new GPU work, which the test then waits for."""
    write(project, {"logger.py": METER_MODULE, "train.py": METER_TRAIN.replace("BETWEEN", between)})
    settings = Settings(root=str(project), select=("TD603",))
    assert codes(check_files(["logger.py", "train.py"], settings), "train.py") == expected


NCSN_RUNNER = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


class Runner:
    def __init__(self, config):
        self.config = config

    def train(self):
        loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, num_workers=4)
        model = torch.nn.Linear(4, 1).to(self.config.device)
        opt = torch.optim.Adam(model.parameters())
        for x, y in loader:
            x, y = x.to(self.config.device), y.to(self.config.device)
            loss = (model(x) - y).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
"""

NCSN_MAIN = """\
import argparse
import torch
from runners import *


def parse_args_and_config():
    args = argparse.Namespace(seed=1)
    new_config = argparse.Namespace(lr=0.1)
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device(CPU)
    new_config.device = device
    return args, new_config


def main():
    args, config = parse_args_and_config()
    Runner(config).train()


if __name__ == "__main__":
    main()
"""


def test_a_config_given_a_cuda_choice_and_returned_reaches_a_runner_through_its_package(project: Path) -> None:
    """ncsnv2: ``parse_args_and_config()`` sets ``new_config.device = device`` (a CUDA choice) and returns it; ``main``
    hands ``config`` to ``NCSNRunner``, which ``runners/__init__.py`` re-exports with a star import and which moves
    every batch to ``self.config.device``: its unpinned loader feeds the GPU."""
    write(project, {"runners/__init__.py": "from runners.runner import *\n", "runners/runner.py": NCSN_RUNNER,
                    "main.py": NCSN_MAIN.replace("CPU", '"cpu"')})
    settings = Settings(root=str(project), select=("TD304",))
    assert codes([check_file("runners/runner.py", settings)], "runner.py") == [(10, "TD304")]
    assert codes(check_files(["main.py", "runners/__init__.py", "runners/runner.py"], settings), "runner.py") == \
        [(10, "TD304")]


def test_a_runner_handed_a_config_with_no_device_stays_quiet(project: Path) -> None:
    main = NCSN_MAIN.replace("    new_config.device = device\n", "")
    write(project, {"runners/__init__.py": "from runners.runner import *\n", "runners/runner.py": NCSN_RUNNER,
                    "main.py": main.replace("CPU", '"cpu"')})
    settings = Settings(root=str(project), select=("TD304",))
    assert codes(check_files(["main.py", "runners/__init__.py", "runners/runner.py"], settings), "runner.py") == []


REDUCE_UTILS = """\
import torch
import torch.distributed as dist


def get_world_size():
    return dist.get_world_size() if dist.is_initialized() else 1


def reduce_value(value, average=True):
    world_size = get_world_size()
    if world_size < 2:
        return value
    with torch.no_grad():
        dist.all_reduce(value)
        if average:
            value /= world_size
        return value
"""

REDUCE_TRAIN = """\
import sys
import torch
from dist_utils import reduce_value


def train_one_epoch(model, optimizer, loader, device):
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        loss = reduce_value(loss, average=True)
        if not torch.isfinite(loss):
            sys.exit(1)
        optimizer.step()
        optimizer.zero_grad()


if __name__ == "__main__":
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    net = torch.nn.Linear(4, 3).to(device)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4), torch.randint(0, 3, (8,))),
                                       batch_size=2, pin_memory=True, num_workers=2)
    train_one_epoch(net, torch.optim.SGD(net.parameters(), lr=0.1), data, device)
"""


def test_a_loss_reduced_in_place_by_another_module_is_still_a_device_tensor(project: Path) -> None:
    """WZMIAOMIAO's train_multi_GPU: ``loss = reduce_value(loss, average=True)``, whose helper all-reduces its argument
    in place, divides it and returns it (or returns it at once with one process): the per-step ``if not
    torch.isfinite(loss):`` after it still reads a device tensor."""
    write(project, {"dist_utils.py": REDUCE_UTILS, "train.py": REDUCE_TRAIN})
    settings = Settings(root=str(project), select=("TD603",))
    assert codes(check_files(["dist_utils.py", "train.py"], settings), "train.py") == [(11, "TD603")]
    assert codes([check_file("train.py", settings)], "train.py") == [(11, "TD603")]


BASE_TRAINERS = """\
import torch


class Trainer:
    def __init__(self, model, train_loader, args):
        self.device = torch.device("cuda" if torch.cuda.is_available() and not args.no_cuda else "cpu")
        self.model = model.to(self.device)
        self.loader = train_loader
        self.optim = torch.optim.Adam(self.model.parameters())

    def train(self, epoch):
        self.iteration(epoch, self.loader)

    def iteration(self, epoch, loader, train=True):
        raise NotImplementedError


class RecTrainer(Trainer):
    def iteration(self, epoch, loader, train=True):
        self.model.train()
        for batch in loader:
            x, y = (t.to(self.device) for t in batch)
            loss = (self.model(x) - y).pow(2).mean()
            self.optim.zero_grad()
            loss.backward()
            self.optim.step()
"""

BASE_MAIN = """\
import argparse
import torch
from torch.utils.data import DataLoader, TensorDataset, RandomSampler
from trainers import RecTrainer

parser = argparse.ArgumentParser()
parser.add_argument("--no_cuda", action="store_true")
args = parser.parse_args()
ds = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
train_loader = DataLoader(ds, sampler=RandomSampler(ds), batch_size=8, pin_memory=True)
trainer = RecTrainer(torch.nn.Linear(4, 1), train_loader, args)
for epoch in range(10):
    trainer.train(epoch)
"""


def test_a_loader_handed_to_a_trainer_whose_subclass_trains_in_an_override_is_td305(project: Path) -> None:
    """ICLRec: ``trainer = RecTrainer(model, train_loader, args)``, then ``trainer.train(epoch)``, a method of the base
    class ``Trainer`` whose ``self.iteration(...)`` the subclass overrides with the backward: the loader feeds a
    training loop, so its ``num_workers=0`` is TD305. (The inherited method is found on the subclass.)"""
    write(project, {"trainers.py": BASE_TRAINERS, "main.py": BASE_MAIN})
    settings = Settings(root=str(project), select=("TD305",))
    assert codes(check_files(["main.py", "trainers.py"], settings), "main.py") == [(10, "TD305")]
    no_backward = BASE_TRAINERS.replace("            loss.backward()\n", "")
    write(project, {"trainers.py": no_backward})
    assert codes(check_files(["main.py", "trainers.py"], settings), "main.py") == []


DIST_INIT_HELPER = """\
import os
import torch
import torch.distributed as dist


def init_distributed_mode(args):
    args.gpu = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(args.gpu)
    args.dist_backend = "nccl"
    dist.init_process_group(backend=args.dist_backend, init_method="env://")
"""

GPU_ONLY_LAUNCHER = """\
import argparse
import torch
from util.dist import init_distributed_mode


def main(args):
    if torch.cuda.is_available() is False:
        raise EnvironmentError("this script needs GPUs")
    init_distributed_mode(args)
    model = torch.nn.Linear(4, 2).to(args.gpu)
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.gpu])


if __name__ == "__main__":
    main(argparse.Namespace())
"""


@pytest.mark.parametrize(("second", "expected"), [(None, []), (GPU_ONLY_LAUNCHER.replace(
    '    if torch.cuda.is_available() is False:\n        raise EnvironmentError("this script needs GPUs")\n', ""),
    [(10, "TD704")])],
                         ids=["every-caller-refuses", "one-caller-does-not"])
def test_nccl_in_a_helper_whose_every_caller_stops_without_a_gpu_is_quiet(project: Path, second, expected) -> None:
    """WZMIAOMIAO's ``*_using_launch.py``: ``main()`` raises without CUDA (``if torch.cuda.is_available() is False:``),
    then calls ``init_distributed_mode(args)`` of another module, which hard-codes NCCL: the path is GPU-only by the
    author's word. A second launcher that calls the
    helper without that check still gets the finding."""
    write(project, {"util/__init__.py": "", "util/dist.py": DIST_INIT_HELPER, "train.py": GPU_ONLY_LAUNCHER,
                    **({"train_cpu.py": second} if second else {})})
    settings = Settings(root=str(project), select=("TD704",))
    files = ["util/dist.py", "train.py", *(["train_cpu.py"] if second else [])]
    assert codes(check_files(files, settings), "dist.py") == expected
    assert codes([check_file("util/dist.py", settings)], "dist.py") == expected


def test_nccl_in_a_helper_a_package_re_exports_to_launchers_that_stop_without_a_gpu_is_quiet(project: Path) -> None:
    """WZMIAOMIAO's mini_imagenet: the launcher imports the helper through its package (``from multi_train_utils
    import init_distributed_mode``, re-exported by the package's ``__init__.py``)."""
    launcher = GPU_ONLY_LAUNCHER.replace("from util.dist import", "from util import")
    write(project, {"util/__init__.py": "from .dist import init_distributed_mode\n", "util/dist.py": DIST_INIT_HELPER,
                    "train.py": launcher})
    settings = Settings(root=str(project), select=("TD704",))
    assert codes(check_files(["util/dist.py", "util/__init__.py", "train.py"], settings), "dist.py") == []
    assert codes([check_file("util/dist.py", settings)], "dist.py") == []


HOOK_BASE = """\
import torch
from nets import Net


class Model:
    def __init__(self, config=None):
        self.device = config.device
        self.declare_networks()
        self.model = self.model.to(self.device)

    def declare_networks(self):
        self.model = Net()

    def step(self, x):
        return self.model(torch.tensor(x, device=self.device))
"""

HOOK_SUBCLASS = """\
import torch
from agents.base import Model as BaseAgent
from nets import CatNet


class Model(BaseAgent):
    def __init__(self, config=None):
        self.support = torch.linspace(0, 1, 51).to(config.device)
        super(Model, self).__init__(config=config)

    def declare_networks(self):
        self.model = CatNet()

    def act(self, s):
        x = torch.tensor([s], device=self.device)
        return (self.model(x) * self.support).sum()
"""

HOOK_NETS = """\
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 2)

    def forward(self, x):
        return self.l(x)


class CatNet(Net):
    pass
"""


@pytest.mark.parametrize(("base", "expected"), [(HOOK_BASE, []),
                                                (HOOK_BASE.replace("        self.model = self.model.to(self.device)\n", ""),
                                                 [(12, "TD201")])], ids=["base-moves-it", "nothing-moves-it"])
def test_a_model_a_subclass_hook_builds_and_its_base_class_moves_is_moved(project: Path, base: str, expected) -> None:
    """DeepRL-Tutorials' agents: ``BaseAgent.__init__`` (another module) calls ``self.declare_networks()`` and then
    ``self.model = self.model.to(self.device)``; the subclass overrides the hook with ``self.model = CatNet()``. The
    model is moved, by the base class. Without that move, TD201 stands."""
    write(project, {"nets.py": HOOK_NETS, "agents/__init__.py": "", "agents/base.py": base, "agents/cat.py": HOOK_SUBCLASS})
    settings = Settings(root=str(project), select=("TD201",))
    assert codes(check_files(["nets.py", "agents/base.py", "agents/cat.py"], settings), "cat.py") == expected
    assert codes([check_file("agents/cat.py", settings)], "cat.py") == expected


def test_a_tensor_dataset_of_tensors_another_module_moved_needs_no_pinning(project: Path) -> None:
    """A traffic forecaster cuts its series into windows with a helper of its data module, which hands back
    ``torch.Tensor(x).to(device), torch.Tensor(y).to(device)``: the TensorDataset holds device tensors, so pinning
    would fail and TD304 stays quiet. A helper that hands back host tensors leaves the loader's TD304."""
    write(project, {
        "windows.py": """\
            import numpy as np
            import torch

            def to_windows(series, n_his, device):
                x = np.stack([series[i:i + n_his] for i in range(len(series) - n_his)])
                y = series[n_his:]
                return torch.Tensor(x).to(device), torch.Tensor(y).to(device)

            def to_host_windows(series, n_his):
                x = np.stack([series[i:i + n_his] for i in range(len(series) - n_his)])
                return torch.Tensor(x), torch.Tensor(series[n_his:])
            """,
        "main.py": """\
            import numpy as np
            import torch
            from torch.utils.data import DataLoader, TensorDataset
            import windows

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            series = np.random.rand(1000).astype("float32")
            x_train, y_train = windows.to_windows(series, 12, device)
            train_iter = DataLoader(TensorDataset(x_train, y_train), batch_size=32, shuffle=True)
            x_val, y_val = windows.to_host_windows(series, 12)
            val_iter = DataLoader(TensorDataset(x_val, y_val), batch_size=32)
            model = torch.nn.Linear(12, 1).to(device)
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            for xb, yb in train_iter:
                loss = torch.nn.functional.mse_loss(model(xb).squeeze(1), yb)
                opt.zero_grad()
                loss.backward()
                opt.step()
            with torch.no_grad():
                model.eval()
                for xb, yb in val_iter:
                    print(model(xb.to(device)).shape)
            """,
    })
    results = check_files(["windows.py", "main.py"], Settings(root=str(project), select=("TD304",)))
    assert codes(results, "main.py") == [(11, "TD304")]


@pytest.mark.parametrize("files", [("pretrain.py", "finetune.py", "models/encoder.py"), ("pretrain.py", "finetune.py")])
def test_saves_a_reader_of_the_program_requires_by_a_prefixed_key_keep_the_prefix(project: Path, files) -> None:
    """An audio model's pretraining script saves its DataParallel wrapper's ``state_dict()``, and the model class
    that fine-tuning builds reads that file by ``sd["module.patch.proj.weight"]``, raising without the prefix: the
    prefix is the program's own checkpoint format, so TD205 stays quiet there, as it does in the reader's own demo.
    The fine-tuning script, which loads checkpoints back itself, keeps its finding; without the reader, both do."""
    write(project, {
        "models/encoder.py": """\
            import torch
            from torch import nn

            class Encoder(nn.Module):
                def __init__(self, fdim=16, ckpt=None):
                    super().__init__()
                    if ckpt is not None:
                        sd = torch.load(ckpt, map_location="cpu", weights_only=True)
                        fdim = sd["module.patch.proj.weight"].shape[1]
                    self.proj = nn.Linear(fdim, 8)

            if __name__ == "__main__":
                enc = nn.DataParallel(Encoder())
                torch.save(enc.state_dict(), "demo.pth")
            """,
        "pretrain.py": """\
            import torch
            from torch import nn
            from models.encoder import Encoder

            model = nn.DataParallel(Encoder()).cuda()
            torch.save(model.state_dict(), "pretrained.pth")
            """,
        "finetune.py": """\
            import torch
            from torch import nn
            from models.encoder import Encoder

            model = nn.DataParallel(Encoder(ckpt="pretrained.pth")).cuda()
            model.load_state_dict(torch.load("best.pth", map_location="cpu", weights_only=True))
            torch.save(model.state_dict(), "best.pth")
            """,
    })
    results = check_files(list(files), Settings(root=str(project), select=("TD205",)))
    reader = "models/encoder.py" in files
    assert codes(results, "pretrain.py") == ([] if reader else [(6, "TD205")])
    assert codes(results, "finetune.py") == [(7, "TD205")]
    assert codes(results, "encoder.py") == []


def test_a_converter_that_builds_prefixed_keys_makes_the_prefix_the_programs_format(project: Path) -> None:
    """``utils/convert.py`` reads the training checkpoint by ``ckpt["model"]["module." + key]``: the program's own
    converter requires the DDP prefix, so the training script's save of the wrapper's ``state_dict()`` is quiet."""
    train = """\
        import torch
        from torch import nn

        model = nn.DataParallel(nn.Linear(4, 4)).cuda()
        torch.save({"model": model.state_dict()}, "medsam_model_best.pth")
        """
    write(project, {"train.py": train, "utils/convert.py": """\
        import torch

        sam = torch.load("sam.pth", weights_only=True)
        medsam = torch.load("medsam_model_best.pth", weights_only=True)
        for key in sam.keys():
            sam[key] = medsam["model"]["module." + key]
        torch.save(sam, "converted.pth")
        """})
    results = check_files(["train.py", "utils/convert.py"], Settings(root=str(project), select=("TD205",)))
    assert codes(results, "train.py") == []
    (project / "utils" / "convert.py").unlink()
    assert codes(check_files(["train.py"], Settings(root=str(project), select=("TD205",))), "train.py") == [(5, "TD205")]


def test_a_branch_of_a_loss_that_no_caller_in_the_project_chooses_is_quiet(project: Path) -> None:
    """A robust-training loss module offers ``distance="l_inf"`` (the default) and ``"l_2"``; every training script
    calls it with the default or ``distance="l_inf"``: the ``elif distance == "l_2":`` branch's host draw and its
    test of a device tensor never run (TD611, TD603 quiet there). The draw before the branch runs on every step."""
    write(project, {
        "robust.py": """\
            import torch
            import torch.nn.functional as F

            def robust_loss(model, x, y, steps=10, distance="l_inf"):
                x_adv = x.detach() + 0.001 * torch.randn(x.shape).cuda()
                if distance == "l_inf":
                    for _ in range(steps):
                        x_adv = x_adv + 0.01 * torch.sign(x_adv)
                elif distance == "l_2":
                    delta = 0.001 * torch.randn(x.shape).cuda()
                    for _ in range(steps):
                        norms = delta.view(len(x), -1).norm(p=2, dim=1)
                        if (norms == 0).any():
                            delta = delta + 1e-3
                    x_adv = x + delta
                return F.cross_entropy(model(x_adv), y)
            """,
        "train_a.py": """\
            import torch
            from robust import robust_loss

            def train(model, loader, opt):
                for x, y in loader:
                    x, y = x.cuda(), y.cuda()
                    loss = robust_loss(model, x, y, distance="l_inf")
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            """,
        "train_b.py": """\
            import torch
            from robust import robust_loss

            def train(model, loader, opt):
                for x, y in loader:
                    x, y = x.cuda(), y.cuda()
                    loss = robust_loss(model, x, y, steps=5)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            """,
    })
    results = check_files(["robust.py", "train_a.py", "train_b.py"],
                          Settings(root=str(project), select=("TD603", "TD611")))
    assert codes(results, "robust.py") == [(5, "TD611")]
    write(project, {"train_c.py": """\
        from robust import robust_loss

        def train(model, loader, opt):
            for x, y in loader:
                loss = robust_loss(model, x.cuda(), y.cuda(), distance="l_2")
                loss.backward()
        """})
    results = check_files(["robust.py", "train_a.py", "train_b.py", "train_c.py"],
                          Settings(root=str(project), select=("TD603", "TD611")))
    assert codes(results, "robust.py") == [(5, "TD611"), (10, "TD611"), (13, "TD603")]


def test_a_helper_a_generation_loop_of_another_module_calls_through_star_imports_makes_its_draws_each_pass(
        project: Path) -> None:
    """A graph generator's test loop runs the RNN on every node step and samples the next step with
    ``sample_bits(y, sample=True)`` of the model module, which the script reaches through ``from utils import *``,
    ``from model import *``: the draws the helper makes on the CPU and copies with ``.cuda()`` are made on every
    pass, its own loop over the batch's rows included (TD611). The ``else`` of ``if sample:`` never runs: every
    call passes ``sample=True``."""
    write(project, {
        "utils.py": """\
            import os

            def ensure_dir(path):
                os.makedirs(path, exist_ok=True)
            """,
        "model.py": """\
            import torch

            def sample_bits(y, sample=True, thresh=0.5, times=1):
                y = torch.sigmoid(y)
                if sample:
                    if times > 1:
                        out = torch.rand(y.size(0), y.size(1)).cuda()
                        for i in range(out.size(0)):
                            draw = torch.rand(y.size(1)).cuda()
                            out[i] = torch.gt(y[i], draw).float()
                    else:
                        out = torch.gt(y, torch.rand(y.size()).cuda()).float()
                else:
                    out = torch.gt(y, torch.ones(y.size()).cuda() * thresh).float()
                return out
            """,
        "train.py": """\
            import torch
            from utils import *
            from model import *

            def generate(rnn, head, steps, n):
                ensure_dir("out")
                rnn.eval()
                x = torch.ones(n, 1, 8).cuda()
                with torch.no_grad():
                    for i in range(steps):
                        h = rnn(x)
                        x = sample_bits(head(h), sample=True, times=2)
                return x
            """,
    })
    results = check_files(["utils.py", "model.py", "train.py"], Settings(root=str(project), select=("TD611",)))
    assert codes(results, "model.py") == [(7, "TD611"), (9, "TD611"), (12, "TD611")]


def test_a_branch_another_module_may_choose_runs_though_the_file_s_own_call_takes_the_default(project: Path) -> None:
    """A PDE benchmark's ``run_training(training_type="autoregressive")`` runs with the default under its own
    ``if __name__ == "__main__":``, and the launcher of another module passes ``training_type=cfg.training_type``:
    the ``"single"`` branch may run, so its read stays reported (TD603)."""
    write(project, {
        "fno.py": """\
            import torch

            def run_training(loader, model, optimizer, training_type="autoregressive"):
                total = 0.0
                for x, y in loader:
                    x, y = x.cuda(), y.cuda()
                    if training_type == "single":
                        loss = torch.nn.functional.mse_loss(model(x), y)
                        total += loss.item()
                    else:
                        loss = torch.nn.functional.mse_loss(model(model(x)), y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                return total

            if __name__ == "__main__":
                run_training([], torch.nn.Linear(2, 2).cuda(), None)
            """,
        "launch.py": """\
            from fno import run_training

            def main(cfg, loader, model, optimizer):
                run_training(loader, model, optimizer, training_type=cfg.training_type)
            """,
    })
    results = check_files(["fno.py", "launch.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "fno.py") == [(9, "TD603")]
    alone = check_files(["fno.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(alone, "fno.py") == [(9, "TD603")]


def test_workers_of_a_loader_factory_in_a_module_on_the_gpu_through_its_callers_device(project: Path) -> None:
    """A federated-learning benchmark's utilities module makes the loaders (``get_dataloader``) and evaluates with
    ``compute_accuracy(net, loader, device=device)``; the experiment script reaches both through star imports and
    trains on ``cuda:0``. The utilities module runs on the GPU through its callers' device, and its loaders feed
    the importer's training: no workers there is TD305 (with TD304), as for a factory module of no device."""
    write(project, {
        "utils.py": """\
            import torch
            from torch.utils import data

            def get_dataloader(train_ds, test_ds, bs):
                train_dl = data.DataLoader(dataset=train_ds, batch_size=bs, shuffle=True)
                test_dl = data.DataLoader(dataset=test_ds, batch_size=32)
                return train_dl, test_dl

            def compute_accuracy(net, loader, device="cpu"):
                correct = 0
                with torch.no_grad():
                    for x, y in loader:
                        x, y = x.to(device), y.to(device)
                        correct += (net(x).argmax(1) == y).sum()
                return correct
            """,
        "model.py": """\
            import torch.nn as nn

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(4, 2)

                def forward(self, x):
                    return self.fc(x)
            """,
        "experiments.py": """\
            import torch
            from model import *
            from utils import *

            device = torch.device("cuda:0")
            net = Net().to(device)
            opt = torch.optim.SGD(net.parameters(), lr=0.1)
            train_dl, test_dl = get_dataloader([], [], 64)
            for x, y in train_dl:
                x, y = x.to(device), y.to(device)
                loss = torch.nn.functional.cross_entropy(net(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            print(compute_accuracy(net, test_dl, device=device))
            """,
    })
    results = check_files(["utils.py", "model.py", "experiments.py"], Settings(root=str(project), select=("TD304", "TD305")))
    assert codes(results, "utils.py") == [(5, "TD304"), (5, "TD305"), (6, "TD304"), (6, "TD305")]


def test_a_per_step_loss_that_runs_the_model_in_a_loop_of_its_own_still_draws_each_step(project: Path) -> None:
    """An adversarial-training loss of another module starts from ``x + 0.001 * torch.randn(x.shape).cuda()`` and
    runs the model in its own attack loop; the training loop calls it on every batch: the draw is made on every
    step (TD611), though the helper loops the model itself. A generation loop calling a whole-run helper (one that
    loops the model itself) makes its draw once a run."""
    write(project, {
        "attack.py": """\
            import torch
            import torch.nn.functional as F

            def robust_loss(model, x, y, steps=10):
                x_adv = x.detach() + 0.001 * torch.randn(x.shape).cuda()
                for _ in range(steps):
                    x_adv.requires_grad_()
                    grad = torch.autograd.grad(F.cross_entropy(model(x_adv), y), [x_adv])[0]
                    x_adv = x_adv.detach() + 0.01 * torch.sign(grad)
                return F.cross_entropy(model(x_adv), y)

            def sample_run(model, n):
                z = torch.randn(n, 4).cuda()
                for _ in range(8):
                    z = model(z)
                return z
            """,
        "train.py": """\
            import torch
            from attack import robust_loss, sample_run

            def train(model, loader, opt):
                for x, y in loader:
                    x, y = x.cuda(), y.cuda()
                    loss = robust_loss(model, x, y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()

            def show(model):
                with torch.no_grad():
                    for i in range(100):
                        print(model(sample_run(model, 4)).sum())
            """,
    })
    results = check_files(["attack.py", "train.py"], Settings(root=str(project), select=("TD611",)))
    assert codes(results, "attack.py") == [(5, "TD611")]


def test_cuda_in_a_helper_every_caller_calls_after_asserting_a_gpu_is_gpu_only_code(project: Path) -> None:
    """A course's helpers module evaluates with ``model.eval().cuda()``; the only script that calls it starts
    ``main()`` with ``assert torch.cuda.is_available()``: the program declares it needs a GPU, so the hard-coded
    CUDA is no crash without one (TD102 stays). A second caller that asserts nothing leaves TD101."""
    write(project, {
        "helpers.py": """\
            import torch

            def eval_model(model, loader):
                model = model.eval().cuda()
                correct = 0
                with torch.no_grad():
                    for x, y in loader:
                        correct += (model(x.cuda()).argmax(1) == y.cuda()).sum()
                return correct
            """,
        "run.py": """\
            import torch
            import helpers

            def main():
                assert torch.cuda.is_available(), "this course needs a GPU"
                model = torch.nn.Linear(4, 2)
                print(helpers.eval_model(model, []))

            if __name__ == "__main__":
                main()
            """,
    })
    results = check_files(["helpers.py", "run.py"], Settings(root=str(project), select=("TD101", "TD102")))
    assert sorted({code for _, code in codes(results, "helpers.py")}) == ["TD102"]
    write(project, {"other.py": """\
        import torch
        import helpers

        print(helpers.eval_model(torch.nn.Linear(4, 2), []))
        """})
    results = check_files(["helpers.py", "run.py", "other.py"], Settings(root=str(project), select=("TD101", "TD102")))
    assert "TD101" in {code for _, code in codes(results, "helpers.py")}


def test_a_loss_class_whose_init_keeps_a_mask_its_own_method_moved_is_moved(project: Path) -> None:
    """A contrastive loss class of another module keeps ``self.mask = self._make_mask()``, whose ``return
    mask.to(self.device)`` puts it on the device, beside parameterless parts: built in the loop, it needs no move
    (TD201 quiet). A mask kept on the host by the same helper leaves the loss unmoved."""
    loss = """\
        import numpy as np
        import torch

        class PairLoss(torch.nn.Module):
            def __init__(self, device, n):
                super().__init__()
                self.n, self.device = n, device
                self.mask = self._make_mask().type(torch.bool)
                self.criterion = torch.nn.CrossEntropyLoss(reduction="sum")

            def _make_mask(self):
                return torch.from_numpy(1 - np.eye(2 * self.n)).bool()MOVE

            def forward(self, a, b):
                logits = (a @ b.t())[self.mask].view(2 * self.n, -1)
                return self.criterion(logits, torch.zeros(2 * self.n, dtype=torch.long, device=a.device))
        """
    train = """\
        import torch
        from loss import PairLoss

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model = torch.nn.Linear(4, 4).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = torch.utils.data.DataLoader([], batch_size=4, pin_memory=True, num_workers=2)
        for x in loader:
            x = x.float().to(device)
            crit = PairLoss(device, 2)
            loss = crit(model(x), model(x))
            opt.zero_grad()
            loss.backward()
            opt.step()
        """
    write(project, {"loss.py": loss.replace("MOVE", ".to(self.device)"), "train.py": train})
    results = check_files(["loss.py", "train.py"], Settings(root=str(project), select=("TD201",)))
    assert codes(results, "train.py") == []
    write(project, {"loss.py": loss.replace("MOVE", "")})
    results = check_files(["loss.py", "train.py"], Settings(root=str(project), select=("TD201",)))
    assert codes(results, "train.py") == [(10, "TD201")]


def test_a_mask_class_of_another_module_that_attention_forwards_build_makes_its_mask_each_step(project: Path) -> None:
    """``utils/masking.py`` defines ``TriangularCausalMask``, whose ``__init__`` makes ``torch.triu(torch.ones(...))``
    on the CPU and moves it to the ``device`` it is given; the attention layers of another module build one in every
    forward with ``device=queries.device``: the mask is made and copied on every step (TD611, at the factory). A mask
    class no forward builds stays quiet."""
    write(project, {
        "utils/__init__.py": "",
        "utils/masking.py": """\
            import torch

            class TriangularCausalMask:
                def __init__(self, B, L, device="cpu"):
                    with torch.no_grad():
                        self._mask = torch.triu(torch.ones([B, 1, L, L], dtype=torch.bool), diagonal=1).to(device)

                @property
                def mask(self):
                    return self._mask

            class LengthMask:
                def __init__(self, L, device="cpu"):
                    self.mask = torch.ones(L, dtype=torch.bool).to(device)
            """,
        "layers.py": """\
            import torch.nn as nn
            from utils.masking import LengthMask, TriangularCausalMask

            class FullAttention(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.proj = nn.Linear(8, 8)
                    self.lengths = LengthMask(16)

                def forward(self, q):
                    B, L = q.shape[:2]
                    m = TriangularCausalMask(B, L, device=q.device)
                    return (self.proj(q) @ q.transpose(1, 2)).masked_fill(m.mask[:, 0], 0.0)
            """,
    })
    results = check_files(["utils/__init__.py", "utils/masking.py", "layers.py"],
                          Settings(root=str(project), select=("TD611",)))
    assert codes(results, "masking.py") == [(6, "TD611")]


def test_non_blocking_copies_of_a_loader_another_module_hands_in_unpinned(project: Path) -> None:
    """``run.py`` builds ``DataLoader(..., pin_memory=False)`` and hands it to ``traintest.train(model, train_loader)``,
    which copies each batch with ``non_blocking=True``: from pageable memory the copy is synchronous (TD306, naming
    where the loader is handed in). A pinned loader handed in leaves the copies alone."""
    run = """\
        import torch
        from torch.utils.data import DataLoader
        from traintest import train

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model = torch.nn.Linear(4, 2).to(device)
        train_loader = DataLoader([], batch_size=32, shuffle=True, num_workers=8, pin_memory=PIN)
        train(model, train_loader, device)
        """
    write(project, {
        "traintest.py": """\
            import torch

            def train(model, train_loader, device):
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                for x, y in train_loader:
                    x = x.to(device, non_blocking=True)
                    loss = torch.nn.functional.cross_entropy(model(x), y.to(device))
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            """,
        "run.py": run.replace("PIN", "False"),
    })
    results = check_files(["traintest.py", "run.py"], Settings(root=str(project), select=("TD306",)))
    assert codes(results, "traintest.py") == [(6, "TD306")]
    assert "run.py:8" in next(f.message for r in results for f in r.findings)
    write(project, {"run.py": run.replace("PIN", "True")})
    results = check_files(["traintest.py", "run.py"], Settings(root=str(project), select=("TD306",)))
    assert codes(results, "traintest.py") == []


def test_a_loss_class_of_another_module_holding_index_tensors_needs_no_move(project: Path) -> None:
    """A permutation-invariant loss of another module keeps its permutations as a list of index tuples and a
    ``torch.LongTensor`` of them, beside settings: no parameter, so a caller that moves only the batch leaves
    nothing behind (TD201 quiet). The same class holding a projection layer is a model never moved."""
    loss = """\
        import itertools
        import torch
        import torch.nn as nn

        class PITLoss(nn.Module):
            def __init__(self, batch_size=None, n_sources=None):
                super().__init__()
                self.bs = batch_size
                self.permutations = list(itertools.permutations(torch.arange(n_sources)))
                self.permutations_tensor = torch.LongTensor(self.permutations)
                self.n_sources = n_sourcesLAYER

            def forward(self, est, ref):
                return ((est - ref) ** 2).mean()
        """
    bench = """\
        import torch
        import losses

        def backward_pass(model, x, y, mode):
            opt = torch.optim.Adam(model.parameters(), lr=0.001)
            crit = losses.PITLoss(batch_size=4, n_sources=2)
            if mode == "gpu":
                x, y = x.cuda(), y.cuda()
            opt.zero_grad()
            crit(model(x), y).backward()
            opt.step()
        """
    write(project, {"losses.py": loss.replace("LAYER", ""), "bench.py": bench})
    results = check_files(["losses.py", "bench.py"], Settings(root=str(project), select=("TD201",)))
    assert codes(results, "bench.py") == []
    write(project, {"losses.py": loss.replace("LAYER", "\n                self.proj = nn.Linear(4, 4)")})
    results = check_files(["losses.py", "bench.py"], Settings(root=str(project), select=("TD201",)))
    assert codes(results, "bench.py") == [(6, "TD201")]


@pytest.mark.parametrize("option, expected", [
    ('"--gpu_mode", type=bool, default=True', [(8, "TD101"), (8, "TD102")]),  # ``bool("False")`` is True
    ('"--gpu_mode", action="store_true", default=True', [(8, "TD101"), (8, "TD102")]),
    ('"--gpu_mode", type=bool, default=False', [(8, "TD102")]),
    ('"--gpu_mode", type=int, default=1', [(8, "TD102")]),
])
def test_a_flag_copied_from_an_option_the_main_script_makes_always_true_chooses_nothing(
        project: Path, option: str, expected: list) -> None:
    """A GAN module copies ``self.gpu_mode = args.gpu_mode`` and moves its networks under ``if self.gpu_mode:``; the
    main script that imports it declares the option. Declared so that it is always True, the test is no fallback:
    the module hard-codes CUDA (TD101). An option the command line can turn off is the user's device choice."""
    write(project, {
        "gan.py": """\
            import torch.nn as nn

            class GAN:
                def __init__(self, args):
                    self.gpu_mode = args.gpu_mode
                    self.G = nn.Linear(8, 8)
                    if self.gpu_mode:
                        self.G.cuda()
            """,
        "main.py": f"""\
            import argparse
            from gan import GAN

            parser = argparse.ArgumentParser()
            parser.add_argument({option})
            GAN(parser.parse_args())
            """,
    })
    results = check_files(["gan.py", "main.py"], Settings(root=str(project), select=("TD101", "TD102")))
    assert codes(results, "gan.py") == expected


def test_a_helper_s_flag_branch_that_another_module_s_loop_leaves_off_is_not_made_every_step(project: Path) -> None:
    """DiffDock's ``set_time(..., include_misc=False)`` of a utility module is called on every sampling step by
    another module without the flag; only a once-off call passes it. Its unflagged copy is made every step (TD611),
    the flagged branch's is not, unless the loop's call turns the flag on."""
    write(project, {
        "utils.py": """\
            import torch

            def set_time(g, t, device, include_misc=False):
                g["t"] = t * torch.ones(g["x"].shape[0]).to(device)
                if include_misc:
                    g["misc_t"] = t * torch.ones(g["misc"].shape[0]).to(device)
            """,
        "sample.py": """\
            import torch
            from utils import set_time

            def sample(graphs, model, steps, device):
                model.eval()
                for g in graphs:
                    for t in range(steps):
                        set_time(g, t / steps, deviceFLAG)
                        with torch.no_grad():
                            g["x"] = model(g["x"])

            def affinity(g, model, device):
                set_time(g, 0.0, device, include_misc=True)
                with torch.no_grad():
                    return model(g["x"])

            if __name__ == "__main__":
                dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                net = torch.nn.Linear(3, 3).to(dev)
                sample([{"x": torch.randn(5, 3, device=dev), "misc": torch.randn(2, 3)}], net, 20, dev)
            """.replace("FLAG", ""),
    })
    results = check_files(["utils.py", "sample.py"], Settings(root=str(project), select=("TD611",)))
    assert codes(results, "utils.py") == [(4, "TD611")]
    write(project, {"sample.py": (project / "sample.py").read_text().replace("t / steps, device)", "t / steps, device, True)")})
    results = check_files(["utils.py", "sample.py"], Settings(root=str(project), select=("TD611",)))
    assert codes(results, "utils.py") == [(4, "TD611"), (6, "TD611")]


@pytest.mark.parametrize("default, expected", [('"cuda"', [(7, "TD304")]), ('"cpu"', [])])
def test_a_device_option_another_module_s_argument_parser_defaults_to_cuda_places_work_there(
        project: Path, default: str, expected: list) -> None:
    """ENet's ``args = get_arguments()`` comes from ``args.py``, whose ``--device`` defaults to ``"cuda"``; the script
    makes ``torch.device(args.device)`` and feeds its model from an unpinned loader (TD304). With a CPU default, the
    program is the CPU's."""
    write(project, {
        "opts.py": f"""\
            import argparse

            def get_arguments():
                parser = argparse.ArgumentParser()
                parser.add_argument("--device", default={default})
                return parser.parse_args()
            """,
        "main.py": """\
            import torch
            from torch.utils.data import DataLoader, TensorDataset
            from opts import get_arguments

            args = get_arguments()
            device = torch.device(args.device)
            loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,))), batch_size=8, num_workers=4)
            model = torch.nn.Linear(8, 2).to(device)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
                opt.zero_grad()
                loss.backward()
                opt.step()
            """,
    })
    results = check_files(["opts.py", "main.py"], Settings(root=str(project), select=("TD304",)))
    assert codes(results, "main.py") == expected


@pytest.mark.parametrize("script, expected", [
    ("model = torch.nn.Linear(8, 8).cuda()", [(12, "TD304")]),
    ("model = torch.nn.Linear(8, 8)", []),
])
def test_a_loader_factory_two_imports_away_from_the_gpu_script_feeds_it(project: Path, script: str, expected) -> None:
    """sudo_rm_rf's dataset modules return ``DataLoader(self, **params)`` from ``get_generator()`` (and call it in a
    shape self-test of their own); ``dataset_setup.py`` imports them and builds the generators; the training script
    imports that setup module and moves its model to the GPU. The factory feeds that GPU unpinned (TD304); with a
    CPU model nothing is told."""
    write(project, {
        "pkg/__init__.py": "",
        "pkg/wham.py": """\
            import torch

            class Dataset(torch.utils.data.Dataset):
                def __len__(self):
                    return 100

                def __getitem__(self, i):
                    return torch.randn(8), torch.randn(8)

                def get_generator(self, batch_size=4, num_workers=4):
                    params = {"batch_size": batch_size, "shuffle": True, "num_workers": num_workers}
                    return torch.utils.data.DataLoader(self, **params)

            def test_generator():
                for mix, clean in Dataset().get_generator(batch_size=1, num_workers=1):
                    assert mix.shape == clean.shape
            """,
        "pkg/setup.py": """\
            import pkg.wham as wham_loader

            def setup(bs):
                return {"train": wham_loader.Dataset().get_generator(batch_size=bs)}
            """,
        "train.py": f"""\
            import torch
            import pkg.setup as dataset_setup

            gens = dataset_setup.setup(8)
            {script}
            opt = torch.optim.Adam(model.parameters())
            for mix, clean in gens["train"]:
                dev = next(model.parameters()).device
                loss = torch.nn.functional.mse_loss(model(mix.to(dev)), clean.to(dev))
                opt.zero_grad()
                loss.backward()
                opt.step()
            """,
    })
    results = check_files(["pkg/__init__.py", "pkg/wham.py", "pkg/setup.py", "train.py"],
                          Settings(root=str(project), select=("TD304",)))
    assert codes(results, "wham.py") == expected


@pytest.mark.parametrize("guard, expected", [
    ("if args.ngpu > 0:", [(2, "TD102")]),
    ("if True:", [(2, "TD101"), (2, "TD102")]),
])
def test_a_cuda_helper_every_caller_calls_on_the_gpu_side_of_a_device_choice_has_a_fallback(
        project: Path, guard: str, expected: list) -> None:
    """OpenTransformer's ``map_to_cuda(d)`` (a utility module) calls ``.cuda()``; every call of it in the trainer sits
    under ``if args.ngpu > 0:``, and ``-n 0`` trains on the CPU: the program's own fallback (TD101 quiet, TD102's hint
    stays). Called unguarded, the helper hard-codes CUDA."""
    write(project, {
        "pkg/__init__.py": "",
        "pkg/utils.py": """\
            def map_to_cuda(d):
                return {k: v.cuda() for k, v in d.items()}
            """,
        "train.py": f"""\
            import argparse
            import torch
            from pkg.utils import map_to_cuda

            def main(args, loader):
                model = torch.nn.Linear(4, 1)
                if args.ngpu > 0:
                    model = model.to(torch.device("cuda"))
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                for inputs in loader:
                    {guard}
                        inputs = map_to_cuda(inputs)
                    loss = model(inputs["x"]).sum()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()

            if __name__ == "__main__":
                parser = argparse.ArgumentParser()
                parser.add_argument("-n", "--ngpu", type=int, default=1)
                main(parser.parse_args(), [])
            """,
    })
    results = check_files(["pkg/__init__.py", "pkg/utils.py", "train.py"],
                          Settings(root=str(project), select=("TD101", "TD102")))
    assert codes(results, "utils.py") == expected


@pytest.mark.parametrize("imported, expected", [("Propagation", []),
                                                  ("Propagation, SetAbstraction", [(6, "TD611"), (14, "TD611"),
                                                                                   (16, "TD611")])])
def test_a_helper_only_forwards_of_classes_nobody_builds_call_runs_on_no_step(
        project: Path, imported: str, expected: list) -> None:
    """Point-MAE's PointNet++ module: ``sample_idx`` makes indices on the host and moves them, and only the set
    abstraction's forward calls it; the training script imports the feature propagation alone, so no step runs the
    helper (TD611 quiet). Imported (and so buildable) too, the set abstraction's forward makes them every step."""
    write(project, {
        "blocks.py": textwrap.dedent("""\
            import torch
            import torch.nn as nn

            def sample_idx(xyz, n):
                device = xyz.device
                return torch.randint(0, xyz.shape[1], (xyz.shape[0], n)).to(device)

            class SetAbstraction(nn.Module):
                def __init__(self):
                    super(SetAbstraction, self).__init__()
                    self.fc = nn.Linear(3, 3)

                def forward(self, xyz):
                    start = torch.zeros(xyz.shape[0], dtype=torch.long).to(xyz.device)
                    for _ in range(2):
                        xyz = self.fc(xyz + torch.rand(xyz.shape).to(xyz.device))
                    return sample_idx(xyz, 16) + start[:, None]

            """) + _PROPAGATION,
        "train.py": _trains_propagation(f"import torch\nfrom blocks import {imported}\n"),
    })
    results = check_files(["blocks.py", "train.py"], Settings(root=str(project), select=("TD611",)))
    assert codes(results, "blocks.py") == expected


_PROPAGATION = """
class Propagation(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, xyz):
        return self.fc(xyz)
"""


def _trains_propagation(head: str, extra: str = "") -> str:
    """A train.py: ``head`` (its imports), a device, ``extra`` (a line of its own), then a training loop of
    ``Propagation``."""
    return head + '\ndevice = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n' + extra + (
        "model = Propagation().to(device)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for step in range(10):\n"
        "    loss = model(torch.randn(4, 64, 3, device=device)).sum()\n"
        "    opt.zero_grad()\n"
        "    loss.backward()\n"
        "    opt.step()\n")


@pytest.mark.parametrize("mention, expected", [
    ('print("SetAbstraction was the first version")  # kept for SetAbstraction', []),
    ("spare = SetAbstraction().to(device)", [(6, "TD611")])])
def test_a_model_class_an_importer_names_only_in_strings_and_comments_is_built_nowhere(
        project: Path, mention: str, expected: list) -> None:
    """Raindrop's ``models_rd.py`` keeps the first version of its model beside ``Raindrop_v2``; the script imports
    the module with ``*`` and names the first version only in a string (its W&B project) and its docstring: no step
    runs that forward (TD611 quiet). A call of the class in the script's code builds it."""
    write(project, {
        "blocks.py": textwrap.dedent("""\
            import torch
            import torch.nn as nn

            class SetAbstraction(nn.Module):
                def forward(self, xyz):
                    return xyz + torch.rand(xyz.shape).to(xyz.device)

            """) + _PROPAGATION,
        "train.py": _trains_propagation('"""Here is the second version of SetAbstraction, renamed."""\n'
                                        "import torch\nfrom blocks import *\n", mention + "\n"),
    })
    results = check_files(["blocks.py", "train.py"], Settings(root=str(project), select=("TD611",)))
    assert codes(results, "blocks.py") == expected


@pytest.mark.parametrize("stop, expected", [("if not torch.cuda.is_available():", []),
                                            ("if False:", [(4, "TD101")])])
def test_cuda_code_a_gpu_only_script_reaches_through_networks_it_builds_needs_no_fallback(
        project: Path, stop: str, expected: list) -> None:
    """darts: ``utils.drop_path`` makes a CUDA mask and is called by a cell's forward, the cells are built by the
    network, and the script builds the network after stopping without a GPU; the network also rebuilds itself in a
    ``new()`` method another module's object calls. All of it runs with a GPU only (TD101 quiet). Without the stop,
    the helper hard-codes CUDA."""
    write(project, {
        "utils.py": """\
            import torch

            def drop_path(x, p):
                mask = torch.cuda.FloatTensor(x.size(0), 1).bernoulli_(1 - p)
                return x * mask / (1 - p)
            """,
        "model.py": """\
            import torch.nn as nn
            from utils import drop_path

            class Cell(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(8, 8)

                def forward(self, x, drop_prob):
                    h = self.fc(x)
                    if self.training and drop_prob > 0.0:
                        h = drop_path(h, drop_prob)
                    return h

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.cells = nn.ModuleList([Cell() for _ in range(3)])

                def forward(self, x):
                    for cell in self.cells:
                        x = cell(x, 0.2)
                    return x

                def new(self):
                    return Net().cuda()
            """,
        "train.py": f"""\
            import sys
            import torch
            from model import Net

            def main():
                {stop}
                    sys.exit(1)
                model = Net().cuda()
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                for step in range(10):
                    loss = model(torch.randn(4, 8).cuda()).sum()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    model.new()

            main()
            """,
    })
    results = check_files(["utils.py", "model.py", "train.py"], Settings(root=str(project), select=("TD101", "TD102")))
    assert codes(results, "utils.py") == expected
    assert [c for c in codes(results, "model.py") if c[1] == "TD101"] == ([] if not expected else [(26, "TD101")])


@pytest.mark.parametrize("called, expected", [("dual", [(5, "TD611")]), ("info_nce", [(5, "TD611")]),
                                              ("describe", [])])
def test_a_factory_in_a_helper_that_a_sibling_helper_calls_for_another_module_s_step_is_made_every_step(
        project: Path, called: str, expected: list) -> None:
    """GraphMVP's ``util.py``: ``info_nce`` makes its labels on the host and moves them; ``dual`` calls it twice, and
    the training loop of another module calls ``dual`` (or ``info_nce`` itself) every step: made then moved every step
    (TD611). A loop that calls only a helper not reaching ``info_nce`` makes nothing."""
    write(project, {
        "util.py": """\
            import torch
            import torch.nn.functional as F

            def info_nce(a, b):
                labels = torch.arange(a.size(0)).long().to(a.device)
                return F.cross_entropy(a @ b.t(), labels)

            def dual(a, b):
                return (info_nce(a, b) + info_nce(b, a)) / 2

            def describe(a, b):
                return (a - b).pow(2).mean()
            """,
        "train.py": f"""\
            import torch
            from util import {called}

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(8, 8).to(device)
            opt = torch.optim.Adam(model.parameters())
            loader = torch.utils.data.DataLoader([], batch_size=4, pin_memory=True, num_workers=2)
            for x, y in loader:
                loss = {called}(model(x.to(device)), model(y.to(device)))
                opt.zero_grad()
                loss.backward()
                opt.step()
            """,
    })
    results = check_files(["util.py", "train.py"], Settings(root=str(project), select=("TD611",)))
    assert codes(results, "util.py") == expected


@pytest.mark.parametrize("move, expected", [(".to(device)", [(10, "TD603")]), ("", [])])
def test_an_evaluation_function_of_another_module_handed_a_moved_model_runs_on_the_gpu(
        project: Path, move: str, expected: list) -> None:
    """DyGLib's ``evaluate_models_utils.py`` never names a device: its evaluation loop runs the model the training
    script hands it, moved to the GPU, and reads each batch's loss (TD603). Handed a model left on the CPU, it reads
    host values."""
    write(project, {
        "evaluate.py": """\
            import torch

            def evaluate(model, loader, loss_fn):
                model.eval()
                losses = []
                with torch.no_grad():
                    for x, y in loader:
                        pred = model(x.to(next(model.parameters()).device)).squeeze(-1).sigmoid()
                        loss = loss_fn(pred, y.float().to(pred.device))
                        losses.append(loss.item())
                return losses
            """,
        "train.py": f"""\
            import torch
            from evaluate import evaluate

            device = "cuda" if torch.cuda.is_available() else "cpu"
            model = torch.nn.Linear(8, 1){move}
            print(sum(evaluate(model, [], torch.nn.BCELoss())))
            """,
    })
    results = check_files(["evaluate.py", "train.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "evaluate.py") == expected


@pytest.mark.parametrize("block, expected_evaluate, expected_infer", [
    ("with torch.no_grad():\n                        start, end = self.model(ids)", [], []),
    ("start, end = self.model(ids)", [(12, "TD401")], [(12, "TD401")]),
])
def test_a_helper_class_of_another_module_that_runs_its_model_under_no_grad_records_no_graph(
        project: Path, block: str, expected_evaluate: list, expected_infer: list) -> None:
    """An evaluation script loops over samples calling ``inferencer.inference_model(question, context)`` of a plain
    class of ``infer.py`` (``InferenceModel``: tokenises, runs ``self.model`` under ``torch.no_grad()``, decodes): the
    call records no graph. Without the block, both the helper's forward and the loop's call are reported."""
    write(project, {
        "infer.py": f"""\
            import torch
            from torch import nn

            class InferenceModel:
                def __init__(self, path):
                    self.model = nn.Embedding(100, 2)
                    self.model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
                    self.model.eval()

                def inference_model(self, question, context):
                    ids = torch.as_tensor([len(question), len(context)])[None]
                    {block}
                    return start.argmax().item(), end.argmax().item()
            """,
        "evaluate.py": """\
            from tqdm import tqdm
            from torchmetrics.text import SQuAD
            from infer import InferenceModel


            def score(path, validation_dataset):
                inferencer = InferenceModel(path)
                squad = SQuAD()
                total = 0.0
                for sample in tqdm(validation_dataset):
                    question, context = sample["question"], sample["context"]
                    prediction = inferencer.inference_model(question, context)
                    result = squad([{"prediction_text": prediction, "id": sample["id"]}], sample)
                    total += result["f1"].item()
                return total / len(validation_dataset)
            """,
    })
    results = check_files(["infer.py", "evaluate.py"], Settings(root=str(project), select=("TD401",)))
    assert codes(results, "evaluate.py") == expected_evaluate
    assert codes(results, "infer.py") == expected_infer


@pytest.mark.parametrize("decorator, expected", [("@torch.inference_mode()", []), ("", [(7, "TD401")])])
def test_an_override_its_base_class_calls_only_without_autograd_records_no_graph(
        project: Path, decorator: str, expected: list) -> None:
    """lingua's generators override ``generate_next_token``, which the base class of another module calls only from
    ``@torch.inference_mode() def generate``: the override runs without autograd. A base that calls it with autograd
    on leaves the override's forward reported."""
    write(project, {
        "base.py": f"""\
            import torch

            class Generator:
                def __init__(self, model):
                    self.model = model

                def generate_next_token(self, tok):
                    return self.model(tok)

                {decorator}
                def generate(self, tok, n):
                    out = []
                    for _ in range(n):
                        tok = self.generate_next_token(tok).argmax(-1)
                        out.append(tok)
                    return out
            """,
        "rnn_gen.py": """\
            import torch
            import torch.nn as nn
            from base import Generator

            class RNNGenerator(Generator):
                def generate_next_token(self, tok):
                    return self.model.forward(tok)

            if __name__ == "__main__":
                device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                model = nn.Embedding(10, 10).to(device).eval()
                print(RNNGenerator(model).generate(torch.zeros(1, dtype=torch.long, device=device), 5))
            """,
    })
    results = check_files(["base.py", "rnn_gen.py"], Settings(root=str(project), select=("TD401",)))
    assert codes(results, "rnn_gen.py") == expected


def test_an_override_its_base_class_of_the_same_file_calls_under_no_grad_records_no_graph(project: Path) -> None:
    """A trainer's ``validate_on_batch``, which the base class beside it calls in ``validate`` under
    ``torch.no_grad()``, runs without autograd; ``predict_batch``, which the base also calls from ``fit``, does not."""
    write(project, {
        "trainer.py": """\
            import torch
            import torch.nn as nn

            class BaseTrainer:
                def __init__(self, model, loader):
                    self.model, self.loader = model, loader

                def validate(self):
                    self.model.eval()
                    with torch.no_grad():
                        return [self.validate_on_batch(b) for b in self.loader]

                def fit(self):
                    return [self.predict_batch(b) for b in self.loader]

            class Trainer(BaseTrainer):
                def validate_on_batch(self, batch):
                    return self.model(batch).mean().item()

                def predict_batch(self, batch):
                    return self.model(batch).argmax(-1)

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            Trainer(nn.Linear(4, 2).to(device), []).validate()
            """,
    })
    results = check_files(["trainer.py"], Settings(root=str(project), select=("TD401",)))
    assert codes(results, "trainer.py") == [(21, "TD401")]


@pytest.mark.parametrize("default, expected", [("min_depth=0.1", []), ("min_depth=None", [(14, "TD603")])])
def test_a_read_after_another_module_s_metrics_copied_the_outputs_to_the_host_waits_for_nothing(
        project: Path, default: str, expected: list) -> None:
    """ZoeDepth's ``validate_on_batch`` calls ``compute_metrics(gt, pred, **config)`` of another module, which copies
    both to the host first and then works in NumPy with a number parameter (``min_depth=0.1``): the GPU is idle when
    it returns, so ``l.item()`` after it waits for nothing. A parameter the module cannot tell is a number (a
    ``None`` default) may be a tensor: then the read still counts."""
    write(project, {
        "metrics.py": f"""\
            import numpy as np

            def compute_errors(gt, pred):
                return {{"abs_rel": float(np.mean(np.abs(gt - pred) / gt))}}

            def compute_metrics(gt, pred, {default}, crop=True, dataset="nyu"):
                pred = pred.squeeze().cpu().numpy()
                pred[pred < 1e-3] = 1e-3
                gt = gt.squeeze().cpu().numpy()
                valid = np.logical_and(gt > 1e-3, gt < 10)
                if crop:
                    mask = np.zeros(valid.shape)
                    if dataset == "kitti":
                        mask[10:-10, 10:-10] = 1
                    else:
                        mask[4:-4, 4:-4] = 1
                    valid = np.logical_and(valid, mask)
                return compute_errors(gt[valid], np.maximum(pred[valid], min_depth))
            """,
        "evaluate.py": """\
            import torch
            from metrics import compute_metrics

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Conv2d(3, 1, 1).to(device).eval()
            loader = torch.utils.data.DataLoader([], pin_memory=True, num_workers=2)
            out = []
            with torch.no_grad():
                for batch in loader:
                    images, gt = batch["image"].to(device), batch["depth"].to(device)
                    pred = model(images)
                    loss = torch.nn.functional.l1_loss(pred, gt)
                    metrics = compute_metrics(gt, pred)
                    out.append((metrics, loss.item()))
            """,
    })
    results = check_files(["metrics.py", "evaluate.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "evaluate.py") == expected


@pytest.mark.parametrize("second, expected", [("SetB", []), ("Plain", [(18, "TD304"), (18, "TD305")])])
def test_a_dataset_class_picked_into_a_variable_whose_candidates_all_move_their_items(
        project: Path, second: str, expected: list) -> None:
    """3DInfomax picks its dataset class in an if/elif chain (``dataset = QM9Geomol`` ...) and builds
    ``dataset(split="train", device=device)``: every candidate moves its items to the device in ``__getitem__``, so
    the loader has nothing to pin and no worker may touch CUDA. With one candidate that keeps its items on the host,
    the loader is judged."""
    write(project, {
        "sets.py": """\
            import torch
            from torch.utils.data import Dataset

            class SetA(Dataset):
                def __init__(self, split, device="cuda:0"):
                    self.x = torch.randn(100, 4)
                    self.device = device

                def __len__(self):
                    return 100

                def __getitem__(self, i):
                    return self.x[i].to(self.device), self.x[i, :1].to(self.device)

            class SetB(SetA):
                pass

            class Plain(Dataset):
                def __init__(self, split, device=None):
                    self.x = torch.randn(100, 4)

                def __len__(self):
                    return 100

                def __getitem__(self, i):
                    return self.x[i], self.x[i, :1]
            """,
        "train.py": f"""\
            import torch
            from torch.utils.data import DataLoader
            from sets import SetA, SetB, Plain

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(4, 1).to(device)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)


            def run(name):
                if name == "a":
                    dataset = SetA
                elif name == "b":
                    dataset = {second}
                else:
                    raise ValueError(name)
                train = dataset(split="train", device=device)
                for x, y in DataLoader(train, batch_size=8, shuffle=True):
                    loss = (model(x.to(device)) - y.to(device)).pow(2).mean()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            """,
    })
    results = check_files(["sets.py", "train.py"], Settings(root=str(project), select=("TD304", "TD305")))
    assert codes(results, "train.py") == expected


@pytest.mark.parametrize("guard, expected", [("with torch.no_grad():", []), ("if True:", [(9, "TD401")])])
def test_a_helper_class_run_by_a_method_its_other_modules_call_without_autograd_records_no_graph(
        project: Path, guard: str, expected: list) -> None:
    """UnsupervisedMT's decoder runs ``Beam(self).generate(x, n)`` of ``beam.py`` from its own ``generate``, which no
    call in ``model.py`` makes and the evaluation scripts call under ``torch.no_grad()``: the beam's forwards record
    no graph. Called with autograd on, they are reported."""
    write(project, {
        "beam.py": """\
            import torch.nn.functional as F

            class Beam:
                def __init__(self, decoder):
                    self.decoder = decoder

                def generate(self, x, maxlen):
                    for step in range(maxlen):
                        probs = F.log_softmax(self.decoder(x), -1)
                        x = probs.exp()
                    return x
            """,
        "model.py": """\
            import torch.nn as nn
            from beam import Beam

            class Decoder(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.proj = nn.Linear(8, 8)

                def forward(self, x):
                    return self.proj(x)

                def generate(self, x):
                    return Beam(self).generate(x, 10)
            """,
        "evaluate.py": f"""\
            import torch
            from model import Decoder

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            dec = Decoder().to(device).eval()
            {guard}
                outs = [dec.generate(x.to(device)) for x in [torch.randn(4, 8) for _ in range(5)]]
            """,
    })
    results = check_files(["beam.py", "model.py", "evaluate.py"], Settings(root=str(project), select=("TD401",)))
    assert codes(results, "beam.py") == expected


@pytest.mark.parametrize("handed, expected", [("loss_value", []), ("loss", [(14, "TD603"), (16, "TD603")])])
def test_a_reduce_helper_that_hands_back_its_argument_or_a_number_keeps_a_number_a_number(
        project: Path, handed: str, expected: list) -> None:
    """MAE/DeiT-style ``misc.all_reduce_mean(x)`` returns ``x_reduce.item()`` with several processes and ``x`` as
    handed with one: given ``loss_value = loss.item()``, TensorBoard's ``add_scalar`` gets a number. Given the loss
    tensor itself, it may get that tensor and copy it every step."""
    write(project, {
        "misc.py": """\
            import torch
            import torch.distributed as dist

            def all_reduce_mean(x):
                world_size = dist.get_world_size() if dist.is_initialized() else 1
                if world_size > 1:
                    x_reduce = torch.tensor(x).cuda()
                    dist.all_reduce(x_reduce)
                    x_reduce /= world_size
                    return x_reduce.item()
                return x
            """,
        "engine.py": f"""\
            import torch
            import misc

            def train_one_epoch(model, loader, opt, device, log_writer, epoch):
                for step, (x, y) in enumerate(loader):
                    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                    loss = torch.nn.functional.mse_loss(model(x), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    loss_value = loss.item()
                    if not torch.isfinite(torch.tensor(loss_value)):
                        raise SystemExit(1)
                    loss_value_reduce = misc.all_reduce_mean({handed})
                    if log_writer is not None:
                        log_writer.add_scalar("train_loss", loss_value_reduce, epoch * 1000 + step)

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            """,
    })
    results = check_files(["misc.py", "engine.py"], Settings(root=str(project), select=("TD603",)))
    assert [c for c in codes(results, "engine.py") if c[0] != 11] == expected


@pytest.mark.parametrize("setting, expected", [('torch.device("cuda" if torch.cuda.is_available() else "cpu")',
                                                [(12, "TD603")]), ('"cpu"', [])])
def test_a_device_constant_imported_by_name_from_a_settings_module(project: Path, setting: str, expected: list) -> None:
    """ColBERT's trainer does ``from colbert.parameters import DEVICE`` and moves everything ``.to(DEVICE)``, a
    module-level setting that is CUDA when available: a CUDA program whose per-step ``.item()`` is judged. A setting
    of ``"cpu"`` keeps it on the host."""
    write(project, {
        "params.py": f"""\
            import torch
            DEVICE = {setting}
            """,
        "train.py": """\
            import torch
            from params import DEVICE

            def train(model, reader, maxsteps):
                model = model.to(DEVICE)
                opt = torch.optim.AdamW(model.parameters())
                for step, steps in zip(range(maxsteps), reader):
                    this_loss = 0.0
                    for x, y in steps:
                        loss = torch.nn.functional.cross_entropy(model(x.to(DEVICE)), y.to(DEVICE))
                        loss.backward()
                        this_loss += loss.item()
                    opt.step()
                    opt.zero_grad()
            """,
    })
    results = check_files(["params.py", "train.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "train.py") == expected


@pytest.mark.parametrize("move, expected", [("enc.cuda()\n                    dis.cuda()", [(14, "TD603")]),
                                            ("pass", [])])
def test_models_a_builder_returns_through_another_builder_moved_to_the_gpu(project: Path, move: str, expected: list) -> None:
    """UnsupervisedMT's ``build_model(params)`` returns ``build_attention_model(params)``, which moves each model in
    place (``if params.cuda: encoder.cuda()``) and returns them in a tuple: the trainer's per-step ``.item()`` reads
    a GPU loss. Models the builders leave on the host read nothing from a GPU."""
    write(project, {
        "build.py": f"""\
            import torch.nn as nn

            def build_linear(cuda=True):
                enc, dis = nn.Linear(8, 8), nn.Linear(8, 2)
                if cuda:
                    {move}
                return enc, dis

            def build_model(kind="linear"):
                if kind == "linear":
                    return build_linear()
            """,
        "trainer.py": """\
            import torch
            import torch.nn.functional as F

            class Trainer:
                def __init__(self, enc, dis, data):
                    self.enc, self.dis, self.data = enc, dis, data
                    self.opt = torch.optim.SGD(dis.parameters(), 0.1)
                    self.stats, self.n_sentences = [], 0

                def step(self, device):
                    x, y = next(self.data)
                    h = self.enc(x.to(device))
                    loss = F.cross_entropy(self.dis(h), y.to(device))
                    self.stats.append(loss.item())
                    self.opt.zero_grad()
                    loss.backward()
                    self.opt.step()
                    self.n_sentences += len(y)
            """,
        "main.py": """\
            import itertools, torch
            from build import build_model
            from trainer import Trainer

            enc, dis = build_model()
            device = next(enc.parameters()).device
            trainer = Trainer(enc, dis, itertools.cycle([(torch.randn(32, 8), torch.randint(0, 2, (32,)))]))
            while trainer.n_sentences < 1000:
                trainer.step(device)
            """,
    })
    results = check_files(["build.py", "trainer.py", "main.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "trainer.py") == expected


def test_a_collective_helpers_cuda_buffer_is_gpu_only_unless_the_project_names_gloo(project: Path) -> None:
    """``all_gather_list`` hands its CUDA byte buffer to ``dist.all_reduce`` on every call: it runs only in a process
    group, which is NCCL's on GPUs when no module of the project names gloo (quiet). Where the launcher may pick gloo
    on CPUs (``"nccl" if torch.cuda.is_available() else "gloo"``), the buffer crashes there: TD101."""
    files = {
        "dist_utils.py": """\
            import pickle
            import torch
            import torch.distributed as dist

            def all_gather_list(data, max_size=4096):
                buffer = torch.cuda.ByteTensor(max_size * dist.get_world_size())
                enc = pickle.dumps(data)
                buffer[:len(enc)].copy_(torch.ByteTensor(list(enc)))
                dist.all_reduce(buffer)
                return buffer
            """,
        "train.py": """\
            import os
            import torch
            import torch.distributed as dist
            from dist_utils import all_gather_list

            def main(stats):
                if int(os.environ.get("WORLD_SIZE", "1")) > 1:
                    dist.init_process_group("nccl")
                    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
                    stats = all_gather_list(stats)
                return stats
            """,
    }
    write(project, files)
    results = check_files(list(files), Settings(root=str(project)))
    assert [c for c in codes(results, "dist_utils.py") if c[1] == "TD101"] == []
    files["train.py"] = files["train.py"].replace('init_process_group("nccl")',
                                                  'init_process_group("nccl" if torch.cuda.is_available() else "gloo")')
    write(project, files)
    results = check_files(list(files), Settings(root=str(project)))
    assert [c for c in codes(results, "dist_utils.py") if c[1] == "TD101"] == [(6, "TD101")]


def test_a_wrappers_model_that_the_modules_making_the_wrapper_move_is_moved(project: Path) -> None:
    """PET's ``TransformerModelWrapper`` builds ``self.model`` in ``__init__`` and moves each batch to the ``device``
    its ``train`` is handed; ``modeling.py``, which makes the wrappers, calls ``wrapper.model.to(device)`` before every
    run: the model is moved (quiet). Where no module moves it, TD201."""
    files = {
        "wrapper.py": """\
            import torch
            from torch import nn

            class Wrapper:
                def __init__(self, size):
                    self.model = nn.Linear(size, 2)

                def train(self, batches, device):
                    opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
                    for x, y in batches:
                        x, y = x.to(device), y.to(device)
                        loss = nn.functional.cross_entropy(self.model(x), y)
                        opt.zero_grad()
                        loss.backward()
                        opt.step()
            """,
        "modeling.py": """\
            import torch
            from wrapper import Wrapper

            def train_pet(batches, size):
                device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                wrapper = Wrapper(size)
                wrapper.model.to(device)
                wrapper.train(batches, device)
            """,
    }
    write(project, files)
    results = check_files(list(files), Settings(root=str(project)))
    assert [c for c in codes(results, "wrapper.py") if c[1] == "TD201"] == []
    files["modeling.py"] = files["modeling.py"].replace("wrapper.model.to(device)", "pass")
    write(project, files)
    results = check_files(list(files), Settings(root=str(project)))
    assert [c for c in codes(results, "wrapper.py") if c[1] == "TD201"] == [(6, "TD201")]


def test_a_checkpoint_helper_that_only_unwraps_ddp_is_judged_by_its_callers(project: Path) -> None:
    """A vendored ``checkpoint.py`` whose ``save_checkpoint`` takes ``model.module.state_dict()`` when
    ``isinstance(model, DistributedDataParallel)``, and starts no process itself: not a DDP program of its own. A DDP
    script that calls it on every rank, in its loop or not, makes its ``torch.save`` TD703 (naming that call); one that calls it under
    ``if rank == 0:``, or none at all, leaves it quiet."""
    files = {
        "checkpoint.py": """\
            import torch

            def save_checkpoint(model, path):
                if isinstance(model, (torch.nn.DataParallel, torch.nn.parallel.DistributedDataParallel)):
                    state = model.module.state_dict()
                else:
                    state = model.state_dict()
                torch.save(state, path)
            """,
        "train.py": """\
            import os
            import torch
            import torch.distributed as dist
            from torch import nn
            from torch.nn.parallel import DistributedDataParallel as DDP
            from checkpoint import save_checkpoint

            def main(loader, epochs):
                dist.init_process_group("nccl")
                rank = int(os.environ["LOCAL_RANK"])
                torch.cuda.set_device(rank)
                model = DDP(nn.Linear(8, 2).cuda(rank), device_ids=[rank])
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                for epoch in range(epochs):
                    for x, y in loader:
                        loss = nn.functional.cross_entropy(model(x.cuda(rank)), y.cuda(rank))
                        opt.zero_grad()
                        loss.backward()
                        opt.step()
                    save_checkpoint(model, f"epoch{epoch}.pt")
            """,
    }
    write(project, files)
    results = check_files(list(files), Settings(root=str(project)))
    found = [r for r in results if r.path.endswith("checkpoint.py")][0].findings
    assert [(f.location.line, f.code) for f in found if f.code == "TD703"] == [(8, "TD703")]
    assert "train.py:20" in found[0].message
    files["train.py"] = files["train.py"].replace("        save_checkpoint(model", "        if rank == 0:\n"
                                                  "                        save_checkpoint(model")
    write(project, files)
    results = check_files(list(files), Settings(root=str(project)))
    assert [c for c in codes(results, "checkpoint.py") if c[1] == "TD703"] == []
    results = check_files(["checkpoint.py"], Settings(root=str(project)))
    assert [c for c in codes(results, "checkpoint.py") if c[1] == "TD703"] == []
    (project / "train.py").unlink()
    results = check_files(["checkpoint.py"], Settings(root=str(project)))
    assert [c for c in codes(results, "checkpoint.py") if c[1] == "TD703"] == []


def test_loaders_handed_in_a_dict_to_a_trainer_object_of_another_module(project: Path) -> None:
    """Conv-TasNet: ``data = {"tr_loader": tr_loader, "cv_loader": cv_loader}``, then ``Solver(data, model, opt).train()``
    whose ``train`` (solver.py) backpropagates over ``data["tr_loader"]``: the program trains, so the validation loader
    built with ``num_workers=0`` is TD305. A solver that only evaluates leaves it quiet."""
    files = {
        "solver.py": """\
            import torch

            class Solver:
                def __init__(self, data, model, optimizer):
                    self.tr_loader, self.cv_loader = data["tr_loader"], data["cv_loader"]
                    self.model, self.optimizer = model, optimizer

                def train(self):
                    for x, y in self.tr_loader:
                        loss = (self.model(x.cuda()) - y.cuda()).pow(2).mean()
                        self.optimizer.zero_grad()
                        loss.backward()
                        self.optimizer.step()
            """,
        "train.py": """\
            import torch
            from torch.utils.data import DataLoader
            from solver import Solver

            def main(tr_dataset, cv_dataset, workers):
                tr_loader = DataLoader(tr_dataset, batch_size=4, num_workers=workers, pin_memory=True)
                cv_loader = DataLoader(cv_dataset, batch_size=1, num_workers=0, pin_memory=True)
                data = {"tr_loader": tr_loader, "cv_loader": cv_loader}
                model = torch.nn.Linear(8, 1).cuda()
                optimizer = torch.optim.Adam(model.parameters())
                solver = Solver(data, model, optimizer)
                solver.train()
            """,
    }
    write(project, files)
    results = check_files(list(files), Settings(root=str(project), select=("TD305",)))
    assert codes(results, "train.py") == [(7, "TD305")]
    files["solver.py"] = files["solver.py"].replace("loss.backward()", "print(loss.item())")
    write(project, files)
    results = check_files(list(files), Settings(root=str(project), select=("TD305",)))
    assert codes(results, "train.py") == []


def test_a_wrapped_save_whose_readers_drop_the_first_part_of_every_key(project: Path) -> None:
    """TRN: ``main.py`` saves ``{"epoch": ..., "state_dict": model.state_dict(), "best_prec1": best}`` of a DataParallel
    model; ``test_models.py`` beside it reads ``checkpoint["best_prec1"]`` and builds ``{'.'.join(k.split('.')[1:]): v for
    k, v in checkpoint["state_dict"].items()}``: the program's own reader needs the prefix (quiet). A reader that names
    only the generic ``"state_dict"`` may read another checkpoint: TD205."""
    files = {
        "main.py": """\
            import torch
            import torch.nn as nn

            def main(loader, epochs):
                model = nn.DataParallel(nn.Linear(8, 2)).cuda()
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                best = 0.0
                for epoch in range(epochs):
                    for x, y in loader:
                        loss = nn.functional.cross_entropy(model(x.cuda()), y.cuda())
                        opt.zero_grad()
                        loss.backward()
                        opt.step()
                    torch.save({"epoch": epoch + 1, "state_dict": model.state_dict(), "best_prec1": best}, "trn.pth")
            """,
        "test_models.py": """\
            import argparse
            import torch
            import torch.nn as nn

            parser = argparse.ArgumentParser()
            parser.add_argument("weights")
            args = parser.parse_args()
            net = nn.Linear(8, 2)
            checkpoint = torch.load(args.weights, map_location="cpu", weights_only=True)
            print("best", checkpoint["best_prec1"])
            base_dict = {'.'.join(k.split('.')[1:]): v for k, v in list(checkpoint["state_dict"].items())}
            net.load_state_dict(base_dict)
            """,
    }
    write(project, files)
    results = check_files(list(files), Settings(root=str(project), select=("TD205",)))
    assert codes(results, "main.py") == []
    files["test_models.py"] = files["test_models.py"].replace('print("best", checkpoint["best_prec1"])', 'print("loaded")')
    write(project, files)
    results = check_files(list(files), Settings(root=str(project), select=("TD205",)))
    assert codes(results, "main.py") == [(14, "TD205")]


def test_a_load_of_what_the_training_helper_just_saved_needs_no_map_location(project: Path) -> None:
    """cnn-text-classification: ``best_acc = train.train(train_iter, dev_iter, cnn, args)``, whose ``train`` (train.py)
    saves ``best_steps_*.pt`` under ``args.save_dir``, then ``cnn.load_state_dict(torch.load(best_path))`` of the
    newest such file: it reads back what this run just wrote, on this machine (quiet). Loading ``args.snapshot``, a file
    the user names, is TD502."""
    files = {
        "train.py": """\
            import os
            import torch

            def train(loader, model, args):
                opt = torch.optim.Adam(model.parameters())
                for x, y in loader:
                    loss = torch.nn.functional.cross_entropy(model(x), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                torch.save(model.state_dict(), os.path.join(args.save_dir, "best_steps_1.pt"))
            """,
        "main.py": """\
            import glob
            import os
            import torch
            import train

            def main(loader, model, args):
                train.train(loader, model, args)
                best_files = glob.glob(os.path.join(args.save_dir, "best_steps_*.pt"))
                best_path = max(best_files, key=os.path.getmtime)
                model.load_state_dict(torch.load(best_path, weights_only=True))
            """,
    }
    write(project, files)
    results = check_files(list(files), Settings(root=str(project), select=("TD502",)))
    assert codes(results, "main.py") == []
    files["main.py"] = files["main.py"].replace("torch.load(best_path,", "torch.load(args.snapshot,")
    write(project, files)
    results = check_files(list(files), Settings(root=str(project), select=("TD502",)))
    assert codes(results, "main.py") == [(10, "TD502")]


def test_a_load_of_what_an_early_stopper_of_another_module_saved_needs_no_map_location(project: Path) -> None:
    """``stopper = EarlyStopping(model_path=Config.checkpoint_path)`` of utils/early_stopping.py, whose
    ``save_checkpoint`` method saves there, is called each epoch; the best weights are then read back from that path:
    this run wrote them, on this machine (quiet). A ``Logger`` of the same module that saves nothing leaves the load
    TD502."""
    files = {
        "utils/early_stopping.py": """\
            import torch

            class EarlyStopping:
                def __init__(self, patience, model_path):
                    self.patience, self.model_path = patience, model_path

                def __call__(self, score, model):
                    self.save_checkpoint(model)
                    return False

                def save_checkpoint(self, model):
                    torch.save(model.state_dict(), self.model_path)

            class Logger:
                def __init__(self, model_path):
                    self.model_path = model_path

                def __call__(self, score, model):
                    print(self.model_path, score)
                    return False
            """,
        "train.py": """\
            import torch
            from utils.early_stopping import EarlyStopping

            def main(model, evaluate, Config):
                stopper = EarlyStopping(patience=3, model_path=Config.checkpoint_path)
                for epoch in range(Config.epochs):
                    if stopper(evaluate(model), model):
                        break
                model.load_state_dict(torch.load(Config.checkpoint_path, weights_only=True))
            """,
    }
    write(project, files)
    results = check_files(list(files), Settings(root=str(project), select=("TD502",)))
    assert codes(results, "train.py") == []
    files["train.py"] = files["train.py"].replace("EarlyStopping", "Logger").replace("patience=3, ", "")
    write(project, files)
    results = check_files(list(files), Settings(root=str(project), select=("TD502",)))
    assert codes(results, "train.py") == [(9, "TD502")]


def test_the_flags_of_a_forward_of_another_module_pick_a_no_grad_branch(project: Path) -> None:
    """QuantumDeepField's demo: ``self.model.forward(data, predict=True)`` of a ``Predictor`` handed
    ``train.QuantumField(...)``, whose ``forward`` (train/train.py) runs its ``if predict:`` branch under
    ``torch.no_grad()`` and returns: no graph (quiet). ``forward(data)`` takes the ``elif``/``else`` chain to a
    branch with autograd on: TD401."""
    files = {
        "train/__init__.py": "",
        "train/train.py": """\
            import torch
            import torch.nn as nn
            import torch.nn.functional as F

            class QuantumField(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.head = nn.Linear(8, 1)

                def forward(self, data, train=False, predict=False):
                    if predict:
                        with torch.no_grad():
                            return data[0], self.head(data[1])
                    elif train:
                        return F.mse_loss(self.head(data[1]), data[2])
                    else:
                        return data[0], self.head(data[1])
            """,
        "demo/run.py": """\
            import sys
            import torch
            sys.path.append("../")
            from train import train

            class Predictor:
                def __init__(self, model):
                    self.model = model

                def predict(self, loader):
                    out = []
                    for data in loader:
                        idx, e_ = self.model.forward(data, predict=True)
                        out.append(e_.tolist())
                    return out

            def main(loader):
                model = train.QuantumField().to("cuda")
                model.eval()
                return Predictor(model).predict(loader)
            """,
    }
    write(project, files)
    results = check_files(list(files), Settings(root=str(project), select=("TD401",)))
    assert codes(results, "run.py") == []
    files["demo/run.py"] = files["demo/run.py"].replace("self.model.forward(data, predict=True)", "self.model.forward(data)")
    write(project, files)
    results = check_files(list(files), Settings(root=str(project), select=("TD401",)))
    assert codes(results, "run.py") == [(13, "TD401")]


def test_a_loader_only_a_generator_of_another_module_wraps_and_nobody_advances_loads_nothing(project: Path) -> None:
    """CoDi: ``looper = infiniteloop(train_iter)`` of ``from utils import *``, whose ``infiniteloop`` yields, with the
    loader and the looper made again before the loop: the first loader loads nothing (quiet), the second feeds the GPU
    (TD304). A ``fit(loader)`` of utils.py that is no generator runs the loader whatever it returns."""
    files = {
        "utils.py": """\
            def infiniteloop(dataloader):
                while True:
                    for _, y in enumerate(dataloader):
                        yield y

            def fit(model, loader):
                for x in loader:
                    model(x.cuda()).sum().backward()
            """,
        "main.py": """\
            import torch
            from torch.utils.data import DataLoader
            from utils import *

            def main(data, model, steps):
                train_iter = DataLoader(data, batch_size=64, num_workers=4)
                looper = infiniteloop(train_iter)
                train_iter = DataLoader(data, batch_size=64, num_workers=4)
                looper = infiniteloop(train_iter)
                for step in range(steps):
                    model(next(looper).cuda()).sum().backward()
            """,
    }
    write(project, files)
    results = check_files(list(files), Settings(root=str(project), select=("TD304",)))
    assert codes(results, "main.py") == [(8, "TD304")]
    files["main.py"] = files["main.py"].replace("looper = infiniteloop(train_iter)", "looper = fit(model, train_iter)", 1)
    write(project, files)
    results = check_files(list(files), Settings(root=str(project), select=("TD304",)))
    assert codes(results, "main.py") == [(6, "TD304"), (8, "TD304")]


def test_a_sample_method_of_another_module_that_returns_after_its_no_grad_block(project: Path) -> None:
    """GOGGLE: ``self.model.sample(count)`` of ``self.model = Goggle(...)`` (model/goggle.py), whose ``sample`` runs
    its networks in a ``with torch.no_grad():`` block and then returns what the block made: no graph (quiet). A
    ``sample`` that returns a decoder call from after its block builds one (TD401)."""
    files = {
        "model/__init__.py": "",
        "model/goggle.py": """\
            import torch
            import torch.nn as nn

            class Goggle(nn.Module):
                def __init__(self, dim):
                    super().__init__()
                    self.dim = dim
                    self.decoder = nn.Linear(dim, dim)

                def forward(self, z):
                    return self.decoder(z)

                def sample(self, count):
                    with torch.no_grad():
                        z = torch.randn(count, self.dim, device="cuda")
                        synth_x = self.decoder(z)

                    return synth_x

            class Leaky(Goggle):
                def sample(self, count):
                    with torch.no_grad():
                        z = torch.randn(count, self.dim, device="cuda")
                    return self.decoder(z)
            """,
        "goggle_model.py": """\
            import torch
            from model.goggle import Goggle

            class GoggleModel:
                def __init__(self, dim):
                    self.model = Goggle(dim).to("cuda")

                def generate(self, count):
                    self.model.eval()
                    return self.model.sample(count).cpu().numpy()
            """,
    }
    write(project, files)
    results = check_files(list(files), Settings(root=str(project), select=("TD401",)))
    assert codes(results, "goggle_model.py") == []
    files["goggle_model.py"] = files["goggle_model.py"].replace("Goggle", "Leaky").replace("class LeakyModel", "class GoggleModel")
    write(project, files)
    results = check_files(list(files), Settings(root=str(project), select=("TD401",)))
    assert codes(results, "goggle_model.py") == [(10, "TD401")]


def test_a_loader_factory_is_judged_by_the_importer_that_trains_not_the_first_found(project: Path) -> None:
    """yolov3: ``prepare_train_dataset`` of dataset.py makes its loader without workers; evaluate.py, found first,
    imports it and runs on the GPU but trains nothing, while train.py imports it too and trains: TD305. With only
    evaluate.py importing it, no training script loads through it (quiet)."""
    files = {
        "dataset.py": """\
            from torch.utils.data import DataLoader

            def prepare_train_dataset(ds, batch_size):
                return DataLoader(ds, batch_size=batch_size, shuffle=True, pin_memory=True)
            """,
        "evaluate.py": """\
            import torch
            from dataset import prepare_train_dataset

            def main(ds, model):
                loader = prepare_train_dataset(ds, 8)
                model = model.cuda()
                with torch.no_grad():
                    for x, y in loader:
                        print(model(x.cuda()).argmax(1))
            """,
        "train.py": """\
            import torch
            from dataset import prepare_train_dataset

            def main(ds, model, opt):
                loader = prepare_train_dataset(ds, 8)
                model = model.cuda()
                for x, y in loader:
                    loss = torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda())
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            """,
    }
    write(project, files)
    results = check_files(list(files), Settings(root=str(project), select=("TD305",)))
    assert codes(results, "dataset.py") == [(4, "TD305")]
    (project / "train.py").unlink()
    del files["train.py"]
    results = check_files(list(files), Settings(root=str(project), select=("TD305",)))
    assert codes(results, "dataset.py") == []


def test_a_helper_that_returns_a_framework_model_whose_predict_turns_autograd_off(project: Path) -> None:
    """A course's helper module builds a Poutyne ``Model`` around the network (``model = pt.Model(network, ...)``,
    moved when a GPU exists, returned); its ``predict`` runs in eval mode under ``no_grad`` itself. A helper that
    returns a torch module is still judged: its forward after ``eval()`` records a graph."""
    write(project, {
        "helpers.py": """\
            import torch
            import torch.nn as nn
            import poutyne as pt

            def get_model(network, optimizer=None, use_gpu=True):
                model = pt.Model(network, optimizer, nn.CrossEntropyLoss(), batch_metrics=["accuracy"])
                if use_gpu and torch.cuda.is_available():
                    model.cuda()
                return model

            def get_classifier(use_gpu=True):
                model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.Linear(8, 2))
                if use_gpu and torch.cuda.is_available():
                    model.cuda()
                return model
            """,
        "lab.py": """\
            import torch
            import torch.nn as nn
            from helpers import get_classifier, get_model

            x_test = torch.randn(16, 8)
            model = get_model(nn.Linear(8, 2), use_gpu=True)
            y_pred = model.predict(x_test)
            clf = get_classifier()
            clf.eval()
            scores = clf(x_test)
            """})
    results = check_files(["lab.py", "helpers.py"], Settings(root=str(project)), jobs=1)
    assert [c for c in codes(results, "lab.py") if c[1] == "TD401"] == [(10, "TD401")]


def test_a_loss_class_of_another_module_given_weights_already_moved(project: Path) -> None:
    """A segmentation script moves its class weights (``weight = weight.cuda()``) and hands them to a loss class of
    ``utils/loss.py`` that holds nothing else (``self.loss = nn.NLLLoss(weight)``): nothing of it is on the host.
    Given weights made on the host and never moved, the loss still is."""
    loss = """\
        import torch
        import torch.nn as nn
        import torch.nn.functional as F

        class CrossEntropyLoss2d(torch.nn.Module):
            def __init__(self, weight=None):
                super(CrossEntropyLoss2d, self).__init__()
                self.loss = nn.NLLLoss(weight)

            def forward(self, outputs, targets):
                return self.loss(F.log_softmax(outputs, dim=1), targets)
        """
    train = """\
        import torch
        from utils.loss import CrossEntropyLoss2d

        def train(args, model, loader):
            weight = torch.ones(20)
            weight[0] = 2.0
            if args.cuda:
                weight = weight.cuda()
            criterion = CrossEntropyLoss2d(weight)
            for images, labels in loader:
                if args.cuda:
                    images = images.cuda()
                    labels = labels.cuda()
                loss = criterion(model(images), labels)
                loss.backward()
        """
    unmoved = train.replace("            if args.cuda:\n                weight = weight.cuda()\n", "")
    write(project, {"utils/__init__.py": "", "utils/loss.py": loss, "main.py": train, "main2.py": unmoved})
    results = check_files(["main.py", "main2.py", "utils/loss.py", "utils/__init__.py"], Settings(root=str(project)), jobs=1)
    assert [c for c in codes(results, "main.py") if c[1] == "TD201"] == []
    assert [c for c in codes(results, "main2.py") if c[1] == "TD201"] == [(7, "TD201")]


def test_a_step_method_overridden_two_bases_below_the_loop_that_calls_it(project: Path) -> None:
    """A speech package's ``Trainer.train_epoch`` calls ``self.unit_train(data)`` on every batch;
    ``NonSplitTrainer(Trainer)`` adds no loop, and ``LASTrainer(NonSplitTrainer)`` in another module overrides
    ``unit_train`` with ``loss.item()`` and ``torch.cuda.synchronize()``: both run every step. Its ``save`` is no
    step method, and a synchronize beside a clock read times the step (``TimedTrainer``): quiet."""
    write(project, {
        "asr/__init__.py": "",
        "asr/trainer.py": """\
            import torch

            class Trainer:
                def __init__(self, model, optimizer):
                    self.model = model.cuda() if torch.cuda.is_available() else model
                    self.optimizer = optimizer

                def train_epoch(self, loader):
                    for i, data in enumerate(loader):
                        loss_value = self.unit_train(data)

                def unit_train(self, data):
                    raise NotImplementedError

            class NonSplitTrainer(Trainer):
                def load(self, path):
                    self.model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
            """,
        "asr/las/__init__.py": "",
        "asr/las/train.py": """\
            import time
            import torch
            from ..trainer import *

            class LASTrainer(NonSplitTrainer):
                def unit_train(self, data):
                    xs, ys = data
                    loss = self.model(xs.cuda(non_blocking=True), ys.cuda(non_blocking=True))
                    loss_value = loss.item()
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
                    torch.cuda.synchronize()
                    return loss_value

                def save(self, path):
                    torch.cuda.synchronize()
                    torch.save(self.model.state_dict(), path)

            class TimedTrainer(NonSplitTrainer):
                def unit_train(self, data):
                    start = time.perf_counter()
                    loss = self.model(*data)
                    loss.backward()
                    self.optimizer.step()
                    torch.cuda.synchronize()
                    print(time.perf_counter() - start)
            """})
    results = check_files(["asr/las/train.py", "asr/trainer.py", "asr/__init__.py", "asr/las/__init__.py"],
                          Settings(root=str(project)), jobs=1)
    assert [c for c in codes(results, "train.py") if c[1] == "TD603"] == [(9, "TD603"), (13, "TD603")]


def test_a_submodule_of_a_model_class_of_another_module_run_after_eval(project: Path) -> None:
    """A VAE script builds ``model = VAE(...)`` of ``modules.py`` and, after ``model.eval()``, draws samples with
    ``model.decoder(z)``, a submodule the class sets in ``__init__``: an inference forward with autograd on. Its
    ``model.latent_size(...)`` is a plain method, and the decoder run under ``no_grad`` records nothing: quiet."""
    write(project, {
        "modules.py": """\
            import torch.nn as nn

            class VAE(nn.Module):
                def __init__(self, dim, z_dim):
                    super().__init__()
                    self.encoder = nn.Sequential(nn.Conv2d(3, dim, 4, 2, 1), nn.ReLU(), nn.Conv2d(dim, 2 * z_dim, 1))
                    self.decoder = nn.Sequential(nn.ConvTranspose2d(z_dim, dim, 4, 2, 1), nn.Tanh())
                    self.z_dim = z_dim

                def latent_size(self, batch):
                    return (batch, self.z_dim, 1, 1)

                def forward(self, x):
                    mu, logvar = self.encoder(x).chunk(2, dim=1)
                    return self.decoder(mu), logvar
            """,
        "vae.py": """\
            import torch
            from modules import VAE

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = VAE(64, 16).to(device)

            def generate_samples():
                model.eval()
                z = torch.randn(*model.latent_size(64), device=device)
                return model.decoder(z)

            def generate_quietly():
                model.eval()
                with torch.no_grad():
                    return model.decoder(torch.randn(8, 16, 1, 1, device=device))
            """})
    results = check_files(["vae.py", "modules.py"], Settings(root=str(project)), jobs=1)
    assert [c for c in codes(results, "vae.py") if c[1] == "TD401"] == [(10, "TD401")]


def test_a_sampling_method_of_a_model_class_of_another_module(project: Path) -> None:
    """A PixelCNN script draws samples every epoch with ``model.generate(label, shape)``, a method of its class in
    ``modules.py`` that runs ``self.forward`` for every pixel with autograd on. The prior's ``generate`` is
    decorated ``@torch.no_grad()``: quiet."""
    write(project, {
        "modules.py": """\
            import torch
            import torch.nn as nn

            class GatedPixelCNN(nn.Module):
                def __init__(self, k=256, dim=64):
                    super().__init__()
                    self.emb = nn.Embedding(k, dim)
                    self.out = nn.Conv2d(dim, k, 1)

                def forward(self, x, label):
                    return self.out(self.emb(x).permute(0, 3, 1, 2))

                def generate(self, label, shape=(8, 8), batch_size=64):
                    x = torch.zeros((batch_size, *shape), dtype=torch.int64, device=label.device)
                    for i in range(shape[0]):
                        for j in range(shape[1]):
                            logits = self.forward(x, label)
                            x[:, i, j] = logits[:, :, i, j].softmax(-1).multinomial(1).squeeze()
                    return x

            class Prior(GatedPixelCNN):
                @torch.no_grad()
                def generate(self, label, shape=(8, 8), batch_size=64):
                    return super().generate(label, shape, batch_size)
            """,
        "pixelcnn.py": """\
            import torch
            from modules import GatedPixelCNN, Prior

            model = GatedPixelCNN().cuda()
            prior = Prior().cuda()

            def generate_samples():
                label = torch.arange(10).cuda()
                x_tilde = model.generate(label, shape=(28, 28), batch_size=100)
                codes = prior.generate(label, batch_size=100)
                return x_tilde.cpu(), codes.cpu()
            """})
    results = check_files(["pixelcnn.py", "modules.py"], Settings(root=str(project)), jobs=1)
    assert [c for c in codes(results, "pixelcnn.py") if c[1] == "TD401"] == [(9, "TD401")]


def test_a_metric_method_that_adds_host_copies_to_its_state_every_step(project: Path) -> None:
    """A segmentation script calls ``iou.addBatch(outputs.max(1)[1], targets)`` on every training batch, a method of a
    metric class of ``utils/metrics.py`` whose ``self.tp += tp.double().cpu()`` copies to the host each time: a read
    every step. A method that hands its copy back (``return self.net(img).cpu()``) is the caller's to judge: quiet."""
    write(project, {
        "utils/__init__.py": "",
        "utils/metrics.py": """\
            import torch

            class IoU:
                def __init__(self, n):
                    self.tp = torch.zeros(n).double()

                def addBatch(self, x, y):
                    tp = (x == y).sum(0)
                    self.tp += tp.double().cpu()

            class Enhancer:
                def __init__(self, net):
                    self.net = net

                def enhance(self, img):
                    return self.net(img).cpu()
            """,
        "train.py": """\
            import torch
            from utils.metrics import IoU, Enhancer

            def train(model, loader, optimizer, n):
                model = model.cuda()
                iou = IoU(n)
                enhancer = Enhancer(model)
                for images, targets in loader:
                    images, targets = images.cuda(), targets.cuda()
                    outputs = model(images)
                    loss = torch.nn.functional.cross_entropy(outputs, targets)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    iou.addBatch(outputs.max(1)[1], targets)
                    kept = enhancer.enhance(images)
            """})
    results = check_files(["train.py", "utils/metrics.py", "utils/__init__.py"], Settings(root=str(project)), jobs=1)
    assert [c for c in codes(results, "metrics.py") if c[1] == "TD603"] == [(9, "TD603")]


def test_reads_in_the_forward_of_a_model_class_that_a_training_loop_runs(project: Path) -> None:
    """``models.py`` defines the layers a training script of the project runs on the GPU every step: the YOLO layer's
    ``labels.cpu()`` for target assignment, its NaN test and the encoder's ``length.item()`` per sample are reads every
    step. Quiet: lengths handed to ``pack_padded_sequence`` (PyTorch takes them on the host), reads behind ``if not
    self.training:`` (inference post-processing), a normaliser set on the first call only, a debug print a parameter
    turns on, a NaN report, a ``@torch.no_grad()`` post-processor's forward, and a copy the forward hands back."""
    write(project, {
        "models.py": """\
            import numpy as np
            import torch
            import torch.nn as nn
            from torch.nn.utils.rnn import pack_padded_sequence

            class YOLOLayer(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.conv = nn.Conv2d(8, 16, 1)
                    self.Z = None

                def forward(self, x, labels=None, debug=False):
                    out = self.conv(x)
                    if not self.training:
                        return out.sigmoid().cpu()
                    truth = labels.cpu().numpy()
                    if self.Z is None:
                        self.Z = out.mean().item()
                    if debug:
                        print(out.abs().max().item())
                    if torch.isnan(out).any():
                        print(out.sum().item())
                    return out, truth

            class Encoder(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.rnn = nn.GRU(8, 8, batch_first=True)

                def forward(self, x, lengths):
                    for i in range(x.size(0)):
                        x[i, lengths[i].item():] = 0
                    packed = pack_padded_sequence(x, lengths.cpu().numpy(), batch_first=True, enforce_sorted=False)
                    return self.rnn(packed)[1]

            class PostProcess(nn.Module):
                @torch.no_grad()
                def forward(self, outputs):
                    return [{"scores": o.max().item()} for o in outputs]
            """,
        "train.py": """\
            import torch
            from models import YOLOLayer, Encoder, PostProcess

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            yolo, enc, post = YOLOLayer().to(device), Encoder().to(device), PostProcess()

            def train(loader, optimizer):
                for images, labels, seqs, lengths in loader:
                    out, truth = yolo(images.to(device), labels.to(device))
                    h = enc(seqs.to(device), lengths.to(device))
                    loss = out.mean() + h.mean()
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    results = post([o for o in out])
            """})
    results = check_files(["train.py", "models.py"], Settings(root=str(project)), jobs=1)
    assert [c for c in codes(results, "models.py") if c[1] == "TD603"] == [(16, "TD603"), (21, "TD603"), (32, "TD603")]


def test_a_loss_that_keeps_its_partial_losses_and_their_total_holds_nothing_to_move(project: Path) -> None:
    """A detection loss (a ``_Loss`` subclass) keeps settings and a CPU tensor of anchors, and its ``forward`` keeps
    its partial losses on ``self`` and their total (``self.loss_tot = self.loss_coord + self.loss_cls``): results of
    the call, no state; ``.to()`` would move nothing of it (TD201 quiet). One that keeps a layer's output total
    beside a layer still holds parameters."""
    write(project, {
        "loss.py": """\
            import torch
            import torch.nn as nn

            class RegionLoss(nn.modules.loss._Loss):
                def __init__(self, num_classes, anchors, coord_scale=1.0):
                    super().__init__()
                    self.num_classes = num_classes
                    self.anchors = torch.Tensor(anchors)
                    self.coord_scale = coord_scale

                def forward(self, output, target):
                    mse = nn.MSELoss()
                    self.loss_coord = self.coord_scale * mse(output[:, :4], target[:, :4])
                    self.loss_cls = self.coord_scale * 2 * nn.functional.cross_entropy(output[:, 4:], target[:, 4].long())
                    self.loss_tot = self.loss_coord + self.loss_cls
                    return self.loss_tot, self.loss_coord, self.loss_cls

            class ProjectedLoss(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.proj = nn.Linear(8, 8)

                def forward(self, output, target):
                    self.loss_a = (self.proj(output) - target).abs().mean()
                    self.loss_tot = self.loss_a * 2
                    return self.loss_tot
            """,
        "train.py": """\
            import torch
            from loss import ProjectedLoss, RegionLoss

            def train(model, loader, optimizer, anchors):
                model.cuda()
                criterion = RegionLoss(20, anchors)
                projected = ProjectedLoss()
                for images, labels in loader:
                    images, labels = images.cuda(), labels.cuda()
                    logits = model(images)
                    loss, _, _ = criterion(logits, labels)
                    loss = loss + projected(logits, labels)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
            """,
    })
    results = check_files(["train.py", "loss.py"], Settings(root=str(project), select=("TD201",)))
    assert codes(results, "train.py") == [(7, "TD201")]


def test_a_map_location_parameter_that_no_call_gives_is_no_map_location(project: Path) -> None:
    """``def load_checkpoint(path, map_location=None): return torch.load(path, map_location=map_location)``, and the
    training script calls ``utils.load_checkpoint(ckpt_dir)``: the keyword is there, its value None, so a checkpoint
    saved on a GPU fails to load on a CPU-only machine (TD502). One whose callers pass it, one that nobody calls, and
    a method are quiet."""
    write(project, {
        "utils.py": """\
            import torch

            def load_checkpoint(ckpt_path, map_location=None):
                return torch.load(ckpt_path, map_location=map_location, weights_only=True)

            def load_state(path, map_location=None):
                return torch.load(path, map_location=map_location, weights_only=True)

            def load_unused(path, map_location=None):
                return torch.load(path, map_location=map_location, weights_only=True)

            class Saver:
                def load(self, path, map_location=None):
                    return torch.load(path, map_location=map_location, weights_only=True)
            """,
        "train.py": """\
            import torch
            import utils

            G = torch.nn.Linear(2, 2).to("cuda" if torch.cuda.is_available() else "cpu")
            G.load_state_dict(utils.load_checkpoint("ckpt.pt")["G"])
            state = utils.load_state("s.pt", map_location="cpu")
            saved = utils.Saver().load("s.pt")
            """,
    })
    results = check_files(["utils.py", "train.py"], Settings(root=str(project), select=("TD502",)))
    assert codes(results, "utils.py") == [(4, "TD502")]
    assert "passes `map_location=map_location`, a parameter no call gives" in results[0].findings[0].message


@pytest.mark.parametrize("wrapped", [True, False])
def test_inputs_of_a_model_the_trainer_class_is_handed_wrapped_in_data_parallel_stay_on_the_host(
        project: Path, wrapped: bool) -> None:
    """A trainer class's ``train(model, ...)`` (a method called through the class, ``Trainer.train(model, ...)``)
    hands the model to ``Trainer.epoch_train(model, ...)``, maybe after ``model = model.cuda()``; the script wraps it
    in ``nn.DataParallel`` first, whose forward scatters the CPU inputs to the GPUs: only the targets need moving
    (no TD302). A script that does not wrap it feeds a CUDA model CPU inputs (TD302)."""
    write(project, {
        "materials.py": """\
            import torch

            class Trainer():
                def train(model, loader, optimizer, checkpoint, epochs):
                    if checkpoint is not None:
                        model.load_state_dict(torch.load(checkpoint, map_location="cpu", weights_only=True))
                        model = model.cuda()
                    for epoch in range(epochs):
                        Trainer.epoch_train(model, loader, optimizer)

                def epoch_train(model, loader, optimizer):
                    model.train()
                    for images, target in loader:
                        target = target.cuda(non_blocking=True)
                        loss = torch.nn.functional.cross_entropy(model(images), target)
                        optimizer.zero_grad()
                        loss.backward()
                        optimizer.step()
            """,
        "run.py": f"""\
            import torch
            from materials import Trainer

            model = torch.nn.Linear(8, 4).cuda()
            {"model = torch.nn.DataParallel(model).cuda()" if wrapped else "model = model.cuda()"}
            loader = torch.utils.data.DataLoader([], batch_size=4, pin_memory=True, num_workers=2)
            Trainer.train(model, loader, torch.optim.SGD(model.parameters(), lr=0.1), None, 3)
            """,
    })
    results = check_files(["materials.py", "run.py"], Settings(root=str(project), select=("TD302",)))
    assert codes(results, "materials.py") == ([] if wrapped else [(15, "TD302")])


def test_a_loss_of_derived_settings_keeping_detached_terms_holds_nothing_to_move(project: Path) -> None:
    """A YOLO loss of another module keeps settings, some derived from others (``self.box_end = self.n_classes +
    self.n_boxes * 4``), and its forward keeps the last call's detached terms in a dict for logging: nothing ``.to()``
    would move (TD201 quiet). The same beside a layer holds parameters."""
    write(project, {
        "model.py": """\
            import torch
            import torch.nn as nn

            class GridLoss(nn.Module):
                def __init__(self, n_classes=20, n_boxes=2, lambda_coord=5.0):
                    super().__init__()
                    self.n_classes = n_classes
                    self.n_boxes = n_boxes
                    self.lambda_coord = lambda_coord
                    self.box_end = self.n_classes + (self.n_boxes * 4)
                    self.box_start = self.n_classes

                def forward(self, pred, target):
                    coord = ((pred[..., self.box_start:self.box_end] - target[..., self.box_start:self.box_end]) ** 2)
                    cls = ((pred[..., :self.box_start] - target[..., :self.box_start]) ** 2).sum(-1)
                    self.last_terms = {"coord": coord.mean().detach(), "class": cls.mean().detach()}
                    return self.lambda_coord * coord.mean() + cls.mean()

            class HeadLoss(nn.Module):
                def __init__(self, n_classes=20):
                    super().__init__()
                    self.n_classes = n_classes
                    self.box_start = self.n_classes
                    self.proj = nn.Linear(30, 30)

                def forward(self, pred, target):
                    self.last_terms = {"all": (self.proj(pred) - target).abs().mean().detach()}
                    return (self.proj(pred) - target).abs().mean()
            """,
        "train.py": """\
            import torch
            from model import GridLoss, HeadLoss

            def train(model, loader, optimizer, device):
                model.to(device)
                criterion = GridLoss(n_classes=20)
                head = HeadLoss()
                for images, targets in loader:
                    images, targets = images.to(device), targets.to(device)
                    output = model(images)
                    loss = criterion(output, targets) + head(output, targets)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
            """,
    })
    results = check_files(["train.py", "model.py"], Settings(root=str(project), select=("TD201",)))
    assert codes(results, "train.py") == [(7, "TD201")]


def test_a_home_made_module_base_of_another_module_is_no_torch_module(project: Path) -> None:
    """A homework's own autograd: ``class Module:`` (a plain class whose ``to()`` moves the tensors it lists) in
    ``hw_nn.py``, ``class Linear(Module)`` there and ``class Conv(Module)`` in another module importing it. Their
    tensors are no unregistered buffers (TD203): the class's own ``to()`` moves them. The same shape on
    ``torch.nn.Module`` is reported."""
    write(project, {
        "hw_nn.py": """\
            import torch

            class Module:
                def __init__(self):
                    self._parameters = []

                def to(self, device):
                    for name in self._parameters:
                        setattr(self, name, getattr(self, name).to(device))
                    return self

                def __call__(self, *args, ctx=None):
                    return self.forward(*args, ctx=ctx)

            class Linear(Module):
                def __init__(self, n_in, n_out):
                    super().__init__()
                    self.weight = torch.empty(n_out, n_in)
                    self.bias = torch.empty(n_out)
                    self._parameters = ["weight", "bias"]

                def forward(self, x, ctx=None):
                    return x @ self.weight.t() + self.bias
            """,
        "conv_nn.py": """\
            import torch
            from hw_nn import Module

            class Conv(Module):
                def __init__(self, channels):
                    super().__init__()
                    self.weight = torch.empty(channels, channels, 3, 3)
                    self._parameters = ["weight"]

                def forward(self, x, ctx=None):
                    return torch.nn.functional.conv2d(x, self.weight, padding=1)
            """,
        "torch_nn.py": """\
            import torch
            import torch.nn as nn

            class Scale(nn.Module):
                def __init__(self, n):
                    super().__init__()
                    self.factor = torch.ones(n)
                    self.proj = nn.Linear(n, n)

                def forward(self, x):
                    return self.proj(x) * self.factor
            """,
    })
    results = check_files(["hw_nn.py", "conv_nn.py", "torch_nn.py"], Settings(root=str(project), select=("TD203",)))
    assert codes(results, "hw_nn.py") == []
    assert codes(results, "conv_nn.py") == []
    assert codes(results, "torch_nn.py") == [(7, "TD203")]


def test_a_loader_made_at_the_top_of_a_data_module_and_imported_by_a_gpu_script(project: Path) -> None:
    """``data_loader.py`` builds ``train_loader = DataLoader(...)`` at module level and never reads it; ``train.py``
    imports it by name and moves its batches to CUDA: no pinned memory there. A loader of the same module that no
    importer takes, and one that the module itself iterates on the CPU, are not the GPU's."""
    write(project, {
        "data_loader.py": """\
            import torch
            from torch.utils.data import DataLoader, TensorDataset

            data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
            train_loader = DataLoader(data, batch_size=8, shuffle=True, num_workers=2)
            spare_loader = DataLoader(data, batch_size=8, num_workers=2)
            stats_loader = DataLoader(data, batch_size=8, num_workers=2)
            total = sum(x.sum() for x, _ in stats_loader)
            """,
        "train.py": """\
            import torch
            from data_loader import train_loader

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(8, 2).to(device)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in train_loader:
                x, y = x.to(device), y.to(device)
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            """,
    })
    results = check_files(["data_loader.py", "train.py"], Settings(root=str(project), select=("TD304",)))
    assert codes(results, "data_loader.py") == [(5, "TD304")]
