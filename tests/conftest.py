"""Shared test set-up: GPU tests run only where CUDA exists."""

from __future__ import annotations

import pytest


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if any(item.get_closest_marker("gpu") for item in items) and not _cuda_available():
        skip = pytest.mark.skip(reason="needs a CUDA device (run on a GPU machine)")
        for item in items:
            if item.get_closest_marker("gpu"):
                item.add_marker(skip)
