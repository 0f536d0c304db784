# SPDX-License-Identifier: MIT
"""Bind a torch nn.Module to served tensors without a copy.

    import torch, transformers, wcache, wcache.torch
    cfg = transformers.AutoConfig.from_pretrained(DIR)
    with wcache.torch.init_empty(buffers_device="cuda"):  # parameters on meta, buffers real
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    conn = wcache.connect(device="0")
    served = conn.attach(model_dir=DIR)
    wcache.torch.load_into(model, served)           # every parameter is served memory

load_into replaces each parameter and persistent buffer by the served
tensor of the same name (or name_map[name]): no copy, the module's tensors
then share the daemon's pages (and keep the lease while they live). Tied
parameters (one Parameter under two names, e.g. lm_head.weight and
model.embed_tokens.weight with tie_word_embeddings) are bound once, from
whichever of their names is served.

conn.attach(model_dir=DIR, wait=False) before the construction returns a
wcache.PendingModel at once (the attach runs on a thread, mostly in
libwcache without the GIL): load_into takes it and waits, so the attach
hides behind the construction.

init_empty (wcache/_empty.py) builds the module with no weight memory and
no weight initialisation (skip_init=True, the default), keeping the
buffers that constructors compute (rotary inv_freq) real.

empty_model(build, key) / empty_pretrained(DIR) (wcache/_modcache.py)
keep that empty module in a file of this user's cache directory: a restart
unpickles it (a few milliseconds) instead of running the constructors
again (tens of milliseconds for a transformers model):

    model = wcache.torch.empty_pretrained(DIR, dtype=torch.bfloat16, buffers_device="cuda")

follow(module, conn) (wcache/_follow.py) keeps a bound module on the
daemon's newest version: its poll(), between steps, re-binds the module
to a version a trainer's update_from (or a disk update) published.
"""
import collections

import torch

from ._core import Model, PendingModel
from ._empty import PARTS, Empty, init_empty, no_gc  # noqa: F401 (the API)
from ._modcache import empty_model, empty_pretrained  # noqa: F401 (the API)
from ._modcache import default_dir as module_cache_dir  # noqa: F401
from ._follow import Follower, FollowError, follow  # noqa: F401 (the API)

Bound = collections.namedtuple("Bound", "bound missing unexpected tied")
Bound.__doc__ = """What load_into did: bound (module names bound), missing
(module names with no served tensor), unexpected (served names no module
name used, other than views and aliases of bound memory), tied (module name
-> the name it was tied to and bound through)."""


class LoadError(RuntimeError):
    """load_into(strict=True) found missing or unexpected names, or a
    served tensor whose shape, dtype or device does not fit."""


def _slots(module):
    """Every (owner module, attribute, tensor, is_param, full name) that
    state_dict covers: parameters (tied ones under each name) and
    persistent buffers, in named_modules(remove_duplicate=False) order,
    each (owner, attribute) once (its first name). One walk of _modules
    with a stack (named_modules' nested generators cost more than the
    rest together); a module met again is skipped with its subtree, whose
    slots were all taken the first time."""
    out = []
    put = out.append
    seen = set()
    stack = [("", module)]
    pop, push = stack.pop, stack.extend
    empty = frozenset()
    while stack:
        pre, mod = pop()
        if id(mod) in seen:
            continue
        seen.add(id(mod))
        for name, p in mod._parameters.items():
            if p is not None:
                put((mod, name, p, True, pre + name))
        bufs = mod._buffers
        if bufs:
            skip = getattr(mod, "_non_persistent_buffers_set", empty)
            for name, b in bufs.items():
                if b is not None and name not in skip:
                    put((mod, name, b, False, pre + name))
        kids = mod._modules
        if kids:
            push([(pre + k + ".", m) for k, m in reversed(kids.items()) if m is not None])
    return out


def _covered(unused, used_ranges):
    """Names of unused whose bytes lie inside the bound tensors' bytes
    (fused views, aliases of bound memory): not unexpected."""
    iv = sorted(used_ranges)
    merged = []
    for a, b in iv:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    import bisect
    starts = [m[0] for m in merged]
    out = set()
    for name, (a, b) in unused.items():
        i = bisect.bisect_right(starts, a) - 1
        if i >= 0 and merged[i][0] <= a and b <= merged[i][1]:
            out.add(name)
    return out


