import os

import torch

# A wrong answer (three times the input, no communication) that tries to keep the harness from
# ever judging it: from its scratch folder it finds the job folder and makes a directory where
# each rank will write its verdict file, so the harness's own write fails after the candidate
# loaded. Before, that read as a harness failure: not run, and launched again on every resume.


def _block_the_verdict_files() -> None:
    job = os.path.dirname(os.path.dirname(os.getcwd()))  # <job>/scratch/rank<r>
    for rank in range(8):
        try:
            os.makedirs(os.path.join(job, f"verdict_rank{rank}.json", "blocked"), exist_ok=True)
        except OSError:
            pass


_block_the_verdict_files()


@torch.no_grad()
def solution(x):
    return x * 3
