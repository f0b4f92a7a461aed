"""Shapes of whole programs seen on public code that the single-file fixtures cannot hold: values one module hands
another (a device chosen in a script and given to a trainer class, loaders handed in a dict, a folder put on
``sys.path`` by a relative literal), notebooks, test files. Each was a miss or a wrong finding there."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.check.test_project import codes, write
from torchdoctor.check.runner import check_files
from torchdoctor.config import Settings


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    return tmp_path


TRAINER = """\
import torch.nn as nn


class Trainer:
    def __init__(self, model, optim, device):
        self.model = model.to(device)
        self.optim = optim
        self.device = device
        self.loss = nn.BCELoss(reduction="none")

    def train(self, batches, steps):
        for step, batch in enumerate(batches):
            self._accumulate([batch])
            if step >= steps:
                break

    def _accumulate(self, true_batches):
        self.optim.zero_grad()
        for batch in true_batches:
            src = batch.src.to(self.device)
            labels = batch.labels.to(self.device)
            loss = self.loss(self.model(src), labels.float())
            loss.sum().backward()
            kept = float(loss.cpu().data.numpy())
        self.optim.step()
"""


def test_a_device_chosen_in_a_script_and_handed_to_a_trainer_class_puts_it_on_the_gpu(project: Path) -> None:
    script = """\
        import torch
        import torch.nn as nn
        from trainer import Trainer

        device = "cuda" if torch.cuda.is_available() else "cpu"
        model = nn.Linear(4, 1)
        trainer = Trainer(model, torch.optim.Adam(model.parameters()), device)
        trainer.train([], 1000)
    """
    write(project, {"trainer.py": TRAINER, "train.py": script})
    results = check_files(["trainer.py", "train.py"], Settings(root=str(project)))
    assert codes(results, "trainer.py") == [(24, "TD603")]  # the per-step `.cpu()` read of the loss


def test_a_device_the_script_keeps_on_the_cpu_gives_the_trainer_no_gpu(project: Path) -> None:
    script = """\
        import torch
        import torch.nn as nn
        from trainer import Trainer

        device = "cpu"  # the tutorial's CPU run (it says "cuda" only here)
        model = nn.Linear(4, 1)
        trainer = Trainer(model, torch.optim.Adam(model.parameters()), device)
        trainer.train([], 1000)
    """
    write(project, {"trainer.py": TRAINER, "train.py": script})
    results = check_files(["trainer.py", "train.py"], Settings(root=str(project)))
    assert codes(results, "trainer.py") == []


HELPERS = """\
import torch


def loss_batch(loss_func, output, target, opt=None):
    loss = loss_func(output, target)
    if opt is not None:
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss


def train_val(model, params):
    device = params["device"]
    for epoch in range(params["num_epochs"]):
        model.train()
        for xb, yb in params["train_dl"]:
            loss_batch(params["loss_func"], model(xb.to(device)), yb.to(device), params["optimizer"])
"""


def _notebook(cells: list[str]) -> str:
    return json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "source": c, "outputs": [],
                                  "execution_count": None} for c in cells],
                       "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


@pytest.mark.parametrize("handed, expected", [
    ("params = {'num_epochs': 3, 'optimizer': opt, 'loss_func': nn.CrossEntropyLoss(),\n"
     "          'train_dl': train_dl, 'device': device}", [(3, "TD305")]),
    ("params = dict(num_epochs=3, optimizer=opt, loss_func=nn.CrossEntropyLoss(), train_dl=train_dl, device=device)",
     [(3, "TD305")]),
    ("params = {'num_epochs': 3, 'optimizer': opt, 'device': device}", []),  # no loader in it: nothing known
])
def test_loaders_handed_in_a_dict_to_another_module_s_training_loop(project: Path, handed: str, expected) -> None:
    cells = [
        "import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\nimport helpers",
        "device = torch.device('cuda:0' if torch.cuda.is_available() else 'cpu')\n"
        "ds = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))\n"
        "train_dl = DataLoader(ds, batch_size=8, shuffle=True, pin_memory=True)",
        f"model = nn.Linear(4, 2).to(device)\nopt = torch.optim.Adam(model.parameters())\n{handed}\n"
        "helpers.train_val(model, params)",
    ]
    write(project, {"helpers.py": HELPERS, "course.ipynb": _notebook(cells)})
    results = check_files(["helpers.py", "course.ipynb"], Settings(root=str(project)))
    assert [code for line, code in codes(results, "course.ipynb")] == [c for _, c in expected]


DATASETS = """\
import torch
from torch.utils.data import DataLoader, Dataset


