"""A submission's places: its folder is copied through descriptors that never follow a link (a link
placed in it, or swapped in for a file or a folder while it is copied, never reaches the copy, which root
seals, nor brings another folder's files into it), and its scratch folder is made anew, not emptied."""

import os

import pytest

from grader.sandbox import copying


def _tree(folder):
    found = {}
    for root, folders, files in os.walk(folder):
        for name in folders + files:
            path = os.path.join(root, name)
            relative = os.path.relpath(path, folder)
            if os.path.islink(path):
                found[relative] = "link"
            elif os.path.isdir(path):
                found[relative] = "folder"
            else:
                with open(path) as handle:
                    found[relative] = handle.read()
    return found


@pytest.fixture
def secret(tmp_path):
    """A folder of someone else's (the reference's, a root-owned file's) that no copy may hold."""
    folder = tmp_path / "secret"
    folder.mkdir()
    (folder / "ex04_sharding.py").write_text("the reference")
    return folder


def test_only_regular_files_and_folders_are_copied(tmp_path, secret):
    source = tmp_path / "submission"
    (source / "package" / "__pycache__").mkdir(parents=True)
    (source / ".git").mkdir()
    (source / "ex04_sharding.py").write_text("mine")
    (source / "package" / "helper.py").write_text("helper")
    (source / ".git" / "config").write_text("hidden")
    (source / "package" / "__pycache__" / "helper.pyc").write_text("cache")
    (source / "linked.py").symlink_to(secret / "ex04_sharding.py")
    (source / "linked_folder").symlink_to(secret)
    os.mkfifo(source / "waits_for_a_writer")  # opening it to read would wait for ever
    (source / "big.py").write_text("x" * 100)
    copying.copy_tree(str(source), str(tmp_path / "copy"), limit=50)
    assert _tree(tmp_path / "copy") == {"ex04_sharding.py": "mine", "package": "folder",
                                        "package/helper.py": "helper"}


@pytest.mark.parametrize("kind", ["file", "folder"])
def test_an_entry_swapped_for_a_link_while_it_is_copied_is_left_out(tmp_path, secret, monkeypatch, kind):
    """The swap happens at the worst moment: right after the entry was looked at (`lstat`), before it is opened."""
    source = tmp_path / "submission"
    source.mkdir()
    (source / "ex04_sharding.py").write_text("mine")
    swapped = source / "swapped"
    if kind == "file":
        swapped.write_text("mine too")
    else:
        swapped.mkdir()
        (swapped / "inner.py").write_text("mine too")
    real_lstat = os.lstat

    def lstat_then_swap(path, *args, **kwargs):
        seen = real_lstat(path, *args, **kwargs)
        if os.fsdecode(path) == "swapped" and not os.path.islink(swapped):
            if kind == "file":
                swapped.unlink()
            else:
                (swapped / "inner.py").unlink()
                swapped.rmdir()
            swapped.symlink_to(secret / "ex04_sharding.py" if kind == "file" else secret)
        return seen

    monkeypatch.setattr(copying.os, "lstat", lstat_then_swap)
    copying.copy_tree(str(source), str(tmp_path / "copy"), limit=2**20)
    copied = _tree(tmp_path / "copy")
    assert copied == {"ex04_sharding.py": "mine"}, copied
    assert "the reference" not in copied.values()


def test_a_fresh_scratch_folder_keeps_nothing_of_the_old_one(tmp_path):
    """Emptied, a folder would keep its own mode, times and extended attributes: a submission's notes
    (its drawn arguments) left there for a later check of its own. Made anew, it keeps none of them."""
    from grader.sandbox import scratch

    folder = tmp_path / "scratch"
    folder.mkdir()
    (folder / "notes").write_text("(7, 2, True)")
    try:
        os.setxattr(folder, "user.notes", b"(7, 2, True)")
    except OSError:
        pytest.skip("this file system keeps no user extended attributes")
    os.chmod(folder, 0o755)
    os.utime(folder, (0, 0))
    assert scratch.fresh(str(folder), uid=None, bounded=False) is False
    info = os.stat(folder)
    assert os.listdir(folder) == [] and os.listxattr(folder) == []
    assert oct(info.st_mode & 0o777) == oct(0o700) and info.st_mtime > 0
