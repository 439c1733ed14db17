"""The ranks' TMPDIR stays short: symmetric memory binds a Unix socket there (107 bytes at most)."""

import os

from pkb.eval.launcher import remove_rank_tmpdirs
from pkb.eval.rank_process import short_tmpdir


def test_tmpdir_fits_a_unix_socket_path_even_under_a_deep_job_dir(tmp_path):
    scratch = tmp_path.joinpath(*["a_rather_long_folder_name"] * 6, "scratch", "rank0")
    scratch.mkdir(parents=True)
    tmp = short_tmpdir(str(scratch), 0)
    try:
        assert os.path.isdir(tmp)
        assert len(os.path.join(tmp, "symm_mem-4194304")) < 108
        assert (scratch / "tmpdir.txt").read_text() == tmp
    finally:
        remove_rank_tmpdirs(scratch.parent.parent)
    assert not os.path.exists(tmp)