class Flow(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.zeros(3), torch.zeros(2)


def fetch_dataloader(args):
    return DataLoader(Flow(), batch_size=args.batch_size, pin_memory=False, shuffle=True, num_workers=4)
"""


@pytest.mark.parametrize("appended, expected", [
    ("sys.path.append('core')", [(14, "TD304")]),
    ("sys.path.insert(0, 'core')", [(14, "TD304")]),
    ("sys.path.append('elsewhere')", []),  # no such folder: the import is not this module
])
def test_a_folder_put_on_sys_path_by_a_relative_literal_finds_the_module(project: Path, appended: str, expected) -> None:
    script = f"""\
import sys
{appended}
import torch
import torch.nn as nn
import datasets

model = nn.Linear(3, 2).cuda()
opt = torch.optim.Adam(model.parameters())


def train(args):
    for x, y in datasets.fetch_dataloader(args):
        x, y = x.cuda(), y.cuda()
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
"""
    write(project, {"core/datasets.py": DATASETS, "train.py": script})
    results = check_files(["core/datasets.py", "train.py"], Settings(root=str(project)))
    assert codes(results, "datasets.py") == expected


def test_a_notebook_unit_test_of_a_block_on_random_data_is_no_heldout_evaluation(project: Path) -> None:
    cells = [
        "import torch\nfrom torch import nn\n\ndef get_block(i, o):\n"
        "    return nn.Sequential(nn.Linear(i, o), nn.BatchNorm1d(o), nn.ReLU())",
        "def test_gen_block(in_features, out_features, num_test=1000):\n"
        "    block = get_block(in_features, out_features)\n"
        "    assert len(block) == 3\n"
        "    test_input = torch.randn(num_test, in_features)\n"
        "    test_output = block(test_input)\n"
        "    assert tuple(test_output.shape) == (num_test, out_features)\n"
        "    assert test_output.std() > 0.55\n\n"
        "test_gen_block(25, 12)",
        "def check_block(in_features, out_features, num_test=1000):\n"
        "    block = get_block(in_features, out_features)\n"  # (not named as a test: an evaluation)
        "    assert len(block) == 3\n"
        "    test_input = torch.randn(num_test, in_features)\n"
        "    test_output = block(test_input)\n"
        "    assert tuple(test_output.shape) == (num_test, out_features)\n"
        "    assert test_output.std() > 0.55\n\n"
        "check_block(25, 12)",
    ]
    write(project, {"course.ipynb": _notebook(cells)})
    results = check_files(["course.ipynb"], Settings(root=str(project)))
    assert codes(results, "course.ipynb") == [(5, "TD401")]  # check_block's forward (cell 3), not the unit test's


def test_a_sync_batchnorm_test_wrapped_in_data_parallel_needs_gpus_by_nature(project: Path) -> None:
    test = """\
        import torch
        from mylib import SyncBN


        def testSyncBN():
            bn = torch.nn.BatchNorm2d(8).cuda()
            sbn = torch.nn.DataParallel(SyncBN(8)).cuda()
            x = torch.rand(16, 8, 4, 4).cuda()
            assert torch.allclose(bn(x), sbn(x), atol=1e-3)


        def testSyncBNOfANamedModule():
            sync_bn = SyncBN(8).cuda().double()
            sync_bn = torch.nn.DataParallel(sync_bn).cuda()
            assert sync_bn.module.weight.is_cuda


        def testPlainBN():
            bn = torch.nn.BatchNorm2d(8).cuda()
            assert bn.weight.is_cuda
    """
    write(project, {"mylib.py": "import torch.nn as nn\n\nclass SyncBN(nn.BatchNorm2d):\n    pass\n",
                    "test_syncbn.py": test})
    results = check_files(["mylib.py", "test_syncbn.py"], Settings(root=str(project)))
    assert codes(results, "test_syncbn.py") == [(19, "TD101")]  # the single-GPU test only


LOSSES = """\
import torch.nn as nn
import torch.nn.functional as F


class DetLoss(nn.Module):
    def forward(self, pred, target):
        positive = target > 0
        if positive.sum() > 0:
            return F.l1_loss(pred[positive], target[positive])
        return pred.sum() * 0


class OhemLoss(nn.Module):
    def forward(self, pred, target):
        n_valid = target.ne(-1).sum()
        if n_valid < 16:
            print("few labels")
        return F.cross_entropy(pred, target, ignore_index=-1)
"""


WRAPPER = """\
        class ModelWithLoss(nn.Module):
            def __init__(self, model):
                super().__init__()
                self.model = model
                self.criterion = DetLoss()

            def forward(self, x, t):
                return self.criterion(self.model(x), t)

        net = ModelWithLoss(nn.Linear(4, 4)).to(device)
"""


@pytest.mark.parametrize("script, expected", [
    # the loss held by a wrapper module whose objects the loop calls (a detector's `ModelWithLoss`)
    (WRAPPER + """\
        for x, t in loader:
            loss = net(x.to(device), t.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, [(8, "TD603")]),
    # the loss called by the loop itself: a reduction by method (`n_valid = ....sum()`) is a device tensor too
    ("""\
        net = nn.Linear(4, 3).to(device)
        crit = OhemLoss().to(device)
        for x, t in loader:
            loss = crit(net(x.to(device)), t.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, [(16, "TD603")]),
    # the wrapper's objects are called once, outside any loop: its loss runs once
    (WRAPPER + """\
        x, t = next(iter(loader))
        print(net(x.to(device), t.to(device)))
    """, []),
], ids=["held_by_a_wrapper", "called_by_the_loop", "wrapper_called_once"])
def test_a_loss_module_s_test_of_a_device_tensor_runs_every_step_its_callers_run(project: Path, script: str,
                                                                                   expected) -> None:
    head = """\
        import torch
        import torch.nn as nn
        from losses import DetLoss, OhemLoss

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        loader = torch.utils.data.DataLoader(list(range(8)), batch_size=2, pin_memory=True, num_workers=2)
        opt = None
    """
    write(project, {"losses.py": LOSSES, "train.py": textwrap.dedent(head) + textwrap.dedent(script)})
    results = check_files(["losses.py", "train.py"], Settings(root=str(project)))
    assert codes(results, "losses.py") == expected
    if expected:
        [finding] = [f for r in results for f in r.findings if r.path.endswith("losses.py")]
        assert "Loss.forward` at train.py:" in finding.message  # the class's forward, where it is called


FIT = """\
import torch


class Trainer:
    def __init__(self, log_every=100):
        self.log_every = log_every

    def train(self, model, loader, opt):
        for epoch in range(3):
            self.train_session(model, loader, opt)

    def train_session(self, model, loader, opt):
        device = next(model.parameters()).device  # the device of the model it is handed
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = (model(x) - y).abs().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            print(loss.item())
"""


@pytest.mark.parametrize("call, expected", [
    ("trainer = Trainer()\ntrainer.train(model, loader, opt)", [(20, "TD603")]),
    ("Trainer(log_every=10).train(model, loader, opt)", [(20, "TD603")]),
    ("Trainer().train(torch.nn.Linear(4, 1), loader, opt)", []),  # a model left on the CPU: its batches stay there
], ids=["through_an_object", "through_a_chained_call", "model_on_the_cpu"])
def test_a_trainer_class_runs_on_the_device_of_the_moved_model_a_script_hands_it(project: Path, call: str,
                                                                                  expected) -> None:
    script = """\
        import torch
        from trainer.fit import Trainer

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model = torch.nn.Linear(4, 1).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = torch.utils.data.DataLoader(list(range(8)), batch_size=2, pin_memory=True, num_workers=2)
    """
    write(project, {"trainer/__init__.py": "", "trainer/fit.py": FIT,
                    "train.py": textwrap.dedent(script) + call + "\n"})
    results = check_files(["trainer/fit.py", "train.py"], Settings(root=str(project)))
    assert codes(results, "fit.py") == expected


@pytest.mark.parametrize("data, train, expected", [
    # loaders a factory returns in a dict comprehension (QM9 pipelines), to a script that trains on the GPU
    ("""\
        import torch
        from torch.utils.data import DataLoader, TensorDataset


        def get_loaders(bs, workers):
            sets = {s: TensorDataset(torch.randn(64, 4), torch.randn(64, 1)) for s in ("train", "valid")}
            return {s: DataLoader(ds, batch_size=bs, shuffle=s == "train", num_workers=workers) for s, ds in sets.items()}
    """, """\
        loaders = get_loaders(8, 2)
        for x, y in loaders["train"]:
            loss = ((model(x.to(device)) - y.to(device)) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, [(7, "TD304")]),
    # a loader factory whose importer trains through a method of a model class of a third module
    ("""\
        from torch.utils.data import DataLoader


        def get_loaders(ds, bs):
            return DataLoader(ds, batch_size=bs, shuffle=True, pin_memory=True)
    """, """\
        loader = get_loaders(None, 8)
        for epoch in range(3):
            model.run_epoch(loader, opt)
    """, [(5, "TD305")]),
    # the same factory for a script that only evaluates: no training program
    ("""\
        from torch.utils.data import DataLoader


        def get_loaders(ds, bs):
            return DataLoader(ds, batch_size=bs, shuffle=True, pin_memory=True)
    """, """\
        loader = get_loaders(None, 8)
        with torch.no_grad():
            for x, y in loader:
                print(model(x.to(device)).sum().item())
    """, []),
], ids=["dict_comprehension_of_loaders", "importer_trains_through_a_model_method", "importer_evaluates"])
def test_loaders_a_factory_builds_for_a_gpu_training_script(project: Path, data: str, train: str, expected) -> None:
    model = """\
        import torch


        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(4, 1)

            def forward(self, x):
                return self.fc(x)

            def run_epoch(self, loader, opt):
                for x, y in loader:
                    loss = (self(x.cuda()) - y.cuda()).pow(2).mean()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
    """
    head = """\
        import torch
        from data import get_loaders
        from model import Net

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model = Net().to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
    """
    write(project, {"data.py": data, "model.py": model, "train.py": textwrap.dedent(head) + textwrap.dedent(train)})
    results = check_files(["data.py", "model.py", "train.py"], Settings(root=str(project)))
    assert codes(results, "data.py") == expected


