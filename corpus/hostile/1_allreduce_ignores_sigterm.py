import signal

import torch

# Ignores and blocks every catchable termination signal, then spins forever in its call: only
# SIGKILL ends it.
for _sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM):
    signal.signal(_sig, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT})


def solution(x):
    n = 0
    while True:
        n += 1
