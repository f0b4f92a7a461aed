"""The advice the environment rules give: which wheel, which driver, which container flag, word for word."""

from __future__ import annotations

from typing import Any

import pytest

from torchdoctor.env import advice
from torchdoctor.env.facts import Facts

PIP = "pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/"


def facts(driver: str | None = None, *, platform: str = "linux", machine: str | None = "x86_64", **extra: Any) -> Facts:
    raw: dict[str, Any] = {"platform": platform, **extra}
    if machine is not None:
        raw["machine"] = machine
    if driver is not None:
        raw["driver_version"] = driver
    return Facts(raw)


def test_gpu_ccs_are_the_known_capabilities_once_each() -> None:
    gpus = [{"capability": [9, 0]}, {"capability": [8, 6]}, {"capability": [9, 0]}, {"name": "unknown"}]
    assert advice.gpu_ccs(facts(gpus=gpus)) == [86, 90]


@pytest.mark.parametrize("driver, platform, expected", [
    ("560.35.03", "linux", "cu126"),   # cu126's own driver is 560.28.03: fully supported
    ("560.28.03", "linux", "cu126"),   # exactly its own driver still counts
    ("525.60.13", "linux", "cu129"),   # exactly the CUDA 12 floor: the newest 12.x runs by minor compatibility
    ("526.00", "win32", "cu118"),      # Windows numbers: below 12.x's 528.33 floor, but 11.8's own 520.06
    ("440.33", "linux", "cu130"),      # too old for all: the newest (the hint then names the driver it needs)
])
def test_recommend_flavour_by_driver(driver: str, platform: str, expected: str) -> None:
    assert advice.recommend_flavour(facts(driver, platform=platform), [90]) == expected


def test_recommend_flavour_by_the_cuda_version_the_driver_reports() -> None:
    assert advice.recommend_flavour(facts(drv_cuda=12040), [90]) == "cu129"  # 12.x runs by minor compatibility
    assert advice.recommend_flavour(facts(drv_cuda=11080), [90]) == "cu118"
    assert advice.recommend_flavour(facts(), [90]) == "cu130"  # nothing known: the newest
    # A CUDA 11.4 driver runs the 11.8 build by minor-version compatibility (same major, >= 11), no 12.x build.
    assert advice.recommend_flavour(facts(drv_cuda=11040), [90]) == "cu118"


def test_recommend_flavour_follows_the_machine() -> None:
    # Thor (sm_110) has kernels only in the aarch64 builds; an unknown machine is x86_64.
    assert advice.recommend_flavour(facts(machine="aarch64"), [110]) == "cu130"
    assert advice.recommend_flavour(facts(machine=None), [110]) is None
    assert advice.recommend_flavour(facts(machine="x86_64"), [35]) is None  # Kepler: no wheel at all


def test_install_hint_word_for_word() -> None:
    assert advice.install_hint(facts("560.35.03"), [90]) == f"install the cu126 (torch 2.6+) build: {PIP}cu126"
    assert advice.install_hint(facts("440.33"), [90]) == (
        f"install the cu130 (torch 2.9+) build: {PIP}cu130 (it needs driver >= 580.65.06, e.g. the R580 branch)")
    assert advice.install_hint(facts(), [90]) == (
        f"install the cu130 (torch 2.9+) build: {PIP}cu130 (it needs an NVIDIA driver >= 580)")
    assert advice.install_hint(facts(machine=None), [110]) == (
        "install a CUDA build of PyTorch from https://pytorch.org/get-started/locally/")


