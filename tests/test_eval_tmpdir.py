"""The ranks' TMPDIR stays short: symmetric memory binds a Unix socket there (107 bytes at most);
the launcher removes the ones the ranks made and nothing a candidate names instead."""

import os
import tempfile

from pkb.eval.launcher import rank_tmpdirs_now, remove_rank_tmpdirs
from pkb.eval.rank_process import short_tmpdir


def test_tmpdir_fits_a_unix_socket_path_even_under_a_deep_job_dir(tmp_path):
    scratch = tmp_path.joinpath(*["a_rather_long_folder_name"] * 6, "scratch", "rank0")
    scratch.mkdir(parents=True)
    before = rank_tmpdirs_now()
    tmp = short_tmpdir(str(scratch), 0)
    try:
        assert os.path.isdir(tmp)
        assert len(os.path.join(tmp, "symm_mem-4194304")) < 108
        assert (scratch / "tmpdir.txt").read_text() == tmp
    finally:
        remove_rank_tmpdirs(scratch.parent.parent, before)
    assert not os.path.exists(tmp)


def test_a_tmpdir_marker_rewritten_to_a_hosts_folder_removes_nothing(tmp_path):
    # a folder of the host's, of the ranks' own pattern, there before the launch
    host = tempfile.mkdtemp(prefix="pkb-r0-", dir="/tmp")
    open(os.path.join(host, "keep"), "w").close()
    try:
        before = rank_tmpdirs_now()
        scratch = tmp_path / "job" / "scratch" / "rank0"
        scratch.mkdir(parents=True)
        (scratch / "tmpdir.txt").write_text(host)  # what a candidate can write in its scratch
        other = tmp_path / "job" / "scratch" / "rank1"
        other.mkdir()
        (other / "tmpdir.txt").write_text(str(tmp_path))  # not a rank folder at all
        remove_rank_tmpdirs(tmp_path / "job", before)
        assert os.path.exists(os.path.join(host, "keep")) and tmp_path.is_dir()
    finally:
        import shutil

        shutil.rmtree(host, ignore_errors=True)


def test_a_fifo_where_the_harness_reads_a_job_file_does_not_block_it(tmp_path):
    import time

    import pytest

    from pkb.eval.job import read_json, read_plain

    scratch = tmp_path / "job" / "scratch" / "rank0"
    scratch.mkdir(parents=True)
    os.mkfifo(scratch / "tmpdir.txt")  # an open for reading would wait for a writer forever
    os.mkfifo(tmp_path / "status_rank0.json")
    t0 = time.monotonic()
    remove_rank_tmpdirs(tmp_path / "job", rank_tmpdirs_now())
    assert read_json(tmp_path / "status_rank0.json") is None
    with pytest.raises(OSError):
        read_plain(tmp_path / "status_rank0.json")
    assert time.monotonic() - t0 < 5
    (tmp_path / "big.json").write_bytes(b" " * 100)
    with pytest.raises(OSError):
        read_plain(tmp_path / "big.json", cap=10)
    assert read_plain(tmp_path / "big.json", tail=4) == b"    "
