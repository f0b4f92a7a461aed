"""Which code of one module runs on every step of another module's loop: trainers' step methods, builders that
put the models on the GPU for the program that calls them. (The project index itself is tested in
test_project.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.check.test_project import codes, project, write  # noqa: F401  (``project`` is a fixture)
from torchdoctor.check.runner import check_files
from torchdoctor.config import Settings

BUILDER = """\
    import torch
    from torch import nn

    def build_model(params, with_head):
        emb = nn.Embedding(100, params.dim)
        head = nn.Linear(params.dim, 1) if with_head else None
        if params.cuda:
            emb.cuda()
            if with_head:
                head.cuda()
        return emb, head
    """

TRAINER = """\
    import torch
    import torch.nn.functional as F

    class Trainer:
        def __init__(self, emb, head, params):
            self.emb, self.head, self.params = emb, head, params
            self.opt = torch.optim.SGD(head.parameters(), lr=0.1)

        def head_step(self, stats):
            ids = torch.randint(0, 100, (self.params.batch_size,))
            x = self.emb(ids.cuda() if self.params.cuda else ids)
            loss = F.binary_cross_entropy_with_logits(self.head(x).squeeze(1), torch.ones(len(x), device=x.device))
            stats.append(loss.item())
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
    """


def test_a_step_method_called_in_a_range_loop_of_a_program_whose_builder_moves_models_in_place(project: Path) -> None:
    """``build_model`` moves what it returns with ``emb.cuda()`` statements (a module moves in place) under a
    ``--cuda`` flag: the program that calls it trains on the GPU, so the ``.item()`` of the step method that its
    ``range`` loop calls every iteration is a per-step read (TD603)."""
    write(project, {"models.py": BUILDER, "trainer.py": TRAINER, "main.py": """\
        import argparse
        from models import build_model
        from trainer import Trainer

        parser = argparse.ArgumentParser()
        parser.add_argument("--cuda", type=bool, default=True)
        params = parser.parse_args()
        emb, head = build_model(params, True)
        trainer = Trainer(emb, head, params)
        for epoch in range(10):
            stats = []
            for n_iter in range(0, 1000, 32):
                for _ in range(5):
                    trainer.head_step(stats)
        """})
    results = check_files(["models.py", "trainer.py", "main.py"], Settings(root=str(project)))
    assert (13, "TD603") in codes(results, "trainer.py")


def test_a_builder_that_moves_nothing_leaves_the_step_method_quiet(project: Path) -> None:
    """The look-alike: the builder's ``emb.cuda()`` is a value, not a statement (``moved = emb.cuda()``, then
    ``return emb``: the CPU module is returned), and nothing else says CUDA: no per-step read is reported."""
    builder = BUILDER.replace("        emb.cuda()\n", "        moved = emb.cuda()\n") \
        .replace("            if with_head:\n                head.cuda()\n", "")
    write(project, {"models.py": builder, "trainer.py": TRAINER, "main.py": """\
        from models import build_model
        from trainer import Trainer

        class P:
            cuda, dim, batch_size = False, 8, 4

        emb, head = build_model(P(), True)
        trainer = Trainer(emb, head, P())
        for epoch in range(10):
            stats = []
            for _ in range(5):
                trainer.head_step(stats)
        """})
    results = check_files(["models.py", "trainer.py", "main.py"], Settings(root=str(project)))
    assert (13, "TD603") not in codes(results, "trainer.py")


ALGORITHMS = """\
    import torch
    import torch.nn.functional as F

    ALGORITHMS = ["ERM", "Mixup"]

    def get_algorithm_class(name):
        if name not in globals():
            raise NotImplementedError(name)
        return globals()[name]

    class ERM(torch.nn.Module):
        def __init__(self, dim, classes):
            super().__init__()
            self.net = torch.nn.Linear(dim, classes)
            self.optimizer = torch.optim.Adam(self.net.parameters())

        def update(self, minibatches):
            x = torch.cat([x for x, y in minibatches])
            y = torch.cat([y for x, y in minibatches])
            loss = F.cross_entropy(self.net(x), y)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            return {"loss": loss.item()}

    class Mixup(ERM):
        def update(self, minibatches):
            loss = sum(F.cross_entropy(self.net(x), y) for x, y in minibatches)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            return {"loss": loss.item()}
    """

TRAIN = """\
    import torch
    from domainbed import algorithms

    def main(name, batches, steps):
        device = "cuda" if torch.cuda.is_available() else "cpu"
        algorithm_class = algorithms.get_algorithm_class(name)
        algorithm = algorithm_class(8, 3)
        algorithm.to(device)
        for step in range(steps):
            minibatches = [(x.to(device), y.to(device)) for x, y in next(batches)]
            step_vals = algorithm.update(minibatches)
    """


def test_the_methods_of_classes_a_registry_looks_up_by_name_run_every_step(project: Path) -> None:
    """``algorithm = algorithms.get_algorithm_class(name)(...)``, a registry that returns ``globals()[name]``: the
    training loop's ``algorithm.update(minibatches)`` may run the ``update`` of every class of that module, so each
    ``loss.item()`` there is a per-step read (TD603), though no module names the classes."""
    write(project, {"domainbed/__init__.py": "", "domainbed/algorithms.py": ALGORITHMS, "train.py": TRAIN})
    results = check_files(["domainbed/algorithms.py", "train.py"], Settings(root=str(project)))
    assert [c for c in codes(results, "algorithms.py") if c[1] == "TD603"] == [(24, "TD603"), (32, "TD603")]


def test_a_table_registry_runs_only_the_classes_it_lists(project: Path) -> None:
    """``return MODELS[name]`` of ``MODELS = {"erm": ERM}``: ``ERM.update`` runs every step; ``Mixup`` is in no
    table (and no other lookup), so its ``.item()`` stays quiet; nor does a registry's class read anything when
    the loop that calls it runs on the CPU only."""
    table = ALGORITHMS.replace('''        if name not in globals():
            raise NotImplementedError(name)
        return globals()[name]''', "        return MODELS[name]") + '\n    MODELS = {"erm": ERM}\n'
    write(project, {"domainbed/__init__.py": "", "domainbed/algorithms.py": table, "train.py": TRAIN})
    results = check_files(["domainbed/algorithms.py", "train.py"], Settings(root=str(project)))
    assert [c for c in codes(results, "algorithms.py") if c[1] == "TD603"] == [(22, "TD603")]
    cpu = TRAIN.replace('"cuda" if torch.cuda.is_available() else "cpu"', '"cpu"')
    write(project, {"domainbed/algorithms.py": ALGORITHMS, "train.py": cpu})
    results = check_files(["domainbed/algorithms.py", "train.py"], Settings(root=str(project)))
    assert [c for c in codes(results, "algorithms.py") if c[1] == "TD603"] == []


def test_factories_in_methods_a_step_of_another_module_runs_and_a_buffer_made_once(project: Path) -> None:
    """``GroupDRO.update``, run every step by ``algorithm.update(...)`` in train.py, copies ``torch.zeros(n)`` to the
    device each time (TD611), as does ``randomize``, which ``update`` calls at its top level; ``self.q``, filled
    under ``if not len(self.q):``, is made on the first call only, and so is ``self.w`` under ``if self.w is None:``."""
    algorithms = ALGORITHMS.replace('''    class Mixup(ERM):''', '''    class GroupDRO(ERM):
        def __init__(self, dim, classes):
            super().__init__(dim, classes)
            self.register_buffer("q", torch.Tensor())
            self.w = None

        def randomize(self, x):
            alpha = torch.rand(x.size(0), 1).to(x.device)
            return alpha * x

        def update(self, minibatches):
            device = "cuda" if minibatches[0][0].is_cuda else "cpu"
            if not len(self.q):
                self.q = torch.ones(len(minibatches)).to(device)
            if self.w is None:
                self.w = torch.ones(len(minibatches)).to(device)
            losses = torch.zeros(len(minibatches)).to(device)
            for m, (x, y) in enumerate(minibatches):
                losses[m] = F.cross_entropy(self.net(self.randomize(x)), y)
            loss = torch.dot(losses, self.q * self.w)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            return {"loss": loss}

    class Mixup(ERM):''')
    write(project, {"domainbed/__init__.py": "", "domainbed/algorithms.py": algorithms, "train.py": TRAIN})
    results = check_files(["domainbed/algorithms.py", "train.py"], Settings(root=str(project)))
    assert [c for c in codes(results, "algorithms.py") if c[1] == "TD611"] == [(33, "TD611"), (42, "TD611")]


def test_a_loss_module_told_its_device_by_a_function_whose_caller_passes_cuda(project: Path) -> None:
    """``NTXentLoss(device, ...)`` built in ``trainer.py``'s step, where ``device`` is a parameter of ``Trainer``
    that main.py passes a CUDA device: the loss module's ``forward`` runs on the GPU, and its
    ``torch.zeros(n).to(self.device)`` is a copy on every step (TD611). Called with the CPU, it is quiet."""
    files = {
        "models/__init__.py": "",
        "models/loss.py": """\
            import torch

            class NTXentLoss(torch.nn.Module):
                def __init__(self, device, batch_size):
                    super().__init__()
                    self.device, self.batch_size = device, batch_size
                    self.criterion = torch.nn.CrossEntropyLoss()

                def forward(self, zi, zj):
                    logits = zi @ zj.T
                    labels = torch.zeros(2 * self.batch_size).to(self.device).long()
                    return self.criterion(logits, labels)
            """,
        "trainer/__init__.py": "",
        "trainer/trainer.py": """\
            from models.loss import NTXentLoss

            def Trainer(model, optimizer, train_dl, device, batch_size):
                for data, aug in train_dl:
                    data, aug = data.float().to(device), aug.float().to(device)
                    criterion = NTXentLoss(device, batch_size)
                    loss = criterion(model(data), model(aug))
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
            """,
        "main.py": """\
            import argparse
            import torch
            from trainer.trainer import Trainer

            parser = argparse.ArgumentParser()
            parser.add_argument("--device", default="cuda", type=str)
            args = parser.parse_args()
            device = torch.device(args.device)
            model = torch.nn.Linear(8, 8).to(device)
            Trainer(model, torch.optim.Adam(model.parameters()), [], device, 4)
            """,
    }
    write(project, files)
    paths = ["models/loss.py", "trainer/trainer.py", "main.py"]
    results = check_files(paths, Settings(root=str(project)))
    assert [c for c in codes(results, "loss.py") if c[1] == "TD611"] == [(11, "TD611")]
    files["main.py"] = files["main.py"].replace('default="cuda"', 'default="cpu"')
    write(project, files)
    results = check_files(paths, Settings(root=str(project)))
    assert [c for c in codes(results, "loss.py") if c[1] == "TD611"] == []


def test_a_helper_s_verbose_branch_a_caller_turns_off_stays_quiet(project: Path) -> None:
    """``anneal(samples, net, verbose=False)`` from another module's loop: the helper's ``if verbose:`` prints of
    ``.item()`` never run for it (a single call after the loop turns them on once); a loop that passes
    ``verbose=True`` reads every step (TD603)."""
    sampler = """\
        import torch

        def anneal(x, net, steps=10, verbose=False):
            for _ in range(steps):
                grad = net(x)
                x = x + 0.01 * grad
                if verbose:
                    print(grad.norm().item())
            return x
        """
    runner = """\
        import torch
        from sampler import anneal

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        net = torch.nn.Linear(4, 4).to(device)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for batch in [torch.randn(8, 4) for _ in range(5)]:
            batch = batch.to(device)
            samples = anneal(batch, net, verbose=False)
            loss = (net(samples) - batch).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        final = anneal(batch, net, verbose=True)
        """
    write(project, {"sampler.py": sampler, "runner.py": runner})
    results = check_files(["sampler.py", "runner.py"], Settings(root=str(project)))
    assert [c for c in codes(results, "sampler.py") if c[1] == "TD603"] == []
    write(project, {"runner.py": runner.replace("samples = anneal(batch, net, verbose=False)",
                                                "samples = anneal(batch, net, verbose=True)")})
    results = check_files(["sampler.py", "runner.py"], Settings(root=str(project)))
    assert [c for c in codes(results, "sampler.py") if c[1] == "TD603"] == [(8, "TD603")]


def test_an_object_of_another_module_handed_to_the_step_function_as_a_parameter(project: Path) -> None:
    """``contrast = MemoryMoCo(...).cuda(gpu)`` made in ``main`` and handed to ``train_moco(loader, model, contrast)``,
    whose loop calls ``contrast(q, k)``: the forward of that class runs every step, so its ``self.params[0].item()``
    reads the GPU each time (TD603). A function some call hands another object resolves to no class."""
    files = {
        "memory.py": """\
            import torch
            from torch import nn

            class MemoryMoCo(nn.Module):
                def __init__(self, dim, t):
                    super().__init__()
                    self.register_buffer("params", torch.tensor([-1.0, t]))
                    self.register_buffer("memory", torch.randn(16, dim))

                def forward(self, q, k):
                    z = self.params[0].item()
                    return torch.cat([(q * k).sum(1, keepdim=True), q @ self.memory.T], dim=1) / z
            """,
        "train.py": """\
            import torch
            from memory import MemoryMoCo

            def train_moco(loader, model, contrast, opt, gpu):
                for x in loader:
                    q = model(x.cuda(gpu))
                    out = contrast(q, q.detach())
                    loss = out.logsumexp(1).mean()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()

            def main(gpu, loader):
                assert torch.cuda.is_available()
                model = torch.nn.Linear(8, 8).cuda(gpu)
                contrast = MemoryMoCo(8, 0.07).cuda(gpu)
                train_moco(loader, model, contrast, torch.optim.SGD(model.parameters(), lr=0.1), gpu)
            """,
    }
    write(project, files)
    results = check_files(["memory.py", "train.py"], Settings(root=str(project)))
    assert [c for c in codes(results, "memory.py") if c[1] == "TD603"] == [(11, "TD603")]
    files["train.py"] += "\n\ndef other(loader, model, gpu):\n    train_moco(loader, model, torch.nn.Identity(), None, gpu)\n"
    write(project, files)
    results = check_files(["memory.py", "train.py"], Settings(root=str(project)))
    assert [c for c in codes(results, "memory.py") if c[1] == "TD603"] == []


def test_a_mask_class_of_another_module_built_in_a_method_the_forward_calls(project: Path) -> None:
    """``ProbMask(B, L, device=V.device)`` made in ``ProbAttention._update_context``, which the attention's forward calls:
    its ``__init__`` (masking.py) runs on every forward, so its ``torch.ones(...).to(device)`` is a per-step copy
    (TD611). Made in a method nothing in the forward calls (``summary``), it runs once."""
    masking = """\
        import torch

        class ProbMask:
            def __init__(self, L, S, device="cpu"):
                self._mask = torch.ones(L, S, dtype=torch.bool).to(device).triu(1)

            @property
            def mask(self):
                return self._mask
        """
    attention = """\
        import torch
        from torch import nn
        from masking import ProbMask

        class ProbAttention(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.proj = nn.Linear(dim, dim)

            def _update_context(self, scores, values):
                mask = ProbMask(scores.size(-2), scores.size(-1), device=values.device)
                return torch.softmax(scores.masked_fill(mask.mask, -1e9), -1) @ values

            def forward(self, q, k, v):
                return self._update_context(self.proj(q) @ k.transpose(-1, -2), v)
        """
    write(project, {"masking.py": masking, "attention.py": attention})
    results = check_files(["masking.py", "attention.py"], Settings(root=str(project), select=("TD611",)))
    assert codes(results, "masking.py") == [(5, "TD611")]
    write(project, {"attention.py": attention.replace("return self._update_context(", "return self.proj(q) @ (").replace(
        "def _update_context(self, scores, values):", "def summary(self, scores, values):")})
    results = check_files(["masking.py", "attention.py"], Settings(root=str(project), select=("TD611",)))
    assert codes(results, "masking.py") == []


def test_the_body_of_if_param_is_not_none_no_caller_passes_never_runs(project: Path) -> None:
    """``forward(self, Q, length=None)`` whose ``if length is not None:`` builds a mask with ``torch.arange(n).to(dev)``:
    the encoders of the other modules call the layer with ``Q`` alone, so the branch never runs (TD611 quiet); an
    encoder that passes ``lengths`` turns it on."""
    attention = """\
        import torch
        from torch import nn

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

        class MultiHeadSelfAttention(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.w = nn.Linear(dim, dim)

            def forward(self, Q, length=None):
                scores = self.w(Q) @ Q.transpose(1, 2)
                if length is not None:
                    mask = torch.arange(Q.size(1)).to(device).expand(Q.size(0), -1) < length.to(device).view(-1, 1)
                    scores = scores.masked_fill(~mask.unsqueeze(1), -1e9)
                return torch.softmax(scores, -1) @ Q
        """
    encoder = """\
        from torch import nn
        from attention import MultiHeadSelfAttention

        class NewsEncoder(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.attn = MultiHeadSelfAttention(dim)

            def forward(self, x, lengths):
                return self.attn(x).mean(1)
        """
    write(project, {"attention.py": attention, "encoder.py": encoder})
    results = check_files(["attention.py", "encoder.py"], Settings(root=str(project), select=("TD611",)))
    assert codes(results, "attention.py") == []
    write(project, {"encoder.py": encoder.replace("self.attn(x)", "self.attn(x, lengths)")})
    results = check_files(["attention.py", "encoder.py"], Settings(root=str(project), select=("TD611",)))
    assert codes(results, "attention.py") == [(14, "TD611")]


def test_a_step_method_of_an_object_named_by_its_annotation_reads_the_loss_every_step(project: Path) -> None:
    """``bpr: utils.BPRLoss = loss_class`` (or a parameter annotated ``bpr: utils.BPRLoss``) whose ``stageOne`` steps
    the optimizer and ends with ``return loss.cpu().item()``, called for each minibatch of a CUDA loop in another
    module: the read waits for the step every time (TD603, LightGCN). A method that hands back a kept host copy
    (``return scores.cpu()``) stays quiet, and so does an object whose class nothing names."""
    files = {
        "utils.py": """\
            import torch

            class BPRLoss:
                def __init__(self, model, lr):
                    self.model = model
                    self.opt = torch.optim.Adam(model.parameters(), lr=lr)

                def stageOne(self, users, pos, neg):
                    loss = self.model.bpr_loss(users, pos, neg)
                    self.opt.zero_grad()
                    loss.backward()
                    self.opt.step()
                    return loss.cpu().item()

                def scores(self, users):
                    return self.model.rate(users).cpu()

            def minibatch(*tensors, batch_size):
                for i in range(0, len(tensors[0]), batch_size):
                    yield tuple(x[i:i + batch_size] for x in tensors)
            """,
        "procedure.py": """\
            import torch
            import utils

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            def train(samples, model, loss_class):
                bpr: utils.BPRLoss = loss_class
                users, pos, neg = (torch.as_tensor(samples[:, k]).long().to(device) for k in range(3))
                total = 0.0
                for u, p, n in utils.minibatch(users, pos, neg, batch_size=64):
                    total += bpr.stageOne(u, p, n)
                    kept = bpr.scores(u)
                return total, kept
            """,
    }
    write(project, files)
    results = check_files(["utils.py", "procedure.py"], Settings(root=str(project)))
    assert [c for c in codes(results, "utils.py") if c[1] == "TD603"] == [(13, "TD603")]
    annotated_parameter = files["procedure.py"].replace("loss_class):", "bpr: utils.BPRLoss):")
    files["procedure.py"] = "".join(line for line in annotated_parameter.splitlines(keepends=True)
                                    if "= loss_class" not in line)
    assert files["procedure.py"].count("bpr: utils.BPRLoss") == 1
    write(project, files)
    results = check_files(["utils.py", "procedure.py"], Settings(root=str(project)))
    assert [c for c in codes(results, "utils.py") if c[1] == "TD603"] == [(13, "TD603")]
    files["procedure.py"] = files["procedure.py"].replace("bpr: utils.BPRLoss", "bpr")
    write(project, files)
    results = check_files(["utils.py", "procedure.py"], Settings(root=str(project)))
    assert [c for c in codes(results, "utils.py") if c[1] == "TD603"] == []


def test_a_trainer_class_made_through_its_package_from_a_model_moved_in_place(project: Path) -> None:
    """``agent = algo.PPO(actor_critic, ...)`` of ``from a2c import algo`` (whose ``__init__.py`` imports ``PPO`` from
    ``ppo.py``), after ``actor_critic = Policy(...)`` and ``actor_critic.to(device)``; ``PPO.update`` runs the model it
    keeps through one of its methods (``self.actor_critic.evaluate_actions(...)``) in a minibatch loop that reads
    ``loss.item()`` each step: the class works on the GPU, so the read is TD603. Kept on the CPU: quiet."""
    files = {
        "a2c/__init__.py": "",
        "a2c/model.py": """\
            import torch.nn as nn

            class Policy(nn.Module):
                def __init__(self, n):
                    super().__init__()
                    self.v = nn.Linear(n, 1)

                def evaluate_actions(self, obs):
                    return self.v(obs)
            """,
        "a2c/algo/__init__.py": "from .ppo import PPO\n",
        "a2c/algo/ppo.py": """\
            import torch.nn as nn
            import torch.optim as optim

            class PPO:
                def __init__(self, actor_critic, lr, epochs):
                    self.actor_critic = actor_critic
                    self.epochs = epochs
                    self.optimizer = optim.Adam(actor_critic.parameters(), lr=lr)

                def update(self, rollouts):
                    total = 0.0
                    for e in range(self.epochs):
                        for obs, ret in rollouts.feed_forward_generator(4):
                            values = self.actor_critic.evaluate_actions(obs)
                            loss = (values - ret).pow(2).mean()
                            self.optimizer.zero_grad()
                            loss.backward()
                            nn.utils.clip_grad_norm_(self.actor_critic.parameters(), 0.5)
                            self.optimizer.step()
                            total += loss.item()
                    return total
            """,
        "main.py": """\
            import torch
            from a2c import algo
            from a2c.model import Policy

            def main(args, rollouts):
                device = torch.device("cuda:0" if args.cuda else "cpu")
                actor_critic = Policy(4)
                actor_critic.to(device)
                agent = algo.PPO(actor_critic, 1e-3, 4)
                rollouts.to(device)
                for j in range(100):
                    print(agent.update(rollouts))
            """,
    }
    write(project, files)
    paths = list(files)
    results = check_files(paths, Settings(root=str(project)))
    assert [c for c in codes(results, "ppo.py") if c[1] == "TD603"] == [(20, "TD603")]
    files["main.py"] = files["main.py"].replace('"cuda:0" if args.cuda else "cpu"', '"cpu"')
    write(project, files)
    results = check_files(paths, Settings(root=str(project)))
    assert [c for c in codes(results, "ppo.py") if c[1] == "TD603"] == []


@pytest.mark.parametrize("imported, expected", [("CPCLoss_sameSeq", [(11, "TD603")]),
                                                  ("CPCLoss, CPCLoss_sameSeq", [(6, "TD603"), (11, "TD603")])])
def test_a_loss_class_nothing_builds_computes_no_step(project: Path, imported: str, expected: list) -> None:
    """VQMIVC keeps ``CPCLoss`` beside the ``CPCLoss_sameSeq`` its training script builds, the same per-step
    ``.item()`` in both forwards: only the one that is built computes a loss each step. Imported too, both count."""
    files = {
        "model_encoder.py": """\
            import torch
            import torch.nn as nn

            class CPCLoss(nn.Module):
                def forward(self, z, c):
                    accuracy = (z.argmax(-1) == c.argmax(-1)).float().mean().item()
                    return (z - c).pow(2).mean(), accuracy

            class CPCLoss_sameSeq(nn.Module):
                def forward(self, z, c):
                    accuracy = (z.argmax(-1) == c.argmax(-1)).float().mean().item()
                    return (z - c).abs().mean(), accuracy
            """,
        "train.py": f"""\
            import torch
            from model_encoder import {imported}

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            encoder = torch.nn.Linear(8, 8).to(device)
            cpc = CPCLoss_sameSeq().to(device)
            optimizer = torch.optim.Adam(encoder.parameters())
            for x in [torch.randn(4, 8) for _ in range(10)]:
                z = encoder(x.to(device))
                loss, acc = cpc(z, x.to(device))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            """,
    }
    write(project, files)
    results = check_files(list(files), Settings(root=str(project), select=("TD603",)))
    assert codes(results, "model_encoder.py") == expected


def test_a_read_in_the_forward_of_a_loss_module_of_another_module_runs_every_step(project: Path) -> None:
    """DETR's ``SetCriterion.forward`` ends its normaliser with ``torch.clamp(num_boxes, min=1).item()``; a builder
    returns the criterion and the train function of a third module calls it on every batch: a loss is computed on
    every training step, so on a GPU the read waits every step (TD603). A model's forward of the same shape runs every
    step too (``Head``: the model-forward rule), but the loss of a program that stays on the CPU does not wait;
    statistics a loss reads under ``no_grad`` and returns (an L-BFGS driver's ``BRSMaskLoss``) are numbers its caller
    asks for."""
    files = {
        "models/__init__.py": "",
        "models/detr.py": """\
            import torch
            import torch.nn as nn

            class SetCriterion(nn.Module):
                def forward(self, outputs, targets):
                    num_boxes = torch.as_tensor([float(len(targets))], device=outputs.device)
                    num_boxes = torch.clamp(num_boxes, min=1).item()
                    return {"loss_ce": outputs.sum() / num_boxes}

            class Head(nn.Module):
                def forward(self, x):
                    scale = torch.clamp(x.abs().max(), min=1).item()
                    return x / scale

            class BRSMaskLoss(nn.Module):
                def forward(self, result, pos_mask):
                    loss = ((1 - result) * pos_mask).pow(2).sum()
                    with torch.no_grad():
                        f_max = result.abs().max().item()
                    return loss, f_max

            def build():
                return Head(), SetCriterion()
            """,
        "engine.py": """\
            def train_one_epoch(model, criterion, loader, optimizer, device):
                for samples, targets in loader:
                    outputs = model(samples.to(device))
                    loss = sum(criterion(outputs, targets.to(device)).values())
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
            """,
        "main.py": """\
            import torch
            from models.detr import build
            from engine import train_one_epoch

            def main(loader):
                device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                model, criterion = build()
                model.to(device)
                optimizer = torch.optim.AdamW(model.parameters())
                for epoch in range(10):
                    train_one_epoch(model, criterion, loader, optimizer, device)
            """,
    }
    write(project, files)
    results = check_files(list(files), Settings(root=str(project)))
    assert [c for c in codes(results, "detr.py") if c[1] == "TD603"] == [(7, "TD603"), (12, "TD603")]
    files["main.py"] = files["main.py"].replace('"cuda" if torch.cuda.is_available() else "cpu"', '"cpu"')
    write(project, files)
    results = check_files(list(files), Settings(root=str(project)))
    assert [c for c in codes(results, "detr.py") if c[1] == "TD603"] == []


def test_a_read_in_a_base_loss_forward_that_the_built_subclass_runs_through_super(project: Path) -> None:
    """Fast-SCNN: ``utils/loss.py``'s ``SoftmaxCrossEntropyOHEMLoss.forward`` copies the target to the host
    (``target.data.cpu().numpy()``); the trainer builds the subclass ``MixSoftmaxCrossEntropyOHEMLoss``, whose forward
    runs the base one through ``super(...).forward(...)``: a read on every training step (TD603). When the trainer
    builds neither, no step computes the loss (quiet)."""
    files = {
        "loss.py": """\
            import numpy as np
            import torch.nn as nn

            class OhemLoss(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.criterion = nn.CrossEntropyLoss()

                def forward(self, predict, target):
                    labels = target.data.cpu().numpy().ravel()
                    return self.criterion(predict, target) * float(np.bincount(labels).argmax() > 0)

            class MixOhemLoss(OhemLoss):
                def forward(self, preds, target):
                    loss = super(MixOhemLoss, self).forward(preds[0], target)
                    for pred in preds[1:]:
                        loss = loss + 0.4 * super(MixOhemLoss, self).forward(pred, target)
                    return loss
            """,
        "train.py": """\
            import torch
            from loss import MixOhemLoss

            def train(model, loader):
                device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                model.to(device)
                criterion = MixOhemLoss()
                opt = torch.optim.SGD(model.parameters(), lr=0.01)
                for images, targets in loader:
                    images, targets = images.to(device), targets.to(device)
                    loss = criterion(model(images), targets)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            """,
    }
    write(project, files)
    results = check_files(list(files), Settings(root=str(project), select=("TD603",)))
    assert codes(results, "loss.py") == [(10, "TD603")]
    assert "MixOhemLoss" in [r for r in results if r.path.endswith("loss.py")][0].findings[0].message
    files["train.py"] = files["train.py"].replace("from loss import MixOhemLoss", "from torch.nn import CrossEntropyLoss") \
        .replace("MixOhemLoss()", "CrossEntropyLoss()")
    write(project, files)
    results = check_files(list(files), Settings(root=str(project), select=("TD603",)))
    assert codes(results, "loss.py") == []


def test_a_device_handed_through_a_package_that_re_exports_the_loop_function(project: Path) -> None:
    """``import utils`` then ``utils.run(model, loader, device)``, where ``utils/__init__.py`` re-exports ``run`` from
    ``utils/run.py`` (a gloo ring all-reduce tutorial's shape): the module's loops run on the device its caller
    chose, so their per-step ``.item()`` reads are TD603 (the module is imported through its package, never by
    name). With the caller's device the CPU, nothing is told."""
    files = {
        "utils/__init__.py": "from .run import run\n",
        "utils/run.py": """\
            import torch

            def train_model(model, loader, optimizer, criterion, device):
                total = 0.0
                for inputs, target in loader:
                    inputs, target = inputs.to(device), target.to(device)
                    loss = criterion(model(inputs), target)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    total += loss.item()
                return total

            def run(model, loader, optimizer, criterion, epochs, device):
                for epoch in range(epochs):
                    train_model(model, loader, optimizer, criterion, device)
            """,
        "train.py": """\
            import torch
            import utils

            device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
            model = torch.nn.Linear(4, 2).to(device)
            loader = torch.utils.data.DataLoader(
                torch.utils.data.TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,))),
                batch_size=4, pin_memory=True, num_workers=2)
            utils.run(model, loader, torch.optim.SGD(model.parameters(), lr=0.1), torch.nn.CrossEntropyLoss(), 3, device)
            """,
    }
    write(project, files)
    paths = ["utils/__init__.py", "utils/run.py", "train.py"]
    results = check_files(paths, Settings(root=str(project), select=("TD603",)))
    assert codes(results, "run.py") == [(11, "TD603")]
    write(project, {"train.py": files["train.py"].replace(
        'torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")', 'torch.device("cpu")')})
    results = check_files(paths, Settings(root=str(project), select=("TD603",)))
    assert codes(results, "run.py") == []


def test_modules_imported_through_the_package_the_project_folder_itself_is(project: Path) -> None:
    """A project whose folder is itself a package (``pseudoESM/__init__.py``) imports its modules by the package's name
    (``from pseudoESM.trainer import Trainer``), as it runs with the folder's parent on ``sys.path``: the trainer's
    evaluation loop, told its CUDA device by train.py, reads ``.item()`` every step (TD603). A package name that is
    not the project's leads nowhere: the module is read alone, and its device is not known."""
    name = project.name
    files = {
        "__init__.py": "",
        "trainer.py": """\
            import torch

            class Trainer:
                def __init__(self, net, criterion, loader, device):
                    self.net, self.criterion, self.loader, self.device = net, criterion, loader, device

                def evaluate(self):
                    losses = []
                    self.net.eval()
                    with torch.no_grad():
                        for data in self.loader:
                            x, y = tuple(t.to(self.device) for t in data)
                            losses.append(self.criterion(self.net(x), y).item())
                    return sum(losses) / len(losses)
            """,
        "train.py": f"""\
            import torch
            from {name}.trainer import Trainer

            device = torch.device("cuda", 0)
            net = torch.nn.Linear(4, 2).to(device)
            loader = torch.utils.data.DataLoader(
                torch.utils.data.TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,))),
                batch_size=4, pin_memory=True, num_workers=2)
            Trainer(net, torch.nn.CrossEntropyLoss(), loader, device).evaluate()
            """,
    }
    write(project, files)
    paths = ["__init__.py", "trainer.py", "train.py"]
    results = check_files(paths, Settings(root=str(project), select=("TD603",)))
    assert codes(results, "trainer.py") == [(13, "TD603")]
    write(project, {"train.py": files["train.py"].replace(f"from {name}.trainer", "from other_package.trainer")})
    results = check_files(paths, Settings(root=str(project), select=("TD603",)))
    assert codes(results, "trainer.py") == []


TRIPLET_LOSS = """\
    import numpy
    import torch

    class TripletLoss(torch.nn.modules.loss._Loss):
        def __init__(self, compared_length, nb_random_samples):
            super().__init__()
            self.compared_length = compared_length
            if self.compared_length is None:
                self.compared_length = numpy.inf
            self.nb_random_samples = nb_random_samples

        def forward(self, batch, encoder, save_memory=False):
            lengths = batch.size(2) - torch.isnan(batch[:, 0]).sum(1).data.cpu().numpy()
            anchor = encoder(batch[:, :, : int(lengths.min())])
            loss = -torch.nn.functional.logsigmoid((anchor * anchor.roll(1, 0)).sum(1)).mean()
            if save_memory:
                loss.backward(retain_graph=True)
                loss = 0
                torch.cuda.empty_cache()
            return loss
    """


def test_a_loss_of_torch_s_loss_base_reached_through_a_package_that_loads_its_modules_at_run_time(project: Path) -> None:
    """A time-series encoder's triplet loss subclasses ``torch.nn.modules.loss._Loss`` (a module that holds nothing but
    numbers, ``numpy.inf`` among them) in ``losses/triplet_loss.py``; the package's ``__init__`` loads its modules at
    run time (``pkgutil``), and the wrapper reaches the class as ``losses.triplet_loss.TripletLoss`` after ``import
    losses``, training on the GPU. The loss's forward runs every step: its ``.cpu()`` read is TD603 and its
    ``torch.cuda.empty_cache()`` TD602 (in the forward, not in a loop). The loss holds nothing to move: no TD201 at
    its construction. Trained on the CPU, nothing is told."""
    files = {
        "losses/__init__.py": """\
            import pkgutil

            __all__ = []
            for loader, module_name, is_pkg in pkgutil.walk_packages(__path__):
                __all__.append(module_name)
                module = loader.find_module(module_name).load_module(module_name)
                exec("%s = module" % module_name)
            """,
        "losses/triplet_loss.py": TRIPLET_LOSS,
        "wrappers.py": """\
            import torch
            import losses

            class EncoderClassifier:
                def __init__(self, encoder, cuda=True):
                    self.cuda = cuda
                    self.encoder = encoder.cuda() if cuda else encoder
                    self.loss = losses.triplet_loss.TripletLoss(None, 2)
                    self.optimizer = torch.optim.Adam(self.encoder.parameters(), lr=0.001)

                def fit(self, loader, epochs):
                    for epoch in range(epochs):
                        for batch in loader:
                            if self.cuda:
                                batch = batch.cuda()
                            self.optimizer.zero_grad()
                            loss = self.loss(batch, self.encoder, save_memory=True)
                            loss.backward()
                            self.optimizer.step()
            """,
    }
    write(project, files)
    paths = ["losses/__init__.py", "losses/triplet_loss.py", "wrappers.py"]
    settings = Settings(root=str(project), select=("TD201", "TD602", "TD603"))
    results = check_files(paths, settings)
    assert codes(results, "triplet_loss.py") == [(13, "TD603"), (19, "TD602")]
    assert codes(results, "wrappers.py") == []
    write(project, {"wrappers.py": files["wrappers.py"].replace("cuda=True", "cuda=False").replace(
        "encoder.cuda() if cuda else encoder", "encoder").replace("batch = batch.cuda()", "pass")})
    results = check_files(paths, settings)
    assert codes(results, "triplet_loss.py") == [] and codes(results, "wrappers.py") == []


def _notebook(cells: list[str]) -> str:
    import json

    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": {"language": "python"}},
                       "cells": [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                                  "source": c} for c in cells]})


AGENT = """\
    import torch
    from torch import nn

    class PolicyNet(nn.Module):
        def __init__(self, d, n):
            super().__init__()
            self.fc = nn.Linear(d, n)

        def forward(self, x):
            return self.fc(x)

        @staticmethod
        def build(d, n, device="cpu"):
            return PolicyNet(d, n).to(device)

    class Trainer:
        def __init__(self, net, device="cpu"):
            self.net, self.device = net, device
            self.opt = torch.optim.Adam(net.parameters())

        def train(self, batches):
            for states, rewards in batches:
                loss = -(self.net(states.to(self.device)).log_softmax(1)[:, 0] * rewards.to(self.device)).mean()
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
                print(loss.item())
    """


@pytest.mark.parametrize("forced", [True, False])
def test_a_notebook_that_rebinds_its_device_to_the_cpu_hands_its_helpers_no_gpu(project: Path, forced: bool) -> None:
    """A course notebook picks ``device = torch.device('cuda' if ... else 'cpu')``, then, in the same cell, forces
    ``device = 'cpu'`` ("a GPU won't help here") and hands that name to the helpers of a sibling module, moving
    nothing itself: the helpers' per-step ``.item()`` runs on the CPU (no TD603). Without the forcing line, the
    notebook hands them a GPU."""
    setup = "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
    if forced:
        setup += "\n# Prefer the CPU here\ndevice = 'cpu'\nprint('Using device:', device)"
    write(project, {"hw/__init__.py": "", "hw/agent.py": AGENT})
    (project / "run.ipynb").write_text(_notebook([
        "import torch\nimport hw.agent as ag", setup,
        "net = ag.PolicyNet.build(4, 2, device)\ntrainer = ag.Trainer(net, device=device)",
        "batches = [(torch.randn(8, 4), torch.randn(8)) for _ in range(10)]\ntrainer.train(batches)",
    ]))
    results = check_files(["hw/agent.py", "run.ipynb"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "agent.py") == ([] if forced else [(27, "TD603")])


def test_a_loop_whose_step_is_a_method_of_a_model_class_elsewhere_is_no_evaluation(project: Path) -> None:
    """A seq2seq script's loop over ``train_loader`` calls ``seq2seq.train_model(data)``, a method of the model class
    of another module that zeroes the gradients, backpropagates and steps: a training loop, with no backward in
    sight (no TD401). Its validation loop, a plain forward after ``eval()``, is an evaluation (TD401)."""
    write(project, {
        "transformer_model.py": """\
            import torch
            import torch.nn as nn

            class Seq2Seq(nn.Module):
                def __init__(self, vocab):
                    super().__init__()
                    self.proj = nn.Linear(vocab, vocab)
                    self.loss_function = nn.CrossEntropyLoss()
                    self.optim = torch.optim.Adam(self.parameters())

                def forward(self, data):
                    return self.proj(data[:, 0])

                def train_model(self, data):
                    self.optim.zero_grad()
                    loss = self.loss_function(self.forward(data), data[:, 1].argmax(-1))
                    loss.backward()
                    self.optim.step()
                    return loss.data
            """,
        "train.py": """\
            import torch
            from transformer_model import Seq2Seq

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            seq2seq = Seq2Seq(32)
            seq2seq.to(device)
            train_loader = torch.utils.data.DataLoader(torch.randn(64, 2, 32), batch_size=8, pin_memory=True,
                                                       num_workers=2)
            for epoch in range(3):
                for b, data in enumerate(train_loader):
                    print("Train Loss:", seq2seq.train_model(data.to(device)).item())
                seq2seq.eval()
                for data in train_loader:
                    out = seq2seq(data.to(device))
                seq2seq.train()
            """,
    })
    results = check_files(["train.py", "transformer_model.py"], Settings(root=str(project), select=("TD401",)))
    assert codes(results, "train.py") == [(14, "TD401")]


def test_a_helper_of_another_module_that_hands_the_action_to_the_environment_it_steps(project: Path) -> None:
    """``eps_greedy(...)`` in ``utils.py``: ``actions = q.argmax(1).cpu().numpy()``, then ``envs.step(actions)`` in the
    same helper, called on every step of ``train.py``'s loop: the copy is the action the host simulator needs (no
    avoidable sync). The helper's loss read for a log line, on the same steps, is one."""
    write(project, {
        "utils.py": """\
            import random
            import torch

            def eps_greedy(obs, dqn, device, envs, eps=0.1):
                if random.random() > eps:
                    with torch.no_grad():
                        q = dqn(torch.from_numpy(obs).float().to(device))
                        actions = torch.argmax(q, 1).cpu().numpy()
                else:
                    actions = envs.action_space.sample()
                next_obs, rewards, dones = envs.step(actions)
                return next_obs, rewards

            def log_loss(history, loss):
                history.append(loss.item())
            """,
        "train.py": """\
            import torch
            from utils import eps_greedy, log_loss

            def train(dqn, envs, opt, steps):
                device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                dqn.to(device)
                obs, history = envs.reset(), []
                for i in range(steps):
                    obs, rewards = eps_greedy(obs, dqn, device, envs)
                    loss = dqn(torch.from_numpy(obs).float().to(device)).pow(2).mean()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    log_loss(history, loss)
            """,
    })
    results = check_files(["utils.py", "train.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "utils.py") == [(15, "TD603")]


VAE_TRAINER = """\
    import torch

    class Trainer:
        def __init__(self, model, optimizer, loss_f, device=torch.device("cpu")):
            self.device = device
            self.model = model.to(self.device)
            self.optimizer, self.loss_f = optimizer, loss_f

        def __call__(self, data_loader, epochs=10):
            for epoch in range(epochs):
                for data, _ in data_loader:
                    loss = self._train_iteration(data)
                    print(epoch, loss)

        def _train_iteration(self, data):
            data = data.to(self.device)
            loss = self.loss_f(data, self.model(data))
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            return loss.item()
    """


def test_a_trainer_class_imported_through_its_package_is_handed_the_gpu(project: Path) -> None:
    """disentangling-vae: ``main.py`` writes ``from disvae import Trainer`` (``disvae/__init__.py`` re-exports it from
    ``disvae/training.py``) and hands it ``device=get_device()``, a CUDA choice: the trainer's per-step ``.item()`` is
    TD603. The same trainer handed the CPU stays quiet."""
    main = """\
        import torch
        from disvae import Trainer
        from utils.helpers import get_device

        def main(model, loader, loss_f):
            device = get_device(is_gpu=True)
            model = model.to(device)
            optimizer = torch.optim.Adam(model.parameters())
            trainer = Trainer(model, optimizer, loss_f, device=device)
            trainer(loader)
        """
    write(project, {
        "disvae/__init__.py": "from disvae.training import Trainer\n",
        "disvae/training.py": VAE_TRAINER,
        "utils/__init__.py": "",
        "utils/helpers.py": """\
            import torch

            def get_device(is_gpu=True):
                return torch.device("cuda" if torch.cuda.is_available() and is_gpu else "cpu")
            """,
        "main.py": main,
    })
    files = ["main.py", "disvae/__init__.py", "disvae/training.py", "utils/__init__.py", "utils/helpers.py"]
    settings = Settings(root=str(project), select=("TD603",))
    assert codes(check_files(files, settings), "training.py") == [(21, "TD603")]
    write(project, {"main.py": main.replace("get_device(is_gpu=True)", 'torch.device("cpu")')})
    assert codes(check_files(files, settings), "training.py") == []


S2S_MODEL = """\
    import torch
    from torch import nn

    class S2S(nn.Module):
        def __init__(self, vocab, dim):
            super().__init__()
            self.emb, self.out = nn.Embedding(vocab, dim), nn.Linear(dim, vocab)

        def forward(self, src):
            return self.out(self.emb(src))

        def train_batch(self, src, tgt, criterion, optimizer):
            loss = criterion(self(src).flatten(0, 1), tgt.flatten())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            return loss
    """


@pytest.mark.parametrize("trains", [True, False])
def test_a_model_moved_where_it_is_made_trains_through_its_own_method(project: Path, trains: bool) -> None:
    """NMT: ``s2s = S2S_basic.S2S(encoder, decoder).to(device)``, then ``s2s.train_batch(x.to(device), ...)`` on every
    batch: the model class's method backpropagates, so the script trains and its loader without workers is TD305.
    The method is found through the placement the construction ends in. A method that only scores the batch trains
    nothing (no TD305)."""
    model = S2S_MODEL if trains else S2S_MODEL.replace("            loss.backward()\n", "")
    write(project, {
        "models/__init__.py": "",
        "models/S2S_basic.py": model,
        "train.py": """\
            import torch
            from torch.utils.data import DataLoader
            from models import S2S_basic

            def main(args, train_data):
                device = torch.device(args.device)
                torch.cuda.set_device(device)
                s2s = S2S_basic.S2S(100, 32).to(device)
                criterion = torch.nn.CrossEntropyLoss()
                optimizer = torch.optim.Adam(s2s.parameters())
                train_loader = DataLoader(train_data, args.batch_size, shuffle=True, pin_memory=True)
                for epoch in range(args.epochs):
                    for src, tgt in train_loader:
                        s2s.train_batch(src.to(device, non_blocking=True), tgt.to(device, non_blocking=True),
                                        criterion, optimizer)
            """,
    })
    results = check_files(["train.py", "models/__init__.py", "models/S2S_basic.py"],
                          Settings(root=str(project), select=("TD305",)))
    assert codes(results, "train.py") == ([(11, "TD305")] if trains else [])


@pytest.mark.parametrize("device, found", [("'cuda:{}'.format(args.gpu)", [(5, "TD304")]), ("'cpu'", [])])
def test_a_loader_factory_in_a_package_init_feeds_the_gpu_of_its_importer(project: Path, device: str, found) -> None:
    """Cifar100-PyTorch: ``create_dataloader`` lives in ``datasets/__init__.py``, and ``train.py`` writes ``from
    datasets import create_dataloader``, then moves every batch to ``'cuda:{}'.format(args.gpu)``: the package's own
    module is the one imported, by the package's name. A CPU-only importer needs no pinned memory."""
    write(project, {
        "datasets/__init__.py": """\
            import torch.utils.data

            def create_dataloader(dataset, phase, **options):
                if phase == "train":
                    return torch.utils.data.DataLoader(dataset, batch_size=options["batch_size"], shuffle=True,
                                                       num_workers=4, drop_last=True, pin_memory=False)
                raise NotImplementedError(phase)
            """,
        "train.py": f"""\
            import torch
            from datasets import create_dataloader

            def run(args, dataset, network, optimizer):
                device = {device}
                loader = create_dataloader(dataset, "train", batch_size=args.batch_size)
                network = network.to(device)
                for inputs, targets in loader:
                    inputs, targets = inputs.to(device), targets.to(device)
                    loss = torch.nn.functional.cross_entropy(network(inputs), targets)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
            """,
    })
    results = check_files(["datasets/__init__.py", "train.py"], Settings(root=str(project), select=("TD304",)))
    assert codes(results, "__init__.py") == found


@pytest.mark.parametrize("trains", [True, False])
def test_a_model_a_project_builder_makes_and_moves_trains_through_its_own_method(project: Path, trains: bool) -> None:
    """NMT's transformer script: ``s2s = build_transformer(args, device)``, a builder in ``utils/tools.py`` whose every
    return is ``transformer.S2S(...).to(device)``; ``s2s.train_batch(...)`` on every batch is that class's method, which
    backpropagates: the script trains (TD305 for its loader without workers). Quiet when the method trains nothing."""
    model = S2S_MODEL if trains else S2S_MODEL.replace("            loss.backward()\n", "")
    write(project, {
        "models/__init__.py": "",
        "models/transformer.py": model,
        "utils/__init__.py": "",
        "utils/tools.py": """\
            from models import transformer

            def build_transformer(args, device):
                s2s = transformer.S2S(args.vocab, args.dim).to(device)
                return s2s
            """,
        "train.py": """\
            import torch
            from torch.utils.data import DataLoader
            from utils.tools import build_transformer

            def main(args, train_data):
                device = torch.device(args.device)
                torch.cuda.set_device(device)
                s2s = build_transformer(args, device)
                criterion = torch.nn.CrossEntropyLoss()
                optimizer = torch.optim.Adam(s2s.parameters())
                train_loader = DataLoader(train_data, args.batch_size, shuffle=True, pin_memory=True)
                for epoch in range(args.epochs):
                    for src, tgt in train_loader:
                        s2s.train_batch(src.to(device), tgt.to(device), criterion, optimizer)
            """,
    })
    files = ["train.py", "models/__init__.py", "models/transformer.py", "utils/__init__.py", "utils/tools.py"]
    results = check_files(files, Settings(root=str(project), select=("TD305",)))
    assert codes(results, "train.py") == ([(11, "TD305")] if trains else [])


def test_a_policy_sample_whose_loss_a_helper_of_another_module_backpropagates_is_training(project: Path) -> None:
    """ku2482's SAC: ``calc_policy_loss`` returns the loss of ``self.policy.sample(states)``, and ``learn`` hands it
    to ``update_params`` of ``utils.py``, which runs ``loss.backward()``: a training forward, not inference. The
    target's sample, handed to no update, is TD401."""
    source = (Path(__file__).parent / "fixtures/TD401/quiet_policy_sample_whose_loss_a_helper_backpropagates.py").read_text()
    helper = source[source.index("def update_params"):source.index("class Policy")]
    agent = source.replace(helper, "").replace("import torch.nn as nn\n",
                                               "import torch.nn as nn\nfrom utils import update_params\n")
    write(project, {"utils.py": "import torch\n\n\n" + helper, "agent.py": agent})
    results = check_files(["utils.py", "agent.py"], Settings(root=str(project), select=("TD401",)))
    assert [line for line, _ in codes(results, "agent.py")] == [agent.count("\n", 0, agent.index("next_actions, ")) + 1]


@pytest.mark.parametrize("flag, found", [("use_cuda=False", []), ("use_cuda=True", [(5, "TD304")])])
def test_a_loader_handed_to_a_model_told_not_to_use_cuda_needs_no_pinning(project: Path, flag: str, found) -> None:
    """DeepFM: ``model = DeepFM(feature_sizes, use_cuda=False)``, then ``model.fit(loader_train, ...)``; the class picks
    CUDA only ``if use_cuda and torch.cuda.is_available()``, so this program trains on the CPU. Told ``use_cuda=True``,
    its loader feeds the GPU."""
    write(project, {
        "model.py": """\
            import torch
            import torch.nn as nn

            class DeepFM(nn.Module):
                def __init__(self, sizes, use_cuda=True):
                    super().__init__()
                    self.fc = nn.Linear(sizes, 1)
                    self.device = torch.device("cuda") if use_cuda and torch.cuda.is_available() else torch.device("cpu")

                def fit(self, loader, optimizer, epochs=1):
                    model = self.train().to(device=self.device)
                    for _ in range(epochs):
                        for x, y in loader:
                            x, y = x.to(device=self.device), y.to(device=self.device)
                            loss = torch.nn.functional.mse_loss(model.fc(x).squeeze(1), y)
                            optimizer.zero_grad()
                            loss.backward()
                            optimizer.step()
            """,
        "main.py": f"""\
            import torch
            from torch.utils.data import DataLoader
            from model import DeepFM

            loader_train = DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64)), batch_size=8,
                                      num_workers=2)
            model = DeepFM(8, {flag})
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
            model.fit(loader_train, optimizer, epochs=5)
            """,
    })
    results = check_files(["model.py", "main.py"], Settings(root=str(project), select=("TD304",)))
    assert codes(results, "main.py") == found


@pytest.mark.parametrize("accelerator, found", [('"gpu"', [(12, "TD603")]), ('"cpu"', [])])
def test_a_lightning_module_trained_on_the_gpu_by_another_module_reads_every_step(project: Path, accelerator: str,
                                                                                found) -> None:
    """FCN_Segmentation: ``UNet_Multiclass/model.py`` defines the LightningModule, whose ``training_step`` logs
    ``loss.item()``; ``train.py`` imports it and fits it with ``pl.Trainer(accelerator="gpu")``: Lightning calls the
    hook on every batch, on the GPU. Fitted on the CPU, the read waits for nothing."""
    write(project, {
        "model.py": """\
            import pytorch_lightning as pl
            import torch
            import torch.nn as nn

            class Experiment(pl.LightningModule):
                def __init__(self):
                    super().__init__()
                    self.net = nn.Linear(8, 3)

                def training_step(self, sample, batch_idx):
                    loss = nn.functional.cross_entropy(self.net(sample[0]), sample[1])
                    self.log("train_loss", loss.item(), prog_bar=True)
                    return loss

                def configure_optimizers(self):
                    return torch.optim.Adam(self.parameters())
            """,
        "train.py": f"""\
            import pytorch_lightning as pl
            from model import Experiment

            def main(loader):
                trainer = pl.Trainer(accelerator={accelerator}, devices=1, max_epochs=3)
                trainer.fit(Experiment(), loader)
            """,
    })
    results = check_files(["model.py", "train.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "model.py") == found


@pytest.mark.parametrize("norm, found", [("nn.BatchNorm2d(out_channels), ", [(10, "TD706")]), ("", [])])
def test_batchnorm_built_by_a_block_helper_of_the_model_module_counts(project: Path, norm: str, found) -> None:
    """SRGAN-with-distributed-training: ``model.py``'s Discriminator builds its blocks with a module-level
    ``convolution_block(...)`` returning ``nn.Sequential(conv, nn.BatchNorm2d(out), act)``; ``train_DDP.py`` wraps it
    in DDP without SyncBatchNorm. A helper that builds no norm layer gives a model without BatchNorm."""
    write(project, {
        "model.py": f"""\
            import torch.nn as nn

            def convolution_block(in_channels, out_channels, stride):
                return nn.Sequential(nn.Conv2d(in_channels, out_channels, 3, padding=1, stride=stride), {norm}nn.ReLU())

            class Discriminator(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.blocks = nn.Sequential(convolution_block(3, 64, 2), convolution_block(64, 128, 2))
                    self.fc = nn.LazyLinear(1)

                def forward(self, x):
                    return self.fc(self.blocks(x).flatten(1))
            """,
        "train_DDP.py": """\
            import os
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP
            from model import Discriminator

            def main(rank):
                dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
                net = Discriminator().to(rank)
                net = DDP(net, device_ids=[rank])
                return net
            """,
    })
    results = check_files(["model.py", "train_DDP.py"], Settings(root=str(project), select=("TD706",)))
    assert codes(results, "train_DDP.py") == found
