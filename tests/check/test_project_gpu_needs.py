"""What one module of a project tells the checker about another's GPU needs and steps: a helper that stops
without a GPU, a decoding loop's stop test read in a method another module's loop calls. (The project index itself is tested in test_project.py.)"""

from __future__ import annotations

from pathlib import Path

from tests.check.test_project import codes, project, write  # noqa: F401  (``project`` is a fixture)
from torchdoctor.check.runner import check_files
from torchdoctor.config import Settings

GPU_GUARD = """\
    import os
    import sys
    import torch

    def init_distributed_mode(args):
        if "RANK" in os.environ:
            args.gpu = int(os.environ["LOCAL_RANK"])
        elif torch.cuda.is_available():
            args.gpu = 0
        else:
            print("Does not support training without GPU.")
            sys.exit(1)
        torch.cuda.set_device(args.gpu)

    def announce(args):
        if not torch.cuda.is_available():
            print("no GPU: this will be slow")
    """


def test_cuda_hard_coded_after_a_helper_that_exits_without_a_gpu_is_quiet(project: Path) -> None:
    write(project, {
        "utils.py": GPU_GUARD,
        "train.py": """\
            import argparse
            import torch
            import utils

            def train(model, args):
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                for step in range(10):
                    loss = model(torch.randn(8, 4).cuda()).sum()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()

            def main(args):
                utils.init_distributed_mode(args)
                model = torch.nn.Linear(4, 4).cuda()
                train(model, args)

            if __name__ == "__main__":
                main(argparse.Namespace())
            """,
        "demo.py": """\
            import argparse
            import torch
            import utils

            def main(args):
                utils.announce(args)
                model = torch.nn.Linear(4, 4).cuda()
                print(model(torch.randn(2, 4).cuda()))

            if __name__ == "__main__":
                main(argparse.Namespace())
            """,
    })
    results = check_files(["train.py", "demo.py", "utils.py"], Settings(root=str(project), select=("TD101",)))
    assert codes(results, "train.py") == []  # utils.init_distributed_mode(args) stops the program without a GPU
    assert codes(results, "demo.py") == [(7, "TD101"), (8, "TD101")]  # a helper that only warns falls back to nothing


def test_a_decoding_loop_s_stop_test_in_a_method_another_module_calls_is_quiet(project: Path) -> None:
    write(project, {
        "beam.py": """\
            import torch
            from torch import nn

            class Beam(nn.Module):
                def __init__(self, model, k=4, max_len=50, eos=3):
                    super().__init__()
                    self.model, self.k, self.max_len, self.eos = model, k, max_len, eos

                def translate(self, src):
                    seqs = torch.zeros(self.k, self.max_len, dtype=torch.long, device=src.device)
                    best = 0
                    with torch.no_grad():
                        for step in range(1, self.max_len):
                            scores = self.model(src.float()).log_softmax(-1)
                            seqs[:, step] = scores.argmax(-1)
                            self.total += scores.max().item()
                            if (seqs == self.eos).any(1).sum().item() == self.k:
                                best = scores.max(-1)[0].argmax(0).item()
                                break
                    return seqs[best].tolist()
            """,
        "translate.py": """\
            import torch
            from torch import nn
            from beam import Beam

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            beam = Beam(nn.Linear(6, 10)).to(device)
            test_loader = [[1, 2, 3, 4, 5, 6]] * 100
            with open("pred.txt", "w") as f:
                for ids in test_loader:
                    out = beam.translate(torch.LongTensor([ids]).to(device))
                    f.write(" ".join(map(str, out)) + "\\n")
            """,
    })
    results = check_files(["beam.py", "translate.py"], Settings(root=str(project), select=("TD603",)))
    # the stop test and the read as it leaves are not per-step reads; the running total on every decoding step is
    assert codes(results, "beam.py") == [(16, "TD603")]