@pytest.mark.parametrize("driver, platform, cuda, expected", [
    ("560.35.03", "linux", (12, 6), ""),
    ("525.60.13", "linux", (12, 8), ""),  # exactly the floor: runs by minor compatibility
    ("440.33", "linux", (10, 2), ""),  # exactly the toolkit's driver (CUDA 10 has no floor)
    ("440.33", "linux", (13, 0), "driver >= 580.65.06, e.g. the R580 branch"),
    ("418.39", "linux", (10, 2), "driver >= 440.33"),  # no branch to recommend for CUDA 10
    ("526.00", "win32", (12, 6), "driver >= 560.76, e.g. the R570 branch"),  # Windows numbers
    ("560.35.03", "linux", (13, 5), "driver >= 580, e.g. the R580 branch"),  # unknown minor: the floor
    ("500.00", "linux", (14, 0), "driver >= a newer one"),  # nothing known about CUDA 14
])
def test_driver_needed(driver: str, platform: str, cuda: tuple[int, int], expected: str) -> None:
    assert advice.driver_needed(facts(driver, platform=platform), cuda) == expected


def test_driver_needed_is_nothing_when_the_driver_is_unknown() -> None:
    assert advice.driver_needed(facts(), (13, 0)) == ""


def test_unknown_driver_note_names_the_least_driver() -> None:
    assert advice.unknown_driver_note(facts(), "cu126") == " (it needs an NVIDIA driver >= 525.60.13)"
    assert advice.unknown_driver_note(facts(platform="win32"), "cu126") == " (it needs an NVIDIA driver >= 528.33)"
    assert advice.unknown_driver_note(facts("560.35.03"), "cu126") == ""
    assert advice.unknown_driver_note(facts(drv_cuda=12040), "cu126") == ""


@pytest.mark.parametrize("ccs, expected", [
    ([35], "R470 (the last branch that supports Kepler GPUs)"),
    ([50], "R580 (the last branch that supports Maxwell, Pascal and Volta GPUs)"),
    ([61, 86], "R580 (the last branch that supports Maxwell, Pascal and Volta GPUs)"),
    ([75], "R580 or newer"),
    ([], "R580 or newer"),
])
def test_driver_branch_for(ccs: list[int], expected: str) -> None:
    assert advice.driver_branch_for(ccs) == expected


APPTAINER = "run it with `apptainer exec --nv` (or `singularity exec --nv`)"
K8S = "request the GPU in the pod spec (resources.limits: nvidia.com/gpu: 1) on a node with the NVIDIA device plugin"
PODMAN = "start it with `podman run --device nvidia.com/gpu=all` (NVIDIA Container Toolkit, CDI)"
DOCKER = "start it with `docker run --gpus all` (NVIDIA Container Toolkit; in compose: deploy.resources.reservations.devices)"


@pytest.mark.parametrize("extra, expected", [
    ({"env": {"APPTAINER_CONTAINER": "/x.sif"}}, APPTAINER),
    ({"env": {"SINGULARITY_CONTAINER": "/x.sif"}}, APPTAINER),
    ({"container_markers": ["/.singularity.d"]}, APPTAINER),
    ({"container_markers": ["/APPTAINER"]}, APPTAINER),
    ({"container_markers": ["cgroup:/kubepods/besteffort"]}, K8S),
    ({"env": {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}}, K8S),
    ({"container_markers": ["/run/.containerenv"]}, PODMAN),
    ({"container_markers": ["cgroup:/podman"]}, PODMAN),
    ({"container_markers": ["/.dockerenv"]}, DOCKER),
    ({}, DOCKER),
])
def test_container_gpu_flag(extra: dict[str, Any], expected: str) -> None:
    assert advice.container_gpu_flag(facts(**extra)) == expected


def test_driver_ceiling_is_the_gpu_whose_support_ends_first() -> None:
    gpus = [{"name": "Tesla P100", "capability": [6, 0]}, {"name": "Tesla K80", "capability": [3, 7]},
            {"name": "Mystery"}]  # a GPU of unknown capability has no known ceiling and must not break it
    assert advice.driver_ceiling(facts(gpus=gpus)) == (470, "GPU 1 Tesla K80 (compute capability 3.7)")
    assert advice.driver_ceiling(facts(gpus=gpus[:1])) == (580, "GPU 0 Tesla P100 (compute capability 6.0)")
    assert advice.driver_ceiling(facts(gpus=[{"name": "H100", "capability": [9, 0]}, {"name": "Mystery"}])) is None
