# SPDX-License-Identifier: MIT
"""wcache: attach a Python engine zero-copy to a wcache rank daemon (wcd).

    import torch, wcache
    model = wcache.transformers.from_pretrained("Qwen/Qwen3-8B", device="cuda:0",
                                                dtype=torch.bfloat16)   # served, or loaded

    with wcache.connect(device="cuda:0") as conn:
        model = conn.attach(model_dir="/models/llama", tp_size=1, tp_rank=0)
        w = model["model.embed_tokens.weight"]        # torch.Tensor on cuda:0
        arrays = model.tensors(framework="numpy")     # host backend: read-only

Pure Python over libwcache.so (ctypes) with DLPack hand-off; see
wcache.torch.load_into for binding a meta-initialised nn.Module, and the
package's README.md (tools/libwcache/python) for the lifetime and
read-only rules.
"""
from ._core import (Connection, LifeResult, Model, Notice,
                    PendingModel, ReadOnlyWarning,
                    TensorInfo, connect, live_leases, live_tensors)
from ._lib import lib_path
from ._push import update_ranks
from .errors import (BadReply, Busy, DaemonGone, DaemonSleeping, Error,
                     FallbackWarning, HashMismatch, IdentityMismatch, NoDaemon,
                     NoHashes, NotImplementedByDaemon, NotServed, OutOfOrder,
                     ProtocolMismatch, ReadOnly, Refused, Timeout, TryAgain)

__version__ = "0.1.0"
__all__ = [
    "connect", "Connection", "Model", "TensorInfo", "LifeResult", "Notice", "PendingModel",
    "live_tensors", "live_leases", "lib_path", "ReadOnlyWarning", "update_ranks",
    "Error", "NoDaemon", "Refused", "IdentityMismatch", "TryAgain",
    "DaemonSleeping", "Busy", "DaemonGone", "ReadOnly", "Timeout",
    "ProtocolMismatch", "BadReply", "HashMismatch", "NoHashes", "OutOfOrder",
    "NotImplementedByDaemon", "NotServed", "FallbackWarning",
]


def __getattr__(name):
    """wcache.torch and wcache.transformers on first use (import wcache
    imports neither torch nor transformers):
    wcache.transformers.from_pretrained(...) after a plain import wcache."""
    if name in ("torch", "transformers"):
        import importlib
        return importlib.import_module("." + name, __name__)
    raise AttributeError("module 'wcache' has no attribute %r" % (name,))