def test_a_trainer_class_handed_a_moved_model_runs_on_the_gpu(project: Path) -> None:
    trainer = """\
        import torch

        class Trainer:
            def __init__(self, model, optim, loss):
                self.model, self.optim, self.loss = model, optim, loss

            def train(self, batches):
                for batch in batches:
                    self.model.zero_grad()
                    loss = self.loss(self.model(batch.src), batch.labels).sum()
                    loss.backward()
                    print(loss.item())
                    self.optim.step()
        """
    main = """\
        import torch
        from torch import nn
        from trainer import Trainer

        class Batch:
            def __init__(self, device):
                self.src = torch.randn(2, 4).to(device)
                self.labels = torch.ones(2, 1).to(device)

        device = "cuda" if torch.cuda.is_available() else "cpu"
        model = nn.Linear(4, 1){move}
        t = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.MSELoss(reduction="none"))
        t.train([Batch(device) for _ in range(10)])
        """
    write(project, {"trainer.py": trainer, "main.py": main.format(move=".to(device)")})
    results = check_files(["main.py", "trainer.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "trainer.py") == [(12, "TD603")]  # the trainer moves nothing: its caller moved the model
    write(project, {"main.py": main.format(move="")})
    results = check_files(["main.py", "trainer.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "trainer.py") == []  # a model on the CPU: its reads wait for no GPU


def test_a_helper_module_s_factory_run_by_other_modules_forwards_copies_every_step(project: Path) -> None:
    write(project, {
        "nn_utils.py": """\
            import math
            import torch

            def timestep_embedding(t, dim):
                half = dim // 2
                freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / half).to(t.device)
                args = t[:, None].float() * freqs[None]
                return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)

            def grid(n, like):
                return torch.arange(n).to(like.device)
            """,
        "unet.py": """\
            import torch
            from torch import nn
            from nn_utils import grid, timestep_embedding

            class UNet(nn.Module):
                def __init__(self, ch):
                    super().__init__()
                    self.ch = ch
                    self.embed = nn.Linear(ch, ch)

                def forward(self, x, t):
                    return x + self.embed(timestep_embedding(t, self.ch)) + grid(self.ch, x)

                def features(self, x, t):
                    return self.embed(timestep_embedding(t, self.ch))

            print(grid(4, torch.zeros(1)))
            """,
    })
    results = check_files(["nn_utils.py", "unet.py"], Settings(root=str(project), select=("TD611",)))
    # run by forwards (and another model method); ``grid`` is also called once by the script itself
    assert codes(results, "nn_utils.py") == [(6, "TD611")]


def test_a_helper_that_reads_only_what_it_drew_on_the_host_syncs_nothing(project: Path) -> None:
    write(project, {
        "aug.py": """\
            import torch
            import torch.nn.functional as F

            def augment(img):
                shift = torch.empty(2).uniform_(-4, 4).round()
                pad = int(shift.abs().max().item())
                return F.pad(img, (pad, pad, pad, pad), mode="reflect")

            def brightness(img):
                return img * img.mean().item()
            """,
        "train.py": """\
            import torch
            from aug import augment, brightness

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            net = torch.nn.Conv2d(3, 1, 3).to(device)
            opt = torch.optim.SGD(net.parameters(), lr=0.1)
            for step in range(100):
                real = augment(torch.rand(8, 3, 32, 32, device=device))
                real = brightness(real)
                loss = net(real).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            """,
    })
    results = check_files(["train.py", "aug.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "aug.py") == [(10, "TD603")]  # brightness reads the device image; augment its host draw
    assert codes(results, "train.py") == []


def test_a_helper_module_s_default_branch_that_every_caller_skips_copies_nothing(project: Path) -> None:
    write(project, {
        "commons.py": """\
            import torch

            def squeeze(x, x_mask=None, n=2):
                b, c, t = x.size()
                if x_mask is not None:
                    x_mask = x_mask[:, :, n - 1::n]
                else:
                    x_mask = torch.ones(b, 1, t // n).to(device=x.device, dtype=x.dtype)
                return x.view(b, c * n, t // n) * x_mask, x_mask

            def pad_mask(x, x_mask=None):
                if x_mask is None:
                    x_mask = torch.ones(x.size(0), 1, x.size(2)).to(x.device)
                return x * x_mask
            """,
        "models.py": """\
            import torch
            from torch import nn
            import commons

            class Flow(nn.Module):
                def __init__(self, c):
                    super().__init__()
                    self.proj = nn.Conv1d(2 * c, 2 * c, 1)

                def forward(self, x, x_mask):
                    x, x_mask = commons.squeeze(x, x_mask, 2)
                    return commons.pad_mask(self.proj(x))
            """,
    })
    results = check_files(["commons.py", "models.py"], Settings(root=str(project), select=("TD611",)))
    assert codes(results, "commons.py") == [(13, "TD611")]  # every squeeze call passes the mask; pad_mask's omits it


def test_a_loader_factory_whose_importer_trains_on_the_gpu_is_told_about_workers(project: Path) -> None:
    data = """\
        import torch

        def make_loaders(train_set, test_set, batch_size):
            train_loader = torch.utils.data.DataLoader(train_set, batch_size=batch_size)
            test_loader = torch.utils.data.DataLoader(test_set, batch_size=batch_size)
            return train_loader, test_loader
        """
    train = """\
        import torch
        import torch.nn.functional as F
        from data import make_loaders

        ds = torch.utils.data.TensorDataset(torch.randn(64, 784), torch.randint(0, 10, (64,)))
        train_loader, test_loader = make_loaders(ds, ds, 64)
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model = torch.nn.Linear(784, 10).to(device)
        opt = torch.optim.Adam(model.parameters())
        for x, y in train_loader:
            x, y = x.to(device), y.to(device)
            loss = F.cross_entropy(model(x), y)
            {step}
        """
    write(project, {"data.py": data, "train.py": train.format(step="opt.zero_grad(); loss.backward(); opt.step()")})
    results = check_files(["data.py", "train.py"], Settings(root=str(project), select=("TD304", "TD305")))
    assert codes(results, "data.py") == [(4, "TD304"), (4, "TD305"), (5, "TD304"), (5, "TD305")]
    write(project, {"train.py": train.format(step="print(loss.item())")})  # an evaluation: workers are its own business
    results = check_files(["data.py", "train.py"], Settings(root=str(project), select=("TD304", "TD305")))
    assert codes(results, "data.py") == [(4, "TD304"), (5, "TD304")]


def test_a_module_named_like_a_test_that_the_program_calls_is_judged(project: Path) -> None:
    write(project, {
        "batch_test.py": """\
            import torch

            def test(model, users):
                scores = []
                for start in range(0, len(users), 8):
                    batch = torch.tensor(users[start:start + 8])
                    out = model(batch.to(next(model.parameters()).device))
                    scores.append(out.detach().cpu())
                return torch.cat(scores)
            """,
        "main.py": """\
            import torch
            from torch import nn
            from batch_test import test

            dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = nn.Embedding(100, 4).to(dev)
            opt = torch.optim.Adam(model.parameters())
            for epoch in range(3):
                loss = model(torch.arange(10, device=dev)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                res = test(model, list(range(100)))
            """,
    })
    results = check_files(["main.py", "batch_test.py"], Settings(root=str(project), select=("TD401", "TD603")))
    # NGCF's evaluation module: main.py calls its test(); its outputs are kept on the host, one copy a chunk
    assert codes(results, "batch_test.py") == [(7, "TD401")]
    main = (project / "main.py").read_text().replace("from batch_test import test", "from batch_test import *")
    (project / "main.py").write_text(main)  # as NGCF writes it: the star import's calls are followed too
    results = check_files(["main.py", "batch_test.py"], Settings(root=str(project), select=("TD401", "TD603")))
    assert codes(results, "batch_test.py") == [(7, "TD401")]


def test_loaders_a_factory_returns_in_a_tuple_feed_the_module_that_trains_on_them(project: Path) -> None:
    write(project, {
        "data.py": """\
            import torch
            from torch.utils.data import DataLoader

            def get_data(batch):
                ds = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
                train_dl = DataLoader(ds, batch_size=batch)
                valid_dl = DataLoader(ds, batch_size=batch)
                return train_dl, valid_dl, 2

            if __name__ == "__main__":
                train_dl, valid_dl, n = get_data(8)
                print(n)
            """,
        "main.py": """\
            import torch
            from data import get_data

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(4, 2).to(device)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            train_dl, valid_dl, n = get_data(8)
            for x, y in train_dl:
                loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
                opt.zero_grad()
                loss.backward()
                opt.step()
            """,
    })
    results = check_files(["data.py", "main.py"], Settings(root=str(project), select=("TD304",)))
    # the __main__ demo reads neither loader; main.py, another module, trains on them (pytorch/examples'
    # language_translation)
    assert codes(results, "data.py") == [(6, "TD304"), (7, "TD304")]


CRITERIONS = """\
    import torch
    import torch.nn.functional as F

    class NCESoftmaxLoss(torch.nn.Module):
        def forward(self, logits):
            label = torch.zeros([logits.size(0)]).cuda().long()
            return F.cross_entropy(logits, label)
    """


def test_a_loss_class_every_other_module_makes_after_asserting_a_gpu_is_quiet(project: Path) -> None:
    """``NCESoftmaxLoss``'s forward hard-codes ``.cuda()``; the only module that makes one does so after ``assert
    args.gpu is not None and torch.cuda.is_available()``: GPU-only code, not TD101. Made by a module that asks
    nothing, the same class crashes without a GPU."""
    train = """\
        import torch
        from criterions import NCESoftmaxLoss

        def main(args, loader):
            assert args.gpu is not None and torch.cuda.is_available()
            model = torch.nn.Linear(4, 4).cuda(args.gpu)
            criterion = NCESoftmaxLoss().cuda(args.gpu)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in loader:
                loss = criterion(model(x.cuda(args.gpu)))
                opt.zero_grad()
                loss.backward()
                opt.step()
        """
    write(project, {"criterions.py": CRITERIONS, "train.py": train})
    results = check_files(["criterions.py", "train.py"], Settings(root=str(project)))
    assert [c for c in codes(results, "criterions.py") if c[1] == "TD101"] == []
    write(project, {"train.py": train.replace("    assert args.gpu is not None and torch.cuda.is_available()\n", "")})
    results = check_files(["criterions.py", "train.py"], Settings(root=str(project)))
    assert [c for c in codes(results, "criterions.py") if c[1] == "TD101"] == [(6, "TD101")]


def test_a_config_dataclass_whose_device_attribute_is_cuda_makes_the_program_a_gpu_one(project: Path) -> None:
    """``cfg = config.TrainConfig()`` of a ``@dataclass`` whose class attribute is ``device = "cuda:0"``: the loaders
    that feed ``model.to(cfg.device)`` want pinned memory (TD304), and the loop module that moves batches to
    ``config.device`` reads ``loss.item()`` from the GPU every step (TD603). With ``device = "cpu"``, neither."""
    files = {
        "config.py": """\
            from dataclasses import dataclass

            @dataclass
            class TrainConfig:
                device = "cuda:0"
                num_workers = 2
            """,
        "loop.py": """\
            import torch

            def train(config, loader, model, opt):
                for x, y in loader:
                    x, y = x.to(config.device), y.to(config.device)
                    loss = torch.nn.functional.mse_loss(model(x), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    print({"loss": loss.item()})
            """,
        "train.py": """\
            import torch
            from torch.utils.data import DataLoader, TensorDataset
            import config
            from loop import train

            cfg = config.TrainConfig()
            loader = DataLoader(TensorDataset(torch.randn(64, 3), torch.randn(64, 1)), batch_size=8,
                                num_workers=cfg.num_workers)
            model = torch.nn.Linear(3, 1).to(cfg.device)
            train(cfg, loader, model, torch.optim.Adam(model.parameters()))
            """,
    }
    write(project, files)
    paths = ["config.py", "loop.py", "train.py"]
    results = check_files(paths, Settings(root=str(project)))
    assert codes(results, "train.py") == [(7, "TD304")] and codes(results, "loop.py") == [(10, "TD603")]
    write(project, {"config.py": files["config.py"].replace('"cuda:0"', '"cpu"')})
    results = check_files(paths, Settings(root=str(project)))
    assert codes(results, "train.py") == [] and codes(results, "loop.py") == []


def test_a_loader_kept_on_an_object_that_a_gpu_script_iterates(project: Path) -> None:
    """``self.data = DataLoader(...)`` in a data class's ``__init__`` (per mode), never read in its own module: the GPU
    script that makes ``BtsDataLoader(args, "test")`` iterates ``loader.data``, so the test-mode loader without
    ``pin_memory`` is told (TD304); the pinned train-mode one is not."""
    write(project, {
        "data.py": """\
            import torch
            from torch.utils.data import DataLoader, TensorDataset

            class BtsDataLoader:
                def __init__(self, args, mode):
                    samples = TensorDataset(torch.randn(16, 3))
                    if mode == "train":
                        self.data = DataLoader(samples, args.batch_size, num_workers=2, pin_memory=True)
                    else:
                        self.data = DataLoader(samples, 1, shuffle=False, num_workers=1)
            """,
        "test.py": """\
            import argparse
            import torch
            from data import BtsDataLoader

            args = argparse.Namespace(batch_size=4)
            model = torch.nn.Linear(3, 1).cuda()
            dataloader = BtsDataLoader(args, "test")
            with torch.no_grad():
                for (x,) in dataloader.data:
                    print(model(x.cuda()).sum())
            """,
    })
    results = check_files(["data.py", "test.py"], Settings(root=str(project), select=("TD304",)))
    assert codes(results, "data.py") == [(10, "TD304")]


def test_ddp_around_a_model_class_of_another_module_with_batchnorm(project: Path) -> None:
    """``DDP(BtsModel(args).cuda(gpu))`` where ``BtsModel`` (models.py) holds a BatchNorm through its encoder part:
    each GPU normalises with its own statistics without ``convert_sync_batchnorm`` (TD706). A class with dropout and
    no BatchNorm needs no SyncBatchNorm."""
    models = """\
        from torch import nn

        class Encoder(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 8, 3)
                self.bn = nn.BatchNorm2d(8)

            def forward(self, x):
                return self.bn(self.conv(x))

        class BtsModel(nn.Module):
            def __init__(self, args):
                super().__init__()
                self.encoder = Encoder()
                self.head = nn.Conv2d(8, 1, 1)

            def forward(self, x):
                return self.head(self.encoder(x))

        class Plain(nn.Module):
            def __init__(self, args):
                super().__init__()
                self.conv = nn.Conv2d(3, 8, 3)
                self.drop = nn.Dropout(0.1)

            def forward(self, x):
                return self.drop(self.conv(x))
        """
    main = """\
        import torch
        import torch.distributed as dist
        from models import BtsModel

        def main_worker(gpu, args):
            dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
            torch.cuda.set_device(gpu)
            model = BtsModel(args)
            model.cuda(gpu)
            model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[gpu])
            return model
        """
    write(project, {"models.py": models, "main.py": main})
    results = check_files(["models.py", "main.py"], Settings(root=str(project), select=("TD706",)))
    assert codes(results, "main.py") == [(10, "TD706")]
    write(project, {"main.py": main.replace("BtsModel", "Plain")})
    results = check_files(["models.py", "main.py"], Settings(root=str(project), select=("TD706",)))
    assert codes(results, "main.py") == []
    # a synchronised BN imported under BatchNorm's name; and a distributed evaluation, which never trains
    write(project, {"models.py": models.replace(
        "from torch import nn", "from torch import nn\n        from abn import InPlaceABNSync as BatchNorm2d").replace(
        "nn.BatchNorm2d(8)", "BatchNorm2d(8)"), "main.py": main})
    results = check_files(["models.py", "main.py"], Settings(root=str(project), select=("TD706",)))
    assert codes(results, "main.py") == []
    write(project, {"models.py": models, "main.py": main.replace(
        "return model", "model.eval()\n            return model")})
    results = check_files(["models.py", "main.py"], Settings(root=str(project), select=("TD706",)))
    assert codes(results, "main.py") == []


def test_loaders_a_factory_hands_to_a_gpu_trainer_made_by_a_third_module(project: Path) -> None:
    """``dataloader = load_data(opt)`` (data.py builds a dict of loaders without pinned memory), then ``model =
    Ganomaly(opt, dataloader)`` of model.py, whose class moves its batches to ``cuda:0``: train.py names no device, but
    the loaders feed a GPU (TD304). Handed to a class that runs on the CPU, they stay quiet."""
    files = {
        "data.py": """\
            import torch
            from torch.utils.data import DataLoader, TensorDataset

            def load_data(opt):
                sets = {x: TensorDataset(torch.randn(32, 4)) for x in ("train", "test")}
                return {x: DataLoader(sets[x], batch_size=opt.batchsize, num_workers=2) for x in ("train", "test")}
            """,
        "model.py": """\
            import torch

            class Ganomaly:
                def __init__(self, opt, dataloader):
                    self.device = torch.device("cuda:0" if opt.device != "cpu" else "cpu")
                    self.net = torch.nn.Linear(4, 4).to(self.device)
                    self.dataloader = dataloader

                def train(self):
                    opt = torch.optim.Adam(self.net.parameters())
                    for (x,) in self.dataloader["train"]:
                        loss = self.net(x.to(self.device)).pow(2).mean()
                        opt.zero_grad()
                        loss.backward()
                        opt.step()
            """,
        "train.py": """\
            import argparse
            from data import load_data
            from model import Ganomaly

            opt = argparse.Namespace(batchsize=8, device="gpu")
            dataloader = load_data(opt)
            model = Ganomaly(opt, dataloader)
            model.train()
            """,
    }
    write(project, files)
    paths = ["data.py", "model.py", "train.py"]
    results = check_files(paths, Settings(root=str(project), select=("TD304",)))
    assert codes(results, "data.py") == [(6, "TD304")]
    write(project, {"model.py": files["model.py"].replace('"cuda:0" if opt.device != "cpu" else "cpu"', '"cpu"')})
    results = check_files(paths, Settings(root=str(project), select=("TD304",)))
    assert codes(results, "data.py") == []


def test_a_class_made_by_a_class_that_a_gpu_only_main_makes_is_gpu_only(project: Path) -> None:
    """``Scale()`` (scale.py) hard-codes ``torch.device("cuda:0")``; only ``Agent.__init__`` (agent.py) makes one, and
    only train.py's ``main`` makes an ``Agent``, after ``assert torch.cuda.is_available()``: GPU-only code two calls
    down, not TD101. Without the assert, the class crashes on a machine without a GPU."""
    train = """\
        import torch
        from agent import Agent

        def main():
            assert torch.cuda.is_available()
            agent = Agent()
            agent.act(torch.randn(3))
        """
    write(project, {
        "scale.py": """\
            import torch

            class Scale(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.register_buffer("v", torch.ones(1, device=torch.device("cuda:0")))
            """,
        "agent.py": """\
            import torch
            from scale import Scale

            class Agent:
                def __init__(self):
                    self.device = torch.device("cuda:0")
                    self.scale = Scale()

                def act(self, obs):
                    return obs.to(self.device) * self.scale.v
            """,
        "train.py": train,
    })
    paths = ["scale.py", "agent.py", "train.py"]
    results = check_files(paths, Settings(root=str(project), select=("TD101",)))
    assert codes(results, "scale.py") == [] and codes(results, "agent.py") == []
    write(project, {"train.py": train.replace("    assert torch.cuda.is_available()\n", "")})
    results = check_files(paths, Settings(root=str(project), select=("TD101",)))
    assert codes(results, "scale.py") == [(6, "TD101")]


def test_a_gpu_assert_in_the_ddp_branch_only_does_not_make_the_loss_module_gpu_only(project: Path) -> None:
    """yolov7's shape: train.py asserts ``torch.cuda.device_count() > opt.local_rank`` inside ``if opt.local_rank !=
    -1:`` of its ``__main__`` block (DDP mode only), then trains with ``ComputeLoss(model)``; a single-process run may
    be on the CPU, so loss.py's hard-coded ``device="cuda:0"`` is TD101. An assert before the call covers the run."""
    loss = """\
        import torch

        class ComputeLoss:
            def __init__(self, model):
                self.balance = torch.tensor([4.0, 1.0, 0.4], device="cuda:0")

            def __call__(self, p, targets):
                return ((p - targets) ** 2).mean() * self.balance[0]
        """
    train = """\
        import argparse
        import torch
        from loss import ComputeLoss

        def train(opt, device):
            model = torch.nn.Linear(4, 4).to(device)
            compute_loss = ComputeLoss(model)
            print(compute_loss(model(torch.randn(2, 4, device=device)), torch.zeros(2, 4, device=device)))

        if __name__ == "__main__":
            opt = argparse.Namespace(local_rank=-1)
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            if opt.local_rank != -1:
                assert torch.cuda.device_count() > opt.local_rank
                torch.cuda.set_device(opt.local_rank)
            train(opt, device)
        """
    write(project, {"loss.py": loss, "train.py": train})
    results = check_files(["loss.py", "train.py"], Settings(root=str(project), select=("TD101",)))
    assert codes(results, "loss.py") == [(5, "TD101")]
    write(project, {"train.py": train.replace("    train(opt, device)", "    assert torch.cuda.is_available()\n            train(opt, device)")})
    results = check_files(["loss.py", "train.py"], Settings(root=str(project), select=("TD101",)))
    assert codes(results, "loss.py") == []


def test_a_device_read_off_a_settings_class_and_kept_in_a_local_name(project: Path) -> None:
    """A TTS project keeps its settings as class attributes (``class Hyper: device_text2mel = "cuda:0"``) and its
    training function reads one into a local name (``device = Hyper.device_text2mel``) before ``.to(device)``: the
    program trains on the GPU, so the loss copied to the host on every batch (``loss.cpu().data.mean()``) is a read
    every step (TD603). A helper given a running average's formatted string (``log.add(avg(), step)`` of a plain class
    whose ``__call__`` returns ``"%4f" % ...``) reads no tensor with its ``float(loss)``. With ``"cpu"``, nothing."""
    files = {
        "hyper.py": """\
            class Hyper:
                batch_size = 32
                device_text2mel = "cuda:0"
            """,
        "train.py": """\
            import torch
            from torch import nn
            from hyper import Hyper

            class LogHelper:
                def __init__(self):
                    self.values = []

                def add(self, loss, step):
                    self.values.append((float(loss), int(step)))

            class MovingAverage:
                def __init__(self):
                    self.sum_, self.num_ = 0.0, 0

                def add(self, x):
                    self.sum_ += x
                    self.num_ += 1

                def __call__(self):
                    return "%4f" % (self.sum_ / self.num_)

            def train(batches):
                device = Hyper.device_text2mel
                graph = nn.Linear(4, 1).to(device)
                optimizer = torch.optim.Adam(graph.parameters())
                log, average = LogHelper(), MovingAverage()
                for step, (x, y) in enumerate(batches):
                    loss = nn.functional.l1_loss(graph(x.to(device)), y.to(device))
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    average.add(loss.cpu().data.mean())
                    log.add(average(), step)
            """,
    }
    write(project, files)
    paths = ["hyper.py", "train.py"]
    results = check_files(paths, Settings(root=str(project), select=("TD603",)))
    assert codes(results, "train.py") == [(33, "TD603")]
    write(project, {"train.py": files["train.py"].replace("Hyper.device_text2mel", '"cuda:0"')})
    results = check_files(paths, Settings(root=str(project), select=("TD603",)))
    assert codes(results, "train.py") == [(33, "TD603")]  # (the string's ``float`` still reads nothing)
    write(project, {"hyper.py": files["hyper.py"].replace('"cuda:0"', '"cpu"'), "train.py": files["train.py"]})
    results = check_files(paths, Settings(root=str(project), select=("TD603",)))
    assert codes(results, "train.py") == []


def test_ddp_around_a_model_one_of_the_builder_s_branches_makes_with_batchnorm(project: Path) -> None:
    """A segmentation script picks its model by a command-line option (``if args.model == "unet": model =
    BtsModel(...).to(device)``, ``elif ...: model = Plain(...).to(device)``) and wraps whatever it built in DDP: on the
    UNet's path the BatchNorm layers of models.py normalise per GPU (TD706), though the last branch's class has none.
    When no branch builds a class with BatchNorm, nothing is told."""
    models = """\
        from torch import nn

        class BtsModel(nn.Module):
            def __init__(self, n_classes):
                super().__init__()
                self.conv = nn.Conv2d(3, n_classes, 3)
                self.bn = nn.BatchNorm2d(n_classes)

        class Plain(nn.Module):
            def __init__(self, n_classes):
                super().__init__()
                self.conv = nn.Conv2d(3, n_classes, 3)
        """
    main = """\
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        from models import BtsModel, Plain

        def create_model(args, device):
            if args.model == "unet":
                model = BtsModel(3).to(device)
            elif args.model == "plain":
                model = Plain(3).to(device)
            else:
                raise ValueError(args.model)
            model = DDP(model, device_ids=[device])
            return model

        torch.distributed.init_process_group("nccl")
        """
    write(project, {"models.py": models, "main.py": main})
    results = check_files(["models.py", "main.py"], Settings(root=str(project), select=("TD706",)))
    assert codes(results, "main.py") == [(12, "TD706")]
    write(project, {"main.py": main.replace("model = BtsModel(3)", "model = Plain(4)")})
    results = check_files(["models.py", "main.py"], Settings(root=str(project), select=("TD706",)))
    assert codes(results, "main.py") == []


def test_loaders_over_splits_a_data_helper_was_told_to_put_on_the_gpu(project: Path) -> None:
    """A tabular benchmark prepares its splits with ``X_num, X_cat, ys = prepare_tensors(dataset, device=device)`` of
    its ``lib/data.py`` (rtdl's helper, which moves each split to the device it is told) and wraps them as
    ``TensorDataset(*(d["train"] for d in data_list))``: the batches are on the GPU already, pinning would fail
    (no TD304). Splits from a helper told no device are host tensors: TD304."""
    files = {
        "lib/__init__.py": "",
        "lib/data.py": """\
            import torch

            def prepare_tensors(dataset, device):
                X_num, Y = ({k: torch.as_tensor(v) for k, v in x.items()} for x in [dataset.X_num, dataset.y])
                if torch.device(device).type != "cpu":
                    X_num, Y = ({k: v.to(device) for k, v in x.items()} for x in [X_num, Y])
                return X_num, None, Y

            def load_arrays(dataset):
                return {k: torch.as_tensor(v) for k, v in dataset.X_num.items()}, None, dataset.y
            """,
        "run.py": """\
            import torch
            from torch.utils.data import DataLoader, TensorDataset
            from lib.data import prepare_tensors

            def run(dataset, model):
                device = torch.device("cuda")
                model.to(device)
                X_num, X_cat, ys = prepare_tensors(dataset, device=device)
                data_list = [X_num, ys] if X_cat is None else [X_num, X_cat, ys]
                train_loader = DataLoader(TensorDataset(*(d["train"] for d in data_list)), batch_size=256, num_workers=0)
                for x, y in train_loader:
                    model(x)
            """,
    }
    write(project, files)
    paths = ["lib/__init__.py", "lib/data.py", "run.py"]
    results = check_files(paths, Settings(root=str(project), select=("TD304",)))
    assert codes(results, "run.py") == []
    write(project, {"run.py": files["run.py"].replace("prepare_tensors(dataset, device=device)", "load_arrays(dataset)")
                    .replace("import prepare_tensors", "import load_arrays")})
    results = check_files(paths, Settings(root=str(project), select=("TD304",)))
    assert codes(results, "run.py") == [(10, "TD304")]
