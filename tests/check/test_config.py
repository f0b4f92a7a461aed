"""Configuration: [tool.torchdoctor] keys, discovery of pyproject.toml, overrides and errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.check.fake_rules import fake_rules  # noqa: F401 - a fixture
from torchdoctor.catalog import RULES
from torchdoctor.cli import main
from torchdoctor.config import (
    Settings,
    find_config,
    glob_match,
    load_settings,
    parse_target_torch,
    settings_from_toml,
)
from torchdoctor.errors import ConfigError

BUGGY = 'import torch\nnet.cuda()\nx = torch.load("w.pt")\n'


def test_defaults_enable_everything() -> None:
    s = Settings()
    assert s.enabled == frozenset(RULES)
    assert s.target_torch is None


def test_select_prefix_ignore_all() -> None:
    assert settings_from_toml('select = ["TD3"]').enabled == {c for c in RULES if c.startswith("TD3")}
    assert settings_from_toml('select = ["ALL"]\nignore = ["TD3", "TD502"]').enabled == {
        c for c in RULES if not c.startswith("TD3") and c != "TD502"
    }
    assert settings_from_toml('select = ["TD3"]\nextend-select = ["TD502"]').enabled == {
        c for c in RULES if c.startswith("TD3")
    } | {"TD502"}


def test_target_torch() -> None:
    assert settings_from_toml('target-torch = "2.6"').target_torch == (2, 6)
    assert settings_from_toml('target-torch = "2.10.1"').target_torch == (2, 10)
    assert parse_target_torch("1.13") == (1, 13)
    with pytest.raises(ConfigError, match="quoted version"):
        settings_from_toml("target-torch = 2.6")  # a TOML float: 2.10 would read as 2.1
    with pytest.raises(ConfigError, match="target-torch"):
        settings_from_toml('target-torch = "latest"')
    with pytest.raises(ConfigError, match=r"^target-torch: expected a version such as \"2.6\", got '2'"):
        parse_target_torch("2")  # called on its own, the message still names what it reads


@pytest.mark.parametrize("body, needle", [
    ('selct = ["TD3"]', "unknown key 'selct' (did you mean 'select'?)"),
    ('select = ["TD999"]', "TD999"),
    ('ignore = ["XX1"]', "XX1"),
    ('select = "TD3"', "expected a list of strings"),
    ('per-file-ignores = {"tests/*" = ["TD9"]}', "TD9"),
    ('per-file-ignores = ["x"]', "expected a table"),
    ("exclude = [1]", "exclude"),
    ("select = [", "invalid TOML"),
])
def test_bad_config_names_the_problem(body: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=None) as info:
        settings_from_toml(body, where="proj/pyproject.toml")
    assert needle in str(info.value) and "proj/pyproject.toml" in str(info.value)



def test_exclude_and_extend_exclude_both_add_to_the_builtin_list(tmp_path: Path) -> None:
    s = settings_from_toml('exclude = ["gen"]\nextend-exclude = ["old/"]', root=str(tmp_path))
    assert s.exclude == ("gen",) and s.extend_exclude == ("old/",)
    assert s.all_excludes[-2:] == ("gen", "old/") and ".git" in s.all_excludes and ".venv" in s.all_excludes


def test_an_error_without_a_file_name_says_where_it_came_from() -> None:
    with pytest.raises(ConfigError) as info:
        settings_from_toml('selct = ["TD3"]')
    assert str(info.value).startswith("<config>: [tool.torchdoctor]: unknown key 'selct'")


def test_no_per_file_ignores_switch_nothing_off(tmp_path: Path) -> None:
    ignored = Settings(root=str(tmp_path)).ignored_for(str(tmp_path / "train.py"))
    assert ignored == frozenset() and "TD102" not in ignored

def test_per_file_ignores_and_globs(tmp_path: Path) -> None:
    s = settings_from_toml('[per-file-ignores]\n"tests/**" = ["TD3"]\n"*_test.py" = ["TD502"]', root=str(tmp_path))
    assert "TD302" in s.ignored_for(str(tmp_path / "tests" / "a" / "b.py"))
    assert s.ignored_for(str(tmp_path / "src" / "m_test.py")) == {"TD502"}
    assert s.ignored_for(str(tmp_path / "src" / "m.py")) == frozenset()


@pytest.mark.parametrize("pattern, path, is_dir, hit", [
    ("build", "build/x.py", False, True), ("build", "src/build/x.py", False, True), ("build", "builder/x.py", False, False),
    ("build", "build", False, True), ("build/", "build", False, False), ("build/", "build", True, True),
    ("build/", "src/build/x.py", False, True), ("/build", "build/x.py", False, True), ("/build", "src/build/x.py", False, False),
    ("./build", "src/build", True, False), ("./build", "build", True, True),
    ("tests/fixtures/**", "tests/fixtures/a/b.py", False, True), ("tests/fixtures/**", "tests/fixtures", True, True),
    ("tests/fixtures/**", "src/tests/fixtures/a.py", False, False), ("*.ipynb", "a/b/nb.ipynb", False, True),
    ("src/*.py", "src/a.py", False, True), ("src/*.py", "src/sub/a.py", False, False),
    ("**/gen_*.py", "a/b/gen_x.py", False, True), ("**/gen_*.py", "gen_x.py", False, True),
    ("**/gen", "a/gen/x.py", False, True), ("a/**/z.py", "a/z.py", False, True), ("a/**/z.py", "a/b/c/z.py", False, True),
    ("data/[ab].py", "data/a.py", False, True), ("data/[!ab].py", "data/a.py", False, False),
    ("data/[!ab].py", "data/c.py", False, True),
])
def test_glob_match(pattern: str, path: str, is_dir: bool, hit: bool) -> None:
    assert glob_match(pattern, path, is_dir) is hit


def test_a_negation_takes_a_path_back() -> None:
    from torchdoctor.config import patterns

    excludes = patterns(("gen/*", "!gen/keep.py"))
    assert excludes.match("gen/a.py") and not excludes.match("gen/keep.py")
    assert patterns(("build",)).names == {"build"} and not patterns(("build",)).has_rest  # no pathspec needed
    assert not patterns(("data/",)).match("data")  # a path is a file unless said otherwise: "data/" wants a folder
    assert not patterns(("data/",)).match_rest("data") and patterns(("data/",)).match_rest("data", True)
    assert not glob_match("data/", "data") and glob_match("data/", "data", True)


def test_a_negated_plain_name_is_taken_back() -> None:
    # A project whose package is called "build" takes it back from the built-in list with "!build".
    from torchdoctor.config import patterns

    assert patterns(("build",)).match("build/x.py")
    assert not patterns(("build", "!build")).match("build/x.py") and not patterns(("build", "!build")).match("build", True)


def test_paths_are_made_relative_to_the_root_only_inside_it(tmp_path: Path) -> None:
    from torchdoctor.config import relative_to

    root = tmp_path / "proj"
    assert relative_to(str(root / "src" / "a.py"), str(root)) == "src/a.py"
    assert relative_to(str(tmp_path / "other" / "a.py"), str(root)) == (tmp_path / "other" / "a.py").as_posix()


def test_find_config_searches_upward_for_our_table(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.torchdoctor]\nselect = ["TD1"]\n')
    sub = tmp_path / "pkg" / "sub"
    sub.mkdir(parents=True)
    (tmp_path / "pkg" / "pyproject.toml").write_text("[tool.black]\nline-length = 100\n")  # not ours: skipped
    assert find_config(str(sub)) == str(tmp_path / "pyproject.toml")
    s = load_settings(find_config(str(sub)))
    assert s.root == str(tmp_path) and s.enabled == {c for c in RULES if c.startswith("TD1")} and "TD101" in s.enabled


def test_find_config_passes_over_a_pyproject_it_cannot_read(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.torchdoctor]\nselect = ["TD1"]\n')
    sub = tmp_path / "pkg"
    sub.mkdir()
    (sub / "pyproject.toml").write_bytes(b"[tool.torchdoctor]\n# \xff\xfe latin-1 junk\n")  # not UTF-8
    assert find_config(str(sub)) == str(tmp_path / "pyproject.toml")


def _project(tmp_path: Path, table: str) -> Path:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n\n[tool.torchdoctor]\n" + table)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(BUGGY)
    return tmp_path


def _codes(capsys) -> list[str]:
    return [d["code"] for d in json.loads(capsys.readouterr().out)]


def test_cli_reads_nearest_pyproject(fake_rules, tmp_path: Path, monkeypatch, capsys) -> None:
    _project(tmp_path, 'ignore = ["TD102"]\n')
    monkeypatch.chdir(tmp_path / "src")
    main(["check", "train.py", "--output-format", "json"])
    assert _codes(capsys) == ["TD502"]
    main(["check", "train.py", "--output-format", "json", "--isolated"])
    assert _codes(capsys) == ["TD102", "TD502"]
    main(["check", "train.py", "--output-format", "json", "--select", "TD1"])  # the command line wins
    assert _codes(capsys) == ["TD102"]


def test_cli_config_option(fake_rules, tmp_path: Path, monkeypatch, capsys) -> None:
    _project(tmp_path, "")
    (tmp_path / "other.toml").write_text('select = ["TD5"]\n')
    monkeypatch.chdir(tmp_path)
    main(["check", "src", "--output-format", "json", "--config", "other.toml"])
    assert _codes(capsys) == ["TD502"]


def test_cli_exclude_and_per_file_ignores(fake_rules, tmp_path: Path, monkeypatch, capsys) -> None:
    _project(tmp_path, 'extend-exclude = ["gen"]\n[tool.torchdoctor.per-file-ignores]\n"src/*" = ["TD5"]\n')
    (tmp_path / "gen").mkdir()
    (tmp_path / "gen" / "g.py").write_text(BUGGY)
    monkeypatch.chdir(tmp_path)
    main(["check", ".", "--output-format", "json"])
    assert _codes(capsys) == ["TD102"]
    main(["check", ".", "--output-format", "json", "--per-file-ignores", "src/train.py:TD102"])
    assert _codes(capsys) == []


@pytest.mark.parametrize("table, needle", [
    ('nonsense = 1\n', "unknown key 'nonsense'"),
    ('select = ["TD777"]\n', "TD777"),
    ('target-torch = "x"\n', "target-torch"),
])
def test_cli_bad_config_exits_2_naming_the_file(fake_rules, tmp_path: Path, monkeypatch, capsys, table, needle):
    _project(tmp_path, table)
    monkeypatch.chdir(tmp_path)
    assert main(["check", "."]) == 2
    err = capsys.readouterr().err
    assert needle in err and "pyproject.toml" in err


@pytest.mark.parametrize("name, body", [
    ("pyproject.toml", "[project]\nname = 'x'\n"),
    ("other.toml", "[tool.black]\nline-length = 100\n"),
])
def test_config_without_our_table_says_so(fake_rules, tmp_path: Path, monkeypatch, capsys, name, body) -> None:
    (tmp_path / name).write_text(body)
    (tmp_path / "a.py").write_text(BUGGY)
    monkeypatch.chdir(tmp_path)
    assert main(["check", "a.py", "--config", name]) == 2
    err = capsys.readouterr().err
    assert f"{name}: no [tool.torchdoctor] table" in err and "unknown key" not in err


def test_config_under_another_name_may_hold_the_pyproject_table(fake_rules, tmp_path: Path, monkeypatch, capsys) -> None:
    (tmp_path / "ci.toml").write_text('[tool.torchdoctor]\nselect = ["TD5"]\n')
    (tmp_path / "a.py").write_text(BUGGY)
    monkeypatch.chdir(tmp_path)
    main(["check", "a.py", "--output-format", "json", "--config", "ci.toml"])
    assert _codes(capsys) == ["TD502"]


def test_missing_config_file_exits_2(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["check", ".", "--config", "nope.toml"]) == 2
    assert "nope.toml" in capsys.readouterr().err


def test_settings_reach_rules(tmp_path: Path) -> None:
    from torchdoctor.check.engine import analyse
    from torchdoctor.check.registry import RegisteredRule, only_rules

    seen = []
    record = RegisteredRule("TD503", (type(compile("", "", "exec", 1024)),),
                            lambda node, ctx: seen.append(getattr(ctx.settings, "target_torch", None)))
    with only_rules(record):
        analyse("import torch\n", "a.py", settings=settings_from_toml('target-torch = "2.6"'))
    assert seen == [(2, 6)]
