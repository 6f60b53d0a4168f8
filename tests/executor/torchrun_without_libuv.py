#!/usr/bin/env python3
"""torchrun (torch.distributed.run) for TrainTest.TrainsUnderTorchrun, with its agent's TCPStore
made without libuv when USE_LIBUV=0.

Debian 13 builds torch 2.6 without libuv, and torchrun's static rendezvous creates its TCPStore
with torch's default (libuv) whatever USE_LIBUV says, so Debian's own torchrun fails at
rendezvous ("use_libuv was requested but PyTorch was build without libuv support"). Here the
agent's store takes use_libuv=False instead; everything else is torchrun's. Torch without the
use_libuv argument (1.13) runs torchrun unchanged.
"""
import os
import sys

import torch.distributed as dist


def store_without_libuv(base):
    class TCPStoreWithoutLibuv(base):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("use_libuv", False)
            super().__init__(*args, **kwargs)

    return TCPStoreWithoutLibuv


if os.environ.get("USE_LIBUV") == "0" and "use_libuv" in (dist.TCPStore.__init__.__doc__ or ""):
    from torch.distributed.elastic.rendezvous import static_tcp_rendezvous

    dist.TCPStore = store_without_libuv(dist.TCPStore)
    static_tcp_rendezvous.TCPStore = dist.TCPStore

from torch.distributed.run import main  # noqa: E402 (after the store is chosen)

if __name__ == "__main__":
    sys.exit(main())
