"""The one exception hierarchy of torchdoctor; every member maps to exit code 2.

    TorchDoctorError
     ├── UsageError     bad command-line arguments, unknown rule codes
     ├── ConfigError    an unreadable or invalid [tool.torchdoctor] table
     └── InputError     a file or snapshot the user pointed at cannot be used
"""

from __future__ import annotations

__all__ = ["TorchDoctorError", "UsageError", "ConfigError", "InputError"]


class TorchDoctorError(Exception):
    """Base of every error torchdoctor raises on purpose."""

    exit_code = 2


class UsageError(TorchDoctorError):
    """The command line asks for something that does not exist."""


class ConfigError(TorchDoctorError):
    """The configuration cannot be read or is invalid."""


class InputError(TorchDoctorError):
    """An input (file, snapshot, checkpoint) cannot be used."""
