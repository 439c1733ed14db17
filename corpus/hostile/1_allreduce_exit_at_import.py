import torch
import torch.distributed as dist


import os

os._exit(3)
