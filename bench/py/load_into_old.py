# SPDX-License-Identifier: MIT
"""wcache.torch.load_into as it was before its per-parameter work was cut
(commit 39f7c68): kept only so that bench/py/py_start.py can time the old and
the new one in the same run (--ab-load-into). Not part of the package."""
import collections

import torch

from wcache.torch import Bound, LoadError, _covered

def _slots(module):
    """Every (owner module, attribute, tensor, is_param, full name) that
    state_dict covers: parameters (tied ones under each name) and
    persistent buffers."""
    out = []
    for prefix, mod in module.named_modules(remove_duplicate=False):
        pre = prefix + "." if prefix else ""
        for name, p in mod._parameters.items():
            if p is not None:
                out.append((mod, name, p, True, pre + name))
        skip = getattr(mod, "_non_persistent_buffers_set", set())
        for name, b in mod._buffers.items():
            if b is not None and name not in skip:
                out.append((mod, name, b, False, pre + name))
    seen = set()
    uniq = []
    for s in out:
        key = (id(s[0]), s[1])
        if key not in seen:
            seen.add(key)
            uniq.append(s)
    return uniq


def load_into(module, model, strict=True, name_map=None, requires_grad=False):
    """Points module's parameters and persistent buffers at the served
    tensors of model (a wcache.Model, or any mapping name -> torch.Tensor)
    without copying; returns Bound(bound, missing, unexpected, tied).

    name_map: {module name: served name} for engines whose names differ.
    strict: raise LoadError when a module name has no served tensor or a
    served tensor is left over (served names whose bytes lie inside bound
    tensors, like fused views or aliases, are not left over). Shape and
    dtype must match exactly in any case (converting would copy).
    Parameters become nn.Parameter(requires_grad=requires_grad) over the
    served memory (read-only: leave requires_grad False to train adapters,
    never the served weights)."""
    served = model.tensors("torch") if hasattr(model, "tensors") else dict(model)
    name_map = dict(name_map or {})
    slots = _slots(module)
    # tied: one tensor object under several names
    groups = collections.OrderedDict()
    for s in slots:
        groups.setdefault(id(s[2]), []).append(s)
    bound, missing, tied, bad = [], [], {}, []
    used = set()
    for group in groups.values():
        src = None
        for s in group:
            want = name_map.get(s[4], s[4])
            if want in served:
                src = (s[4], want)
                break
        if src is None:
            missing.extend(s[4] for s in group)
            continue
        t = served[src[1]]
        ref = group[0][2]
        if tuple(t.shape) != tuple(ref.shape) or t.dtype != ref.dtype:
            bad.append("%s: the module has %s %s, the daemon serves %s as %s %s"
                       % (src[0], ref.dtype, tuple(ref.shape), src[1], t.dtype, tuple(t.shape)))
            continue
        used.add(src[1])
        param = torch.nn.Parameter(t, requires_grad=requires_grad)  # one, for every tied name
        for s in group:
            mod, attr = s[0], s[1]
            if s[3]:
                mod._parameters[attr] = param
            else:
                mod._buffers[attr] = t
            bound.append(s[4])
            if s[4] != src[0]:
                tied[s[4]] = src[0]
    unused = {}
    for n, t in served.items():
        if n not in used:
            nb = t.numel() * t.element_size()
            unused[n] = (t.data_ptr(), t.data_ptr() + nb)
    ranges = []
    for n in used:
        t = served[n]
        ranges.append((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()))
    unexpected = sorted(set(unused) - _covered(unused, ranges))
    if bad:
        raise LoadError("wcache.torch.load_into: %d tensor(s) do not fit (no conversion: it would copy): %s"
                        % (len(bad), "; ".join(bad[:8])))
    if strict and (missing or unexpected):
        parts = []
        if missing:
            parts.append("%d module name(s) have no served tensor: %s" % (len(missing), ", ".join(missing[:8])))
        if unexpected:
            parts.append("%d served tensor(s) are not used: %s" % (len(unexpected), ", ".join(unexpected[:8])))
        raise LoadError("wcache.torch.load_into: %s. Pass name_map={module name: served name}, "
                        "or strict=False to bind what matches" % "; ".join(parts))
    return Bound(bound, missing, unexpected, tied)
