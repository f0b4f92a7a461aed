"""What the other modules of a project hand back, as the sync rules see it: host copies a helper returns, numbers a
tracker class keeps. (The project index itself is tested in test_project.py.)"""

from __future__ import annotations

from pathlib import Path

from tests.check.test_project import codes, project, write  # noqa: F401  (``project`` is a fixture)
from torchdoctor.check.runner import check_files
from torchdoctor.config import Settings


def test_item_of_a_number_computed_from_a_helper_s_host_copy_is_quiet(project: Path) -> None:
    write(project, {
        "metrics.py": """\
            import numpy as np
            import torch

            def angle_error(pred, gt):
                err = torch.acos(torch.cosine_similarity(pred, gt, dim=0).clamp(-1, 1))
                return err.view(-1).detach().cpu().numpy()

            def mean_error(err):
                return round(np.average(err), 4)
            """,
        "evaluate.py": """\
            import torch
            from torch import nn
            from metrics import angle_error, mean_error

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            net = nn.Linear(3, 3).to(device)

            def evaluate(batches, scores):
                for x, y in batches:
                    pred = net(x.to(device))
                    err = angle_error(pred, y.to(device))
                    for score in scores:
                        print(score(err).item())
                    print(mean_error(err), (pred - y.to(device)).abs().mean().item())
            """,
    })
    results = check_files(["evaluate.py", "metrics.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "evaluate.py") == [(14, "TD603")]  # the device tensor's read, not the NumPy numbers'


def test_a_tracker_of_another_module_fed_item_numbers_hands_back_numbers(project: Path) -> None:
    write(project, {
        "tracking.py": """\
            class Book:
                def __init__(self, *keys):
                    self.data = {k: [0.0, 0] for k in keys}

                def update(self, key, value, n=1):
                    self.data[key][0] += value * n
                    self.data[key][1] += n

                def result(self):
                    return {k: t / max(c, 1) for k, (t, c) in self.data.items()}
            """,
        "train.py": """\
            import torch
            from torch import nn
            from tracking import Book

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            net = nn.Linear(3, 1).to(device)
            opt = torch.optim.SGD(net.parameters(), lr=0.1)

            def fit(batches):
                book = Book("loss")
                for x, y in batches:
                    loss = (net(x.to(device)) - y.to(device)).pow(2).mean()
                    book.update("loss", loss.item())
                    loss.backward()
                    opt.step()
                    opt.zero_grad()
                    running_loss = book.result()["loss"]
                    print(f"loss={running_loss:.4f}")
            """,
    })
    results = check_files(["train.py", "tracking.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "train.py") == [(13, "TD603")]  # the loss's .item() that feeds the book


def test_an_engine_given_the_device_a_base_class_of_another_module_sets_up(project: Path) -> None:
    write(project, {
        "solver/base.py": """\
            import torch

            class BaseSolver:
                def __init__(self, cfg):
                    self.cfg = cfg

                def setup(self):
                    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                    self.model = self.cfg["model"].to(dev)
                    self.device = dev
            """,
        "solver/det_solver.py": """\
            from .base import BaseSolver
            from .engine import train_one_epoch

            class DetSolver(BaseSolver):
                def fit(self, loader, opt, crit, logger):
                    self.setup()
                    for epoch in range(10):
                        train_one_epoch(self.model, crit, loader, opt, self.device, logger)
            """,
        "solver/engine.py": """\
            import torch
            from .meters import MetricLogger

            def train_one_epoch(model, crit, loader, opt, device, unused):
                logger = MetricLogger()
                for x, y in loader:
                    loss = crit(model(x.to(device)), y.to(device))
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    numbers = {k: v.item() for k, v in {"loss": loss}.items()}
                    logger.update(**numbers)
                    logger.update(loss=loss)
            """,
        "solver/meters.py": """\
            import torch

            class MetricLogger:
                def __init__(self):
                    self.sums = {}

                def update(self, **values):
                    for k, v in values.items():
                        if isinstance(v, torch.Tensor):
                            v = v.item()
                        self.sums[k] = self.sums.get(k, 0.0) + v
            """,
        "solver/__init__.py": "",
    })
    results = check_files(["solver/base.py", "solver/det_solver.py", "solver/engine.py", "solver/meters.py",
                           "solver/__init__.py"], Settings(root=str(project), select=("TD603",)))
    # the device comes from the base class's set-up; the logger handed numbers read already reads nothing, the
    # one handed the loss does
    assert codes(results, "engine.py") == [(11, "TD603"), (13, "TD603")]


def test_a_cast_to_the_type_of_a_tensor_a_helper_made_from_an_array_moves_nothing(project: Path) -> None:
    """A super-resolution test script turns each image into a tensor with a helper of its utilities module
    (``torch.from_numpy(img).permute(2, 0, 1).float().unsqueeze(0)``), then makes the noise-level map with
    ``torch.full(...).type_as(img)`` before moving the two together: the cast is from the host to the host. After
    ``img = img.to(device)`` the same cast is a copy to the device on every image (TD611)."""
    write(project, {
        "imgutil.py": """\
            import numpy as np
            import torch

            def to_tensor4(img):
                return torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1).float().unsqueeze(0)
            """,
        "test_sr.py": """\
            import numpy as np
            import torch
            import imgutil

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Conv2d(4, 3, 3).to(device)
            for path in ["a.npy", "b.npy"]:
                img = imgutil.to_tensor4(np.load(path))
                level = torch.full((1, 1, img.size(2), img.size(3)), 0.1).type_as(img)
                img = torch.cat((img, level), dim=1).to(device)
                sigma = torch.full((1, 1, 1, 1), 0.1).type_as(img)
                with torch.no_grad():
                    out = model(img) * sigma
            """,
    })
    results = check_files(["imgutil.py", "test_sr.py"], Settings(root=str(project), select=("TD611",)))
    assert codes(results, "test_sr.py") == [(11, "TD611")]
    alone = check_files(["test_sr.py"], Settings(root=str(project), select=("TD611",)))
    assert codes(alone, "test_sr.py") == [(11, "TD611")]


def test_a_read_after_a_gather_helper_that_reads_back_what_it_gathers_waits_for_nothing(project: Path) -> None:
    """A VQ-VAE step reads its loss once, gathers the host numbers from every rank with a helper of the project's
    ``comm`` module (one rank: it hands back its argument; else ``all_gather`` on CUDA byte tensors, each read back
    with ``.cpu()`` before it returns), then prints the losses under ``if comm.is_primary():``: the GPU is idle after
    the helper, so only the first read waits (TD603 once). A helper that ends with GPU work it does not read back
    (``reduce_losses``) leaves the print's read a wait of its own."""
    write(project, {
        "comm.py": """\
            import pickle
            import torch
            import torch.distributed as dist

            def get_world_size():
                return dist.get_world_size() if dist.is_initialized() else 1

            def is_primary():
                return not dist.is_initialized() or dist.get_rank() == 0

            def all_gather(data):
                world_size = get_world_size()
                if world_size == 1:
                    return [data]
                t = torch.ByteTensor(list(pickle.dumps(data))).to("cuda")
                out = [torch.empty_like(t) for _ in range(world_size)]
                dist.all_gather(out, t)
                data_list = []
                for o in out:
                    data_list.append(pickle.loads(bytes(o.cpu().numpy())))
                return data_list

            def reduce_losses(losses):
                if get_world_size() == 1:
                    return losses
                stacked = torch.stack(losses)
                dist.all_reduce(stacked)
                return stacked / get_world_size()
            """,
        "train.py": """\
            import torch
            import comm

            def train(loader, model, opt, device):
                for x, y in loader:
                    x, y = x.to(device), y.to(device)
                    loss = torch.nn.functional.mse_loss(model(x), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    part = loss.item() * x.shape[0]
                    parts = comm.all_gather({"sum": part})
                    if comm.is_primary():
                        print(f"loss {loss.item():.4f}")
                    both = comm.reduce_losses([loss.detach(), loss.detach()])
                    print(loss.item())

            if __name__ == "__main__":
                dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                net = torch.nn.Linear(4, 1).to(dev)
                data = torch.utils.data.DataLoader([], batch_size=8, pin_memory=True, num_workers=2)
                train(data, net, torch.optim.SGD(net.parameters(), lr=0.1), dev)
            """,
    })
    results = check_files(["comm.py", "train.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "train.py") == [(11, "TD603"), (16, "TD603")]


def test_a_read_after_a_metric_helper_that_copies_the_outputs_to_numpy_waits_for_nothing(project: Path) -> None:
    """A segmentation validation computes the loss, then ``iou, dice = iou_score(output, target)`` of its metrics
    module, which copies both tensors to NumPy and works on the arrays only (on either branch of a deep-supervision
    test): the copy waited for the loss too, so the ``loss.item()`` after it waits for nothing. After new GPU work
    (the training step's backward) the same read is a wait of its own."""
    write(project, {
        "metrics.py": """\
            import numpy as np
            import torch

            def iou_score(output, target):
                smooth = 1e-5
                if torch.is_tensor(output):
                    output = torch.sigmoid(output).data.cpu().numpy()
                if torch.is_tensor(target):
                    target = target.data.cpu().numpy()
                output_ = output > 0.5
                target_ = target > 0.5
                intersection = (output_ & target_).sum()
                union = (output_ | target_).sum()
                iou = (intersection + smooth) / (union + smooth)
                return iou, 2 * iou / (iou + 1)
            """,
        "train.py": """\
            import torch
            from metrics import iou_score

            def validate(loader, model, criterion, deep):
                scores = []
                with torch.no_grad():
                    for x, y in loader:
                        x, y = x.cuda(), y.cuda()
                        if deep:
                            outputs = model(x)
                            loss = sum(criterion(o, y) for o in outputs) / len(outputs)
                            iou, dice = iou_score(outputs[-1], y)
                        else:
                            output = model(x)
                            loss = criterion(output, y)
                            iou, dice = iou_score(output, y)
                        scores.append((loss.item(), iou))
                return scores

            def train(loader, model, criterion, optimizer):
                for x, y in loader:
                    x, y = x.cuda(), y.cuda()
                    output = model(x)
                    loss = criterion(output, y)
                    iou, dice = iou_score(output, y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    print(loss.item(), iou)
            """,
    })
    results = check_files(["metrics.py", "train.py"], Settings(root=str(project), select=("TD603",)))
    assert [line for line, _ in codes(results, "train.py") if line in (17, 29)] == [29]


def test_a_collate_that_tokenizes_with_a_python_helper_of_another_module_yields_nothing_to_pin(project: Path) -> None:
    """``coll(batch)`` returns ``list(filter(bool, map(tokenize(None), arts)))``, where ``tokenize`` (batcher.py) is
    ``[t.lower().split()[:max_len] for t in texts]``: lists of words, no tensor, so ``pin_memory`` would pin nothing
    (TD304 quiet). A helper that makes tensors leaves the loader's finding."""
    batcher = """\
        import torch

        def tokenize(max_len, texts):
            return [t.lower().split()[:max_len] for t in texts]

        def tensorize(max_len, texts):
            return torch.tensor([len(t) for t in texts])
        """
    train = """\
        import torch
        from torch.utils.data import DataLoader
        from batcher import tokenize

        def build_loader(dataset):
            def coll(batch):
                arts, abss = zip(*batch)
                return list(filter(bool, map(tokenize(None), arts))), list(map(tokenize(None), abss))
            return DataLoader(dataset, batch_size=4, shuffle=True, num_workers=4, collate_fn=coll)

        net = torch.nn.Linear(4, 4).cuda()
        for arts, abss in build_loader([("a b", "c")] * 8):
            print(net(torch.randn(len(arts), 4).cuda()).sum())
        """
    write(project, {"batcher.py": batcher, "train.py": train})
    results = check_files(["batcher.py", "train.py"], Settings(root=str(project), select=("TD304",)))
    assert codes(results, "train.py") == []
    write(project, {"train.py": train.replace("import tokenize", "import tensorize").replace("tokenize(None)", "tensorize(None)")})
    results = check_files(["batcher.py", "train.py"], Settings(root=str(project), select=("TD304",)))
    assert codes(results, "train.py") == [(9, "TD304")]


def test_a_batch_dict_moved_entry_by_entry_through_a_project_helper(project: Path) -> None:
    """Sentence-VAE's loop: ``for k, v in batch.items(): if torch.is_tensor(v): batch[k] = to_var(v)``, where
    ``utils.to_var`` calls ``.cuda()`` when a GPU exists: the dict's tensors are on the device (quiet). A helper of
    the same shape that only converts (``x.float()``) moves nothing: TD302."""
    files = {
        "utils.py": """\
            import torch

            def to_var(x):
                if torch.cuda.is_available():
                    x = x.cuda()
                return x
            """,
        "train.py": """\
            import torch
            from torch import nn
            from torch.utils.data import DataLoader
            from utils import to_var

            def main(dataset):
                model = nn.Linear(8, 2)
                if torch.cuda.is_available():
                    model = model.cuda()
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                loader = DataLoader(dataset, batch_size=4, pin_memory=torch.cuda.is_available())
                for iteration, batch in enumerate(loader):
                    for k, v in batch.items():
                        if torch.is_tensor(v):
                            batch[k] = to_var(v)
                    out = model(batch["input"])
                    loss = nn.functional.cross_entropy(out, batch["target"])
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            """,
    }
    write(project, files)
    results = check_files(list(files), Settings(root=str(project)))
    assert [c for c in codes(results, "train.py") if c[1] == "TD302"] == []
    files["utils.py"] = files["utils.py"].replace("x = x.cuda()", "x = x.float()")
    write(project, files)
    results = check_files(list(files), Settings(root=str(project)))
    assert [c for c in codes(results, "train.py") if c[1] == "TD302"] == [(16, "TD302"), (17, "TD302")]


def test_numpy_of_a_method_that_a_method_run_under_no_grad_elsewhere_calls(project: Path) -> None:
    """world-models' ``RolloutGenerator``: ``get_action`` returns ``action.squeeze().cpu().numpy()`` of the controller's
    output, and only ``rollout`` calls it; every module that runs ``rollout`` does so under ``torch.no_grad()``: the
    action needs no grad (quiet). A module that runs ``rollout`` with autograd on, or calls ``get_action`` itself with
    it on, makes it TD501."""
    files = {
        "rollout.py": """\
            import torch
            from torch import nn

            class RolloutGenerator:
                def __init__(self, device):
                    self.device = device
                    self.controller = nn.Linear(4, 2).to(device)

                def get_action(self, obs):
                    action = self.controller(obs)
                    return action.squeeze().cpu().numpy()

                def rollout(self, steps):
                    total = 0.0
                    for _ in range(steps):
                        total += float(self.get_action(torch.randn(1, 4, device=self.device)).sum())
                    return total
            """,
        "train.py": """\
            import torch
            from rollout import RolloutGenerator

            def evaluate(steps):
                device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                r_gen = RolloutGenerator(device)
                with torch.no_grad():
                    return r_gen.rollout(steps)
            """,
    }
    write(project, files)
    results = check_files(list(files), Settings(root=str(project)))
    assert [c for c in codes(results, "rollout.py") if c[1] == "TD501"] == []
    files["play.py"] = """\
        import torch
        from rollout import RolloutGenerator

        def play():
            r_gen = RolloutGenerator(torch.device("cpu"))
            return r_gen.get_action(torch.randn(1, 4))
        """
    write(project, files)
    results = check_files(list(files), Settings(root=str(project)))
    assert [c for c in codes(results, "rollout.py") if c[1] == "TD501"] == [(11, "TD501")]
    del files["play.py"]
    (project / "play.py").unlink()
    files["train.py"] = files["train.py"].replace("with torch.no_grad():\n                    return", "return")
    write(project, files)
    results = check_files(list(files), Settings(root=str(project)))
    assert [c for c in codes(results, "rollout.py") if c[1] == "TD501"] == [(11, "TD501")]


def test_loaders_in_a_factory_nothing_calls_are_not_judged(project: Path) -> None:
    """NRI: ``utils.py`` (which puts work on the GPU itself) holds ``load_data`` (called by train.py, which trains on
    the GPU and star-imports it) and ``load_kuramoto_data``, which no module calls: only the first factory's loaders feed a GPU (TD304); the uncalled one's never exist. Once a
    script calls the second too, its loaders are judged."""
    files = {
        "utils.py": """\
            import torch
            from torch.utils.data import DataLoader, TensorDataset

            def load_data(batch_size=1):
                train = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
                return DataLoader(train, batch_size=batch_size, shuffle=True, num_workers=2)

            def load_kuramoto_data(batch_size=1):
                train = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
                return DataLoader(train, batch_size=batch_size, shuffle=True, num_workers=2)

            def encode_onehot(labels):
                return torch.eye(4)[labels].cuda() if torch.cuda.is_available() else torch.eye(4)[labels]
            """,
        "train.py": """\
            import torch
            from utils import *

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torch.nn.Linear(4, 1).to(device)
            opt = torch.optim.Adam(model.parameters())
            for x, y in load_data(8):
                loss = (model(x.to(device)) - y.to(device)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            """,
    }
    write(project, files)
    results = check_files(list(files), Settings(root=str(project), select=("TD304",)))
    assert codes(results, "utils.py") == [(6, "TD304")]
    files["train.py"] = files["train.py"].replace("for x, y in load_data(8):",
                                                  "for x, y in [*load_data(8), *load_kuramoto_data(8)]:")
    write(project, files)
    results = check_files(list(files), Settings(root=str(project), select=("TD304",)))
    assert codes(results, "utils.py") == [(6, "TD304"), (10, "TD304")]


DETECTION_UTILS = """\
    import torch

    def convert2cpu(gpu_matrix):
        return torch.FloatTensor(gpu_matrix.size()).copy_(gpu_matrix)

    def box_ious(boxes1, boxes2, x1y1x2y2=True):
        inter = torch.min(boxes1[2], boxes2[2]) - torch.max(boxes1[0], boxes2[0])
        return inter / (boxes1[2] - boxes1[0] + boxes2[2] - boxes2[0] - inter)

    def get_all_boxes(output, conf_thresh):
        anchors = output.size(1) // 5
        n = output[0, 0, 0, 0].item()
        boxes = convert2cpu(output.flatten(2).transpose(1, 2).contiguous())
        return [[b.tolist() for b in boxes[i] if b[4] > conf_thresh] for i in range(len(boxes))]

    def accuracy(output, target):
        return (output.argmax(1) == target).float().mean().item()
    """


def test_an_evaluation_decodes_boxes_with_a_helper_and_scores_them_on_the_host(project: Path) -> None:
    """A detector's evaluation (pytorch-0.4-yolov3's shape) decodes each batch's outputs with ``get_all_boxes`` of its
    utilities (the head's outputs copied to the host for the Python NMS that follows, a size read with ``.item()``):
    post-processing, not a read to avoid (TD603 quiet). It then scores the boxes against the loader's targets, never
    moved: ``best_iou, j = torch.max(box_ious(gt, pred, x1y1x2y2=False), 0)`` of legacy ``torch.FloatTensor`` boxes,
    so ``if best_iou > thresh`` reads a host tensor. A metric helper that reads the outputs with ``.item()`` in the
    same kind of loop is a read every step (TD603)."""
    write(project, {"utils.py": DETECTION_UTILS, "eval.py": """\
        import numpy as np
        import torch
        from torch import nn
        from utils import *

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model = nn.Conv2d(3, 10, 1).to(device)
        dataset = torch.utils.data.TensorDataset(torch.randn(6, 3, 4, 4), torch.rand(6, 50, 5))
        loader = torch.utils.data.DataLoader(dataset, batch_size=2, pin_memory=True, num_workers=2)
        model.eval()
        correct = 0
        with torch.no_grad():
            for data, target in loader:
                output = model(data.to(device))
                all_boxes = get_all_boxes(output, 0.5)
                for k in range(len(all_boxes)):
                    boxes = np.array(all_boxes[k])
                    truths = target[k].view(-1, 5)
                    for i in range(len(truths)):
                        gt = torch.FloatTensor([truths[i][1], truths[i][2], truths[i][3], truths[i][4], 1.0])
                        gt = gt.repeat(len(boxes), 1).t()
                        pred = torch.FloatTensor(boxes).t()
                        best_iou, best_j = torch.max(box_ious(gt, pred, x1y1x2y2=False), 0)
                        if best_iou > 0.5 and pred[4][best_j] == gt[4][0]:
                            correct += 1
            for data, target in loader:
                out = model(data.to(device)).mean((2, 3))
                acc = accuracy(out, target[:, 0, 0].long().to(device))
        """})
    results = check_files(["utils.py", "eval.py"], Settings(root=str(project), select=("TD603",)))
    assert codes(results, "eval.py") == [(28, "TD603")]
