# SPDX-License-Identifier: MIT
"""torch's device spellings, mapped to the device libwcache connects to.

Everywhere the package takes a device (wcache.connect, Connection,
wcache.transformers.from_pretrained) it takes what torch and an engine
have at hand:

    "cuda"                   the current CUDA device (torch's, when torch is
                             imported and sees a GPU; else 0)
    "cuda:N", N, "N"         CUDA ordinal N (as torch counts, under
                             CUDA_VISIBLE_DEVICES)
    torch.device("cuda", N)  the same; torch.device("cuda"): the current one
    "GPU-<uuid>"             a GPU by its UUID (nvidia-smi -L)
    "host", "host:NAME"      the host backend's daemons ("host-NAME", the
                             file name wcctl status prints, too)
    "cpu", torch.device("cpu")  the host daemon named "host"

parse() gives the spec libwcache takes (wcache.h: "0", "GPU-...", "host",
"host:NAME") and the torch device the served tensors live on ("cuda:N",
"cpu"; None for a UUID that no torch device here has). Pure string work
but for "cuda" and UUIDs, which ask torch when it is already imported
(never imported here).
"""
import collections
import numbers
import os
import re
import sys

Device = collections.namedtuple("Device", "spec torch")
Device.__doc__ = """spec: the device as libwcache takes it (None: none
given); torch: where its tensors are, as torch spells it ("cuda:0", "cpu"),
None where that is not known here (a GPU UUID torch does not list)."""

ACCEPTED = ('"cuda", "cuda:N", a CUDA ordinal N (int), torch.device("cuda", N), '
            '"GPU-<uuid>" (as nvidia-smi -L prints it), "host", "host:NAME" or "cpu"')
_ORDINAL = re.compile(r"(?:cuda:)?([0-9]+)\Z")
_HOST = re.compile(r"host(?:[:-].*)?\Z", re.S)


def _torch():
    """torch when this process imported it (a device string never imports it)."""
    return sys.modules.get("torch")


def _current_ordinal():
    """torch's current CUDA device where torch is imported and sees a GPU, else 0."""
    t = _torch()
    try:
        if t is not None and t.cuda.is_available():
            return int(t.cuda.current_device())
    except Exception:   # noqa: BLE001 (a torch without CUDA support: ordinal 0)
        pass
    return 0


def uuid_ordinal(uuid):
    """The CUDA ordinal torch gives the GPU of this UUID, or None (no torch
    imported, no such GPU, or a torch whose device properties lack uuid)."""
    t = _torch()
    want = uuid.lower()[len("gpu-"):]
    try:
        if t is None or not t.cuda.is_available():
            return None
        for i in range(t.cuda.device_count()):
            got = str(getattr(t.cuda.get_device_properties(i), "uuid", "")).lower()
            if got.startswith("gpu-"):
                got = got[4:]
            if got and got == want:
                return i
    except Exception:   # noqa: BLE001 (no usable CUDA here: not known)
        return None
    return None


def _bad(device, what):
    return ValueError("wcache: %s %r is not a device wcache knows: use %s" % (what, device, ACCEPTED))


def parse(device, what="device"):
    """Device(spec, torch) of any spelling above (None: Device(None, None));
    ValueError naming the value and the spellings for anything else,
    TypeError for a value of another type. what names the argument in the
    error ("device", "from_pretrained's device")."""
    if device is None:
        return Device(None, None)
    if isinstance(device, bool):
        raise TypeError("wcache: %s must be a str or a CUDA ordinal (int), not a bool (%r); use %s"
                        % (what, device, ACCEPTED))
    if isinstance(device, numbers.Integral):   # int, numpy.int64, a 0-d index
        device = int(device)
        if device < 0:
            raise _bad(device, what)
        return Device(str(device), "cuda:%d" % device)
    if type(device).__name__ == "device" and type(device).__module__ == "torch":
        if device.type == "cpu":
            return Device("host", "cpu")
        if device.type != "cuda":
            raise _bad(device, what)
        n = _current_ordinal() if device.index is None else device.index
        return Device(str(n), "cuda:%d" % n)
    if isinstance(device, bytes):
        device = os.fsdecode(device)
    if not isinstance(device, str):
        raise TypeError("wcache: %s must be a str, an int (a CUDA ordinal) or a torch.device, not %s; use %s"
                        % (what, type(device).__name__, ACCEPTED))
    if device == "cuda":
        n = _current_ordinal()
        return Device(str(n), "cuda:%d" % n)
    m = _ORDINAL.match(device)
    if m:
        n = int(m.group(1))
        return Device(str(n), "cuda:%d" % n)
    if device == "cpu":
        return Device("host", "cpu")
    if _HOST.match(device):
        return Device(device, "cpu")     # libwcache checks NAME (letters, digits, _ and -)
    if device.startswith("GPU-") and len(device) > 4:
        n = uuid_ordinal(device)
        return Device(device, None if n is None else "cuda:%d" % n)
    raise _bad(device, what)
