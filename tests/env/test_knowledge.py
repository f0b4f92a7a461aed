"""The knowledge tables and the CUDA_VISIBLE_DEVICES parser, checked against PyTorch's own code."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torchdoctor.env import knowledge as K
from torchdoctor.env.visible import parse_visible_devices, visible_count


# -- cubin / PTX rules ------------------------------------------------------------
@pytest.mark.parametrize(
    "entry, cc, runs",
    [
        ("sm_86", 89, True),  # same major, newer minor
        ("sm_86", 80, False),  # older minor
        ("sm_80", 90, False),  # another major: cubins do not cross
        ("compute_80", 90, True),  # PTX JIT-compiles forward
        ("compute_90", 86, False),
        ("sm_90a", 90, True),
        ("sm_100a", 103, False),  # arch-specific: exactly that one
        ("sm_100f", 103, True),  # family-specific
        ("sm_120", 121, True),  # GB10 runs sm_120 cubins
        ("sm_80", 87, False),  # Orin (iGPU) is not an sm_80 device
        ("sm_87", 87, True),
        ("sm_101", 110, True),  # Thor renamed in CUDA 13
        ("garbage", 80, False),
    ],
)
def test_code_runs_on(entry, cc, runs):
    assert K.code_runs_on(entry, cc) is runs


def test_agrees_with_pytorchs_device_requirement_table():
    torch_cuda = pytest.importorskip("torch.cuda")
    table = getattr(torch_cuda, "DEVICE_REQUIREMENT", None)
    if table is None:
        pytest.skip("this torch has no DEVICE_REQUIREMENT table")
    for code in table:
        for cc in [c for c in range(50, 130) if c % 10 <= 9]:
            assert K.code_runs_on(f"sm_{code}", cc) is (cc in table[code]), (code, cc)


def test_flavour_tables_match_the_installed_torch_release_table():
    torch_cuda = pytest.importorskip("torch.cuda")
    releases = getattr(torch_cuda, "PYTORCH_RELEASES_CODE_CC", None)
    if releases is None:
        pytest.skip("this torch has no PYTORCH_RELEASES_CODE_CC table")
    for cuda, by_arch in releases.items():
        flavour = "cu" + cuda.replace(".", "")
        for machine, ccs in by_arch.items():
            assert set(K.FLAVOUR_ARCHS[flavour][machine]) == set(ccs), (flavour, machine)


@pytest.mark.parametrize(
    "cc, machine, expected_first",
    [(61, "x86_64", "cu126"), (120, "x86_64", "cu130"), (121, "aarch64", "cu130"), (90, "aarch64", "cu130"), (52, "x86_64", "cu126")],
)
def test_flavours_for(cc, machine, expected_first):
    assert K.flavours_for(cc, machine)[0] == expected_first


def test_no_wheel_for_kepler_and_cu128_for_blackwell_consumer():
    assert K.flavours_for(35, "x86_64") == []
    assert {"cu128", "cu129", "cu130"} <= set(K.flavours_for(120, "x86_64"))
    assert "cu126" not in K.flavours_for(120, "x86_64")


def test_driver_tables():
    assert K.toolkit_driver((12, 8), windows=False) == (570, 26)
    assert K.toolkit_driver((12, 7), windows=False) == (570, 26)  # no 12.7: the next release's driver
    assert K.compat_floor(13, windows=False) == (580,) and K.compat_floor(12, False) == (525, 60, 13)
    assert K.max_cuda_for_driver((550, 54, 14), windows=False) == (12, 4)
    assert K.fmt_version((450, 80, 2)) == "450.80.02" and K.fmt_version((496, 4)) == "496.04"
    assert K.cuda_pair(12040) == (12, 4) and K.cuda_pair("13.0") == (13, 0) and K.cuda_pair(None) is None


# -- CUDA_VISIBLE_DEVICES ------------------------------------------------------------
@pytest.mark.parametrize(
    "value, expected",
    [
        (None, None), ("", []), ("0", [0]), ("1,0", [1, 0]), ("0,0", []), ("-1", []), ("0,-1,1", [0]),
        ("1gpu2,2ampere", [1, 2]), ("a,0", []), (" 1", [1]), ("GPU-ab,GPU-cd", ["GPU-ab", "GPU-cd"]),
        ("GPU-ab,1", ["GPU-ab"]), ("GPU-ab,GPU-ab", []), ("MIG-x", ["MIG-x"]), ("+", []),
        ("1-2", [1]), ("2+,0", [2, 0]), ("-3,1", []),  # strtoul stops at a sign after the first digit
    ],
)
def test_parse_visible_devices(value, expected):
    assert parse_visible_devices(value) == expected


_cvd_text = st.lists(
    st.one_of(st.integers(-2, 12).map(str),
              st.sampled_from(["", " 1", "x", "2a", "GPU-a", "GPU-b", "MIG-a", "+3", "-", "07", "1-2", "3+"])),
    min_size=1, max_size=5,
).map(",".join)


@settings(max_examples=300, deadline=None)
@given(_cvd_text)
def test_parser_agrees_with_pytorch(value):
    torch_cuda = pytest.importorskip("torch.cuda")
    import os

    old = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = value
    try:
        try:
            theirs = torch_cuda._parse_visible_devices()
        except ValueError:  # PyTorch's int('+') raises; we read it as nothing
            return
    finally:
        if old is None:
            del os.environ["CUDA_VISIBLE_DEVICES"]
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = old
    assert parse_visible_devices(value) == theirs


def test_visible_count():
    assert visible_count(None, 4).count == 4
    assert visible_count("3,4", 4).count == 1  # PyTorch cuts at the first id >= count
    assert visible_count("4", 4).count == 0
    assert visible_count("GPU-1", 2, ["GPU-1aa", "GPU-1bb"]).count == 0  # ambiguous prefix
    assert visible_count("GPU-1b", 2, ["GPU-1aa", "GPU-1bb"]).count == 1
    assert visible_count("MIG-abc", 1, ["GPU-1"]).count is None


@pytest.mark.parametrize("value, physical, uuids, count, reason", [
    ("GPU-zz", 2, ["GPU-1aa", "GPU-1bb"], 0, "no GPU has a UUID starting with 'GPU-zz'"),
    ("GPU-1b", 2, ["GPU-1aa", "GPU-1bb"], 1, ""),
    ("GPU-1a,GPU-1aa", 2, ["GPU-1aa", "GPU-2bb"], 0, "it names the same device twice (CUDA then shows none)"),
    ("GPU-1", 2, ["GPU-1aa", "GPU-1bb"], 0, "'GPU-1' starts the UUIDs of 2 GPUs (CUDA takes none of them)"),
    ("4", 4, None, 0, "device 4 does not exist (there are 4 GPUs: 0..3)"),
    ("2", 2, None, 0, "device 2 does not exist (there are 2 GPUs: 0..1)"),
    ("1", 1, None, 0, "device 1 does not exist (there is 1 GPU: 0..0)"),
    ("0,5", 2, None, 1, ""),  # cut at 5, but device 0 stays
    ("0,1", None, None, 2, ""), ("0,1", 4, None, 2, ""),
    ("", 2, None, 0, "it is set to the empty string"),
    ("0,0", 2, None, 0, "it names the same device twice (CUDA then shows none)"),
    ("x,0", 2, None, 0, "its first entry 'x' is not a device number"),
    ("GPU-x,GPU-x", 2, None, 0, "it names the same device twice (CUDA then shows none)"),
    ("MIG-x,MIG-x", 2, None, 0, "it names the same device twice (CUDA then shows none)"),
])
def test_visible_count_says_why_devices_are_hidden(value, physical, uuids, count, reason):
    got = visible_count(value, physical, uuids)
    assert (got.count, got.reason) == (count, reason)
