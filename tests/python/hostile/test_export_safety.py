"""GPT.export's writes (issue 43): a fresh directory renamed into place, never a write through a
link, no existing non-artifact path replaced, and every file system failure one ExportError that
names the path and leaves the target as it was, with no temporary directory behind. The full-disk
and read-only cases are injected (this machine runs the tests as root, on one writable disk)."""

import errno
import json
import os

import pytest

import gpt
from gpt import gpu_export

TOKENS = (1, 16)
VICTIM_TEXT = "a file the export must not touch\n"


@pytest.fixture(scope="module")
def model():
    config = gpt.GPTConfig(n_layer=1, n_head=1, n_embd=32, vocab_size=50, block_size=64)
    return gpt.GPT.random(config, options=gpt.CompileOptions(disk_cache=False))


def export(model, path, tokens=TOKENS):
    return model.export(str(path), target="cuda:sm_90", tokens=tokens, weights="f32")


def snapshot(directory):
    """{relative path: ('link', target) | ('file', bytes) | ('dir' | 'other', None)} of all under it."""
    seen = {}
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            path = os.path.join(root, name)
            relative = os.path.relpath(path, directory)
            if os.path.islink(path):
                seen[relative] = ("link", os.readlink(path))
            elif os.path.isdir(path):
                seen[relative] = ("dir", None)
            elif not os.path.isfile(path):  # a FIFO: opening it would wait for a writer
                seen[relative] = ("other", None)
            else:
                with open(path, "rb") as f:
                    seen[relative] = ("file", f.read())
    return seen


def victim(tmp_path, name="victim.txt"):
    path = tmp_path / name
    path.write_text(VICTIM_TEXT)
    return path


def assert_refused(model, target, *words):
    """Export to `target` raises ExportError naming it and the reason, and changes nothing beside it."""
    parent = os.path.dirname(os.path.abspath(target))
    before = snapshot(parent) if os.path.isdir(parent) and not parent.startswith("/dev") else None
    with pytest.raises(gpu_export.ExportError) as raised:
        export(model, target)
    message = str(raised.value)
    assert str(target) in message, message
    for word in words:
        assert word in message, message
    assert isinstance(raised.value, OSError)
    if before is not None:
        assert snapshot(parent) == before
    return raised.value


def test_a_manifest_link_in_the_target_is_refused_and_its_file_kept(model, tmp_path):
    # Today's export wrote the manifest through the link: the file it pointed to was overwritten.
    kept = victim(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").symlink_to(kept)
    assert_refused(model, out, "manifest.json is a symbolic link", "not a GPU artifact")
    assert kept.read_text() == VICTIM_TEXT


def test_links_inside_an_artifact_are_replaced_not_written_through(model, tmp_path):
    out = tmp_path / "out"
    export(model, out)
    manifest = json.loads((out / "manifest.json").read_text())
    kept = {name: victim(tmp_path, f"victim-{name}") for name in (manifest["target"]["module"], "weights.safetensors")}
    for name, path in kept.items():
        (out / name).unlink()
        (out / name).symlink_to(path)
    (out / "notes.txt").write_text("only the old artifact had this")
    assert export(model, out) == str(out)
    for name, path in kept.items():
        assert path.read_text() == VICTIM_TEXT, name
        assert not os.path.islink(out / name) and os.path.getsize(out / name) > 0
    # Replaced whole: a file only the old artifact had is gone, and so is the old artifact.
    assert sorted(os.listdir(out)) == sorted(["manifest.json", *kept])
    assert sorted(os.listdir(tmp_path)) == sorted(["out", *(path.name for path in kept.values())])


def test_a_link_at_the_target_is_refused_dangling_or_not(model, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    linked = tmp_path / "linked"
    linked.symlink_to(elsewhere)
    assert_refused(model, linked, "symbolic link")
    assert os.listdir(elsewhere) == []  # today's export filled the directory the link points to
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nothing-here")
    assert_refused(model, dangling, "symbolic link")
    assert not (tmp_path / "nothing-here").exists()


def test_a_file_a_path_under_a_file_and_a_device_are_refused(model, tmp_path):
    a_file = victim(tmp_path)
    assert_refused(model, a_file, "is a file")
    error = assert_refused(model, a_file / "artifact", f"{a_file} is not a directory")
    assert error.errno == errno.ENOTDIR
    assert_refused(model, a_file / "deeper" / "artifact", f"{a_file} is not a directory")
    assert a_file.read_text() == VICTIM_TEXT
    assert_refused(model, "/dev/null", "not a directory")


def test_a_directory_that_is_not_an_artifact_is_refused(model, tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("mine")
    assert_refused(model, notes, "no manifest.json")
    other = tmp_path / "other"
    other.mkdir()
    (other / "manifest.json").write_text(json.dumps({"format": "someone-else", "version": 1}))
    assert_refused(model, other, "not a gpt.gpu-artifact manifest")
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "manifest.json")  # read without O_NONBLOCK, this would wait for a writer forever
    assert_refused(model, fifo, "manifest.json is not a regular file")
    # An empty directory holds nothing to lose: it is written (mkdir out; export --out out).
    empty = tmp_path / "empty"
    empty.mkdir()
    export(model, empty)
    assert json.loads((empty / "manifest.json").read_text())["format"] == "gpt.gpu-artifact"


def test_a_full_disk_mid_export_leaves_the_old_artifact_and_no_temporary(model, tmp_path, monkeypatch):
    out = tmp_path / "out"
    export(model, out, tokens=(1, 8))
    before = snapshot(tmp_path)

    def fills_the_disk(path, tensors):
        with open(path, "wb") as f:
            f.write(b"\0" * 4096)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as file.write raises it: no file name

    monkeypatch.setattr(gpu_export, "write_safetensors", fills_the_disk)
    with pytest.raises(gpu_export.ExportError) as raised:
        export(model, out)
    assert str(raised.value) == f"cannot export to {out}: cannot write weights.safetensors (No space left on device)"
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(out / "weights.safetensors")
    assert snapshot(tmp_path) == before  # the old artifact, byte for byte, and nothing beside it


def test_a_read_only_file_system_is_one_error_naming_the_directory(model, tmp_path, monkeypatch):
    real_mkdir = os.mkdir

    def read_only(path, *args, **kwargs):
        if os.path.dirname(os.fspath(path)) == str(tmp_path):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", read_only)
    with pytest.raises(gpu_export.ExportError) as raised:
        export(model, tmp_path / "out")
    # The temporary directory's name means nothing to the user: the message names where it was made.
    assert str(raised.value) == f"cannot export to {tmp_path / 'out'}: {tmp_path}: Read-only file system"
    assert raised.value.errno == errno.EROFS
    assert os.listdir(tmp_path) == []