@pytest.mark.parametrize("loaders, epoch_body, expected", [
    ("return DataLoader(ds, batch_size=bs, sampler=DistributedSampler(ds), pin_memory=True, num_workers=2)",
     "", [(13, "TD701")]),
    ("return DataLoader(ds, batch_size=bs, sampler=DistributedSampler(ds), pin_memory=True, num_workers=2)",
     "loader.sampler.set_epoch(epoch)", []),
    ("return DataLoader(ds, batch_size=bs, sampler=DistributedSampler(ds, shuffle=False), pin_memory=True, "
     "num_workers=2)", "", []),
], ids=["sampler_of_a_helper", "set_epoch_called", "sampler_that_does_not_shuffle"])
def test_a_distributed_sampler_a_helper_module_builds_needs_set_epoch(project: Path, loaders: str, epoch_body: str,
                                                                      expected) -> None:
    helper = f"""\
        from torch.utils.data import DataLoader, DistributedSampler


        def load_data(ds, bs):
            {loaders}
    """
    script = f"""\
        import torch
        import torch.multiprocessing as mp
        from torch.distributed import init_process_group
        from torch.nn.parallel import DistributedDataParallel as DDP
        import loaders


        def main(rank, world, ds):
            init_process_group("nccl" if torch.cuda.is_available() else "gloo", rank=rank, world_size=world)
            loader = loaders.load_data(ds, 4)
            model = DDP(torch.nn.Linear(4, 1).to(rank), device_ids=[rank])
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(10):
                {epoch_body or "pass"}
                for x, y in loader:
                    loss = (model(x.to(rank)) - y.to(rank)).pow(2).mean()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
    """
    write(project, {"loaders.py": helper, "train.py": script})
    results = check_files(["loaders.py", "train.py"], Settings(root=str(project)))
    assert [c for c in codes(results, "train.py") if c[1] == "TD701"] == expected


