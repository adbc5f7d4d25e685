"""The one file writer (fairseq_attn_records.output_files): a file appears whole under its
name or not at all, a failed write keeps the older file and leaves no temporary file, and a
folder written aside replaces the older one in one rename."""

import json
import os

import pytest

from fairseq_attn_records.output_files import (check_output_paths, replace_folder, replacing, staged, write_json,
                                               write_lines, write_text)


def test_text_lines_json_and_bytes_are_written_whole(tmp_path):
    write_text(str(tmp_path / "a.md"), "x\ny")
    write_lines(str(tmp_path / "b.txt"), iter(["one", "two"]))
    write_json(str(tmp_path / "c.json"), {"b": 1, "a": [1, 2]}, indent=2, sort_keys=True, end="\n")
    with replacing(str(tmp_path / "d.bin"), "wb") as f:
        f.write(b"\x00\xff")
    assert (tmp_path / "a.md").read_text() == "x\ny"
    assert (tmp_path / "b.txt").read_text() == "one\ntwo\n"
    assert (tmp_path / "c.json").read_text() == json.dumps({"a": [1, 2], "b": 1}, indent=2) + "\n"
    assert (tmp_path / "d.bin").read_bytes() == b"\x00\xff"
    assert sorted(os.listdir(tmp_path)) == ["a.md", "b.txt", "c.json", "d.bin"]


def test_a_failed_write_keeps_the_older_file_and_leaves_no_temporary(tmp_path):
    path = str(tmp_path / "scores.json")
    write_json(path, {"bleu": 27.3})

    def lines():
        yield "half"
        raise RuntimeError("stopped")

    with pytest.raises(RuntimeError, match="stopped"):
        write_lines(path, lines())
    with pytest.raises(TypeError):
        write_json(path, {"not json": object()})
    assert json.loads(open(path).read()) == {"bleu": 27.3}
    assert os.listdir(tmp_path) == ["scores.json"]


def test_staged_gives_a_name_in_the_same_folder_with_the_suffix_asked(tmp_path):
    path = str(tmp_path / "figure.png")
    with staged(path, ".png") as tmp:
        assert os.path.dirname(tmp) == str(tmp_path) and tmp.endswith(".tmp.png")
        assert not os.path.exists(path)
        open(tmp, "wb").write(b"png")
    assert open(path, "rb").read() == b"png" and os.listdir(tmp_path) == ["figure.png"]
    with pytest.raises(ValueError):
        with staged(path) as tmp:
            open(tmp, "wb").write(b"other")
            raise ValueError
    assert open(path, "rb").read() == b"png" and os.listdir(tmp_path) == ["figure.png"]


def test_replace_folder_puts_the_new_folder_in_place_of_the_old(tmp_path):
    final, new = tmp_path / "out", tmp_path / "out.tmp"
    final.mkdir()
    (final / "old.txt").write_text("old")
    new.mkdir()
    (new / "new.txt").write_text("new")
    replace_folder(str(new), str(final))
    assert os.listdir(final) == ["new.txt"] and os.listdir(tmp_path) == ["out"]
    again = tmp_path / "again"
    again.mkdir()
    replace_folder(str(again), str(tmp_path / "fresh"))  # no older folder
    assert sorted(os.listdir(tmp_path)) == ["fresh", "out"]


def test_check_output_paths_names_a_missing_folder(tmp_path):
    check_output_paths(str(tmp_path / "a.json"), None)
    with pytest.raises(FileNotFoundError, match="nowhere.*does not exist"):
        check_output_paths(str(tmp_path / "nowhere" / "a.json"))