def _kept_in_fp32(module, name):
    """True for a name transformers keeps in float32 whatever the model's
    dtype (its _keep_in_fp32_modules_strict / _keep_in_fp32_modules, such
    as DeepSeek-V3's e_score_correction_bias): from_pretrained gives it
    float32, so a float32 served tensor is bound as it is (no copy), where
    from_config under a bfloat16 dtype made it bfloat16."""
    keep = list(getattr(module, "_keep_in_fp32_modules_strict", None) or []) + \
        list(getattr(module, "_keep_in_fp32_modules", None) or [])
    parts = name.split(".")
    return any(k in parts or ("." in k and k in name) for k in keep)


def _conversions(module, model, served, groups, name_map):
    """{module name: served name} for the module names that are not
    served as they are but that transformers' own checkpoint conversions
    produce (wcache/_hfconv.py: renamed, or MoE experts stacked into one
    tensor that a served view is, byte for byte); {} for a module that is
    no transformers model or whose names are all served. A conversion no
    served tensor satisfies is a LoadError naming it."""
    # a group with a name served (as it is or through name_map) binds
    # through it (tied lm_head.weight beside a served embed_tokens):
    # nothing to convert
    want = [s[4] for g in groups.values()
            if not any(name_map.get(s[4], s[4]) in served for s in g)
            for s in g if s[4] not in name_map]
    if not want or getattr(module, "config", None) is None:
        return {}
    from . import _hfconv
    # the same module class over the same served version resolves the
    # same (a re-attach after an update, a second engine in the process)
    r = _hfconv.rules(module)
    if r is None:
        return {}
    key = (_hfconv.rules_key(r), getattr(model, "identity", None), getattr(model, "version", None),
           frozenset(want)) if hasattr(model, "identity") else None
    hit = _resolved.get(key) if key else None
    if hit is not None:
        return hit
    try:
        out = _hfconv.resolve(module, want, _hfconv.places(model, served), r)
    except _hfconv.ConversionError as e:
        raise LoadError("wcache.torch.load_into: %s. Bind it with name_map= to a tensor that is "
                        "this layout, or serve one (a view or stack in the layout)" % e) from None
    if key:
        if len(_resolved) >= 16:
            _resolved.clear()
        _resolved[key] = out
    return out


_resolved = {}   # _conversions' results, at most 16


def _asked(groups, model, lookup):
    """The served name each group of slots binds: its first name (through
    lookup, name_map's) that model serves."""
    out = []
    for group in groups:
        for s in group:
            want = lookup(s[4], s[4]) if lookup else s[4]
            if want in model:
                out.append(want)
                break
    return out


def load_into(module, model, strict=True, name_map=None, requires_grad=False):
    """Points module's parameters and persistent buffers at the served
    tensors of model (a wcache.Model, a wcache.PendingModel: waited for,
    its error raised, or any mapping name -> torch.Tensor) without
    copying; returns Bound(bound, missing, unexpected, tied).

    name_map: {module name: served name} for engines whose names differ.
    strict: raise LoadError when a module name has no served tensor or a
    served tensor is left over (served names whose bytes lie inside bound
    tensors, like fused views or aliases, are not left over). Shape and
    dtype must match exactly in any case (converting would copy). A
    LoadError binds nothing: the module is left as it was.
    Parameters become nn.Parameter(requires_grad=requires_grad) over the
    served memory (read-only: leave requires_grad False to train adapters,
    never the served weights), with the attributes of the Parameter they
    replace (an engine's weight_loader, output_dim)."""
    return _load_into(module, model, strict, name_map, requires_grad)[0]