@pytest.mark.parametrize("under, expected", [
    ("with torch.no_grad():", []),
    ("if True:", [(6, "TD401")]),
], ids=["callers_two_calls_up_without_grad", "callers_with_autograd"])
def test_an_inference_helper_whose_callers_two_calls_up_turn_autograd_off(project: Path, under: str, expected) -> None:
    data = """\
        import torch


        class Scales:
            def infer(self, model, img):
                return model(img)

            def multi_scale(self, model, img):
                out = torch.zeros(1, device=img.device)
                for s in [1.0, 1.5]:
                    out = out + self.infer(model, img * s).sum()
                return out
    """
    script = f"""\
        import torch
        from pkg.data import Scales

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


        def testval(model, loader):
            scales = Scales()
            model.eval()
            {under}
                for img in loader:
                    print(scales.multi_scale(model, img.to(device)))
    """
    write(project, {"pkg/__init__.py": "", "pkg/data.py": data, "evaluate.py": script})
    results = check_files(["pkg/data.py", "evaluate.py"], Settings(root=str(project)))
    assert codes(results, "data.py") == expected


@pytest.mark.parametrize("decorator, expected", [
    ("@torch.no_grad()", []),
    ("", [(9, "TD401")]),
], ids=["forward_turns_autograd_off", "forward_records_a_graph"])
def test_a_model_class_whose_base_lives_in_a_third_module(project: Path, decorator: str, expected) -> None:
    base = """\
        import torch


        class BaseModule(torch.nn.Module):
            def relocate_input(self, xs):
                device = next(self.parameters()).device
                return [x.to(device) for x in xs]
    """
    vc = f"""\
        import torch
        from model.base import BaseModule


        class DiffVC(BaseModule):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(8, 8)

            {decorator or "# (no decorator)"}
            def forward(self, x):
                return self.fc(x), x
    """
    script = """\
        import torch
        from model import DiffVC

        use_gpu = torch.cuda.is_available()
        generator = DiffVC()
        if use_gpu:
            generator = generator.cuda()
        generator.eval()
        encoded, source = generator.forward(torch.randn(1, 8))
    """
    write(project, {"model/__init__.py": "from .vc import DiffVC\n", "model/base.py": base, "model/vc.py": vc,
                    "infer.py": script})
    results = check_files(["infer.py", "model/__init__.py", "model/base.py", "model/vc.py"], Settings(root=str(project)))
    assert [c for c in codes(results, "infer.py") if c[1] == "TD401"] == expected


