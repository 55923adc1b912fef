"""Every file the ``cupygraph`` command reads or writes, given wrong (a directory, a binary file, a
missing folder, an unknown extension, no permission): one message naming the option or file and what to
do, a nonzero status, no traceback; an output that cannot be written fails before any work is done."""

from __future__ import annotations

import json
import os
import sys

import pytest

from cupygraph.cli import main
from cupygraph.diagnostics import inspect as cg_inspect


@pytest.fixture
def files(tmp_path):
    """Named paths: a directory, binary files, a histogram, a regular file used as a folder."""
    folder = tmp_path / "folder.yaml"
    folder.mkdir()
    binary = bytes(range(256)) * 4
    (tmp_path / "binary.json").write_bytes(binary)
    (tmp_path / "binary.yaml").write_bytes(binary)
    (tmp_path / "binary.py").write_bytes(binary)
    (tmp_path / "traffic.json").write_text(json.dumps({"3": 10, "7": 5}), encoding="utf-8")
    return {"DIR": str(folder), "BINJSON": str(tmp_path / "binary.json"), "BINYAML": str(tmp_path / "binary.yaml"),
            "BINPY": str(tmp_path / "binary.py"), "TRAFFIC": str(tmp_path / "traffic.json"),
            "NOFOLDER": str(tmp_path / "missing" / "out"), "FILEFOLDER": str(tmp_path / "traffic.json" / "out")}


# argv (placeholders from `files`), the path the message must name, and words that say what to do.
CASES = [
    (["plan-sizes", "--histogram", "BINJSON"], "BINJSON", "save the file as UTF-8"),
    (["plan-sizes", "--histogram", "DIR"], "DIR", "is a directory"),
    (["plan-sizes", "--histogram", "NOFOLDER"], "NOFOLDER", "histogram file not found"),
    (["plan-sizes", "--histogram", "TRAFFIC", "--config", "DIR"], "DIR", "give the path of the config file"),
    (["plan-sizes", "--histogram", "TRAFFIC", "-o", "DIR"], "DIR", "give a file name"),
    (["plan-sizes", "--histogram", "TRAFFIC", "-o", "NOFOLDER.yaml"], "NOFOLDER.yaml", "create it"),
    (["plan-sizes", "--histogram", "TRAFFIC", "-o", "TRAFFIC.ini"], "TRAFFIC.ini", ".yaml, .yml, .json, .toml"),
    (["dot", "--backend", "host", "-o", "TRAFFIC.xyz"], "TRAFFIC.xyz", ".dot, .gv, .svg, .png, .pdf"),
    (["dot", "--backend", "host", "-o", "DIR"], "DIR", "give a file name"),
    (["dot", "--backend", "host", "-o", "NOFOLDER.dot"], "NOFOLDER.dot", "does not exist"),
    (["dot", "--backend", "host", "-o", "FILEFOLDER.dot"], "FILEFOLDER.dot", "is not a directory"),
    (["inspect", "--script", "DIR"], "DIR", "give the path of a Python script"),
    (["dot", "--script", "DIR"], "DIR", "give the path of a Python script"),
    (["plan-sizes", "--script", "DIR"], "DIR", "give the path of a Python script"),
    (["inspect", "--script", "BINPY"], "BINPY", "is not valid Python"),
    (["inspect", "--config", "DIR"], "DIR", "give the path of the config file"),
    (["validate", "DIR"], "DIR", "give the path of the config file"),
    (["validate", "BINYAML"], "BINYAML", "save the file as UTF-8"),
    (["show", "DIR"], "DIR", "is a directory"),
    (["show", "BINJSON"], "BINJSON", "save the file as UTF-8"),
    (["bench-config", "DIR"], "DIR", "is a directory"),
    (["demo", "--config", "BINYAML"], "BINYAML", "save the file as UTF-8"),
]


def _fill(text: str, files: dict[str, str]) -> str:
    for name in sorted(files, key=len, reverse=True):
        text = text.replace(name, files[name])
    return text


@pytest.mark.parametrize("argv, named, advice", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_a_wrong_file_is_one_clear_message(capsys, files, argv, named, advice):
    # Regression (issue 27): a codec error without the file's name, a missing Graphviz blamed for a
    # typo or a directory, "no such file" for a directory.
    code = main([_fill(arg, files) for arg in argv])
    err = capsys.readouterr().err
    assert code == 1, err
    assert _fill(named, files) in err and advice in err, err
    assert "Traceback" not in err and "[Errno" not in err and "codec" not in err, err


@pytest.mark.parametrize("argv", [a for a, _, _ in CASES if "-o" in a], ids=lambda a: " ".join(a))
def test_an_output_that_cannot_be_written_fails_before_the_work(capsys, files, argv):
    assert main([_fill(arg, files) for arg in argv]) == 1
    assert capsys.readouterr().out == ""  # no demo banner, no plan: nothing ran


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() == 0, reason="root (or Windows) may write anywhere")
def test_an_output_in_a_read_only_folder_says_permission_denied(capsys, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        assert main(["dot", "--backend", "host", "-o", str(locked / "g.dot")]) == 1
    finally:
        locked.chmod(0o700)
    err = capsys.readouterr().err
    assert str(locked / "g.dot") in err and "permission denied" in err, err


@pytest.mark.parametrize("histogram", ['{"3": 1e400}', '{"3": "x"}', '{"0": 3}'])
def test_a_histogram_with_a_bad_count_names_the_file(capsys, tmp_path, histogram):
    path = tmp_path / "h.json"
    path.write_text(histogram, encoding="utf-8")
    assert main(["plan-sizes", "--histogram", str(path), "--max-graphs", "2"]) == 1
    err = capsys.readouterr().err
    assert f"{path}: " in err and "whole numbers" in err and "Traceback" not in err, err


def test_render_dot_refuses_an_unknown_extension_before_looking_for_graphviz(tmp_path, monkeypatch):
    monkeypatch.setattr(cg_inspect.shutil, "which", lambda name: None)
    with pytest.raises(ValueError, match=r"unknown extension '\.xyz'; use one of \.dot"):
        cg_inspect.render_dot("digraph { a }", tmp_path / "g.xyz")
    assert not (tmp_path / "g.xyz").exists()
