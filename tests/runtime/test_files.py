import os

import pytest

from tvm_chiplet.runtime.files import atomic_write


def test_file_appears_whole_with_normal_permissions(tmp_path):
    path = atomic_write(tmp_path / "a.txt", lambda tmp: open(tmp, "w").write("hello"))  # noqa: SIM115
    assert open(path).read() == "hello"  # noqa: SIM115
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask


def test_failed_write_leaves_nothing_and_keeps_the_old_file(tmp_path):
    target = tmp_path / "a.txt"
    target.write_text("old")

    def fail(tmp):
        open(tmp, "w").write("partial")  # noqa: SIM115
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, fail)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_missing_directory_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        atomic_write(tmp_path / "nowhere" / "a.txt", lambda tmp: None)