@pytest.mark.parametrize("returned, expected", [
    ("loss.item() / 2.0", []),  # a Python number: TensorBoard reads nothing back
    ("loss.detach() / 2.0", [(15, "TD603")]),  # still a device tensor
], ids=["number", "device_tensor"])
def test_a_helper_of_another_module_that_returns_arithmetic_of_a_read(project: Path, returned: str, expected) -> None:
    helper = f"""\
        def compute_loss(model, x, y, criterion):
            loss = criterion(model(x), y)
            loss.backward()
            return {returned}
    """
    script = """\
        import torch
        from torch.utils.tensorboard import SummaryWriter
        import utils

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model = torch.nn.Linear(4, 1).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = torch.utils.data.DataLoader(list(range(8)), batch_size=2, pin_memory=True, num_workers=2)
        writer = SummaryWriter()
        for step, (x, y) in enumerate(loader):
            x, y = x.to(device), y.to(device)
            opt.zero_grad()
            avg_loss = utils.compute_loss(model, x, y, torch.nn.MSELoss())
            opt.step()
            writer.add_scalar("train_loss", avg_loss, step)
    """
    write(project, {"utils.py": helper, "train.py": script})
    results = check_files(["utils.py", "train.py"], Settings(root=str(project)))
    assert codes(results, "train.py") == expected


@pytest.mark.parametrize("wrapper_device, expected", [
    (".cuda()", [(6, "TD304")]),
    ("", []),  # a wrapper that keeps everything on the CPU
], ids=["wrapper_on_the_gpu", "wrapper_on_the_cpu"])
def test_batches_handed_to_a_pix2pix_style_wrapper_of_a_project_builder(project: Path, wrapper_device: str,
                                                                        expected) -> None:
    wrapper = f"""\
        import torch
        import torch.nn as nn


        class Wrapper:
            def __init__(self):
                self.net = nn.Conv2d(1, 2, 3){wrapper_device}
                self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1)

            def set_input(self, x):
                self.input = x{wrapper_device}

            def optimize(self):
                loss = self.net(self.input).mean()
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
    """
    script = """\
        import torch
        from torch.utils.data import DataLoader
        from models import get_model

        model = get_model()
        loader = DataLoader(torch.randn(16, 1, 8, 8), batch_size=4, num_workers=4)
        for x in loader:
            model.set_input(x)
            model.optimize()
    """
    write(project, {"models/__init__.py": "from .wrapper import Wrapper\n\n\ndef get_model():\n    return Wrapper()\n",
                    "models/wrapper.py": wrapper, "train.py": script})
    results = check_files(["train.py", "models/__init__.py", "models/wrapper.py"], Settings(root=str(project)))
    assert codes(results, "train.py") == expected


def test_a_model_class_whose_parts_include_itself_is_checked_without_error(project: Path) -> None:
    tree = """\
        import torch.nn as nn


        class Act(nn.Module):
            def forward(self, x):
                return x.relu()


        class Tree(nn.Module):
            def __init__(self, levels):
                super().__init__()
                self.act = Act()
                if levels > 0:
                    self.left = Tree(levels - 1)

            def forward(self, x):
                return self.act(x)
    """
    script = """\
        import torch
        from tree import Tree

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model = Tree(3)
        for x in torch.utils.data.DataLoader(torch.randn(8, 4), batch_size=2, pin_memory=True, num_workers=2):
            loss = model(x.to(device)).sum()
            loss.backward()
    """
    write(project, {"tree.py": tree, "train.py": script})
    results = check_files(["tree.py", "train.py"], Settings(root=str(project)))
    assert not [e for r in results for e in r.errors]  # (the project's lookups through its parts used to recurse for ever)
    assert codes(results, "tree.py") == []  # (checked through: no finding in the tree's own module)