def _load_into(module, model, strict, name_map, requires_grad):
    """load_into's work: (Bound, plan), plan one (slots, served name,
    Parameter, tensor) per group of slots bound (slots: (owner,
    attribute, is_param) of each tied name; the Parameter now in its
    parameter slots, None for a buffer group; the served tensor, now in
    its buffer slots), for a re-bind to a version of the same layout
    (wcache.torch.follow: _rebind)."""
    if isinstance(model, PendingModel):
        model = model.result()
    name_map = dict(name_map or {})
    # tied: one tensor object under several names; a group per object, in
    # slot order (most groups are one slot)
    groups = {}
    for s in _slots(module):
        g = groups.get(id(s[2]))
        if g is None:
            groups[id(s[2])] = [s]
        else:
            g.append(s)
    lazy = isinstance(model, Model)
    if not lazy:
        served = model.tensors("torch") if hasattr(model, "tensors") else dict(model)
    # names transformers converts (renamed, fused experts): to served views
    conv = _conversions(module, model, model if lazy else served, groups, name_map)
    if conv:
        name_map.update(conv)
    lookup = name_map.get if name_map else None
    if lazy:    # made: the served names the module binds, no other (_asked)
        served = model.tensors("torch", names=_asked(groups.values(), model, lookup))
    bound, missing, tied, bad, binds = [], [], {}, [], []
    used = set()
    param_of, make_param, plain = torch.nn.Parameter, torch.Tensor._make_subclass, torch.Tensor
    for group in groups.values():
        t = None
        for s in group:
            want = lookup(s[4], s[4]) if lookup else s[4]
            t = served.get(want)
            if t is not None:
                src = s[4]
                break
        if t is None:
            missing.extend(s[4] for s in group)
            continue
        ref = group[0][2]
        if t.shape != ref.shape or (t.dtype != ref.dtype and not (
                t.dtype == torch.float32 and _kept_in_fp32(module, src))):
            bad.append("%s: the module has %s %s, the daemon serves %s as %s %s"
                       % (src, ref.dtype, tuple(ref.shape), want, t.dtype, tuple(t.shape)))
            continue
        used.add(want)
        binds.append((group, t, src, want))
    # served names left over, less those inside bound bytes (one pass,
    # none when every served name was bound)
    unused, ranges = {}, []
    if lazy:    # from the manifest's pointers and lengths, no tensor made
        unexpected = model._left_over(used) if len(used) < len(model) else []
    else:
        if len(used) < len(served):
            for n, t in served.items():
                a = t.data_ptr()
                r = (a, a + t.numel() * t.element_size())
                if n in used:
                    ranges.append(r)
                else:
                    unused[n] = r
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
    # bound only now: a LoadError leaves the module as it was
    plan = []
    for group, t, src, want in binds:
        # one, for every tied name (what nn.Parameter does for a plain
        # tensor, without its Python frame: 291 of them in an engine start)
        param = make_param(param_of, t, requires_grad) if type(t) is plain else \
            param_of(t, requires_grad=requires_grad)
        if group[0][3]:
            attrs = group[0][2].__dict__   # what the engine set on it (weight_loader, output_dim)
            if attrs:
                param.__dict__.update(attrs)
        for s in group:
            if s[3]:
                s[0]._parameters[s[1]] = param
            else:
                s[0]._buffers[s[1]] = t
            bound.append(s[4])
            if s[4] != src:
                tied[s[4]] = src
        plan.append((tuple((s[0], s[1], s[3]) for s in group), want,
                     param if group[0][3] else None, t))
    return Bound(bound, missing, unexpected, tied), plan


def _rebind(plan, model):
    """_load_into's plan bound again to model, a version whose layout is
    the one the plan was made on (the caller checks: Model._same_layout):
    every slot gets a Parameter over model's tensor (with the attributes
    and requires_grad of the one it replaces) or the buffer itself; no
    module walk, no name, shape or dtype check (the layout is the same
    bytes). Returns the new plan, or None, binding nothing, when a slot
    no longer holds what the plan put there (the engine replaced a
    module or a Parameter since): bind with _load_into then."""
    for slots, _, param, t in plan:
        for m, a, isp in slots:
            if (m._parameters if isp else m._buffers).get(a) is not (param if isp else t):
                return None
    served = model.tensors("torch", names=[e[1] for e in plan])
    make_param, param_of = torch.Tensor._make_subclass, torch.nn.Parameter
    out = []
    for slots, want, old, _ in plan:
        t = served[want]
        param = None
        if old is not None:
            param = make_param(param_of, t, old.requires_grad)
            attrs = old.__dict__
            if attrs:
                param.__dict__.update(attrs)
        for m, a, isp in slots:
            if isp:
                m._parameters[a] = param
            else:
                m._buffers[a] = t
        out.append((slots, want, param, t))
    return out


def update_from(conn, module_or_state_dict, name_map=None, allow_layout_change=False,
                timeout_ms=0, partial=False, cast=False, in_place=False, held_wait=2.0,
                keep_spare=False):
    """A trainer's weights as the next version (conn.update_from): the
    module's state_dict() (or a state dict given as it is), each name
    through name_map ({module name: checkpoint name}, as load_into's;
    None skips it: a tied lm_head.weight the checkpoint does not store, a
    buffer that is no checkpoint tensor). Every checkpoint tensor must be
    given once, in its dtype and shape (cast=True: a float tensor of
    another float dtype is cast on its device); in_place, held_wait and
    keep_spare are conn.update_from's; returns a LifeResult."""
    sd = module_or_state_dict
    if isinstance(sd, torch.nn.Module):
        sd = sd.state_dict()
    name_map = dict(name_map or {})

    def items():
        for k, v in sd.items():
            n = name_map.get(k, k)
            if n is not None:
                yield n, v
    return conn.update_from(items(), allow_layout_change=allow_layout_change,
                            timeout_ms=timeout_ms, partial=partial, cast=cast,
                            in_place=in_place, held_wait=held_wait, keep_spare=keep_spare)
