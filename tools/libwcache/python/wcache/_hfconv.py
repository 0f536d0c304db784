# SPDX-License-Identifier: MIT
"""transformers' checkpoint conversions, bound without a copy.

transformers 5 does not always bind the checkpoint's names: while loading
it renames some (Mixtral's block_sparse_moe. -> mlp.) and converts others
(an MoE's per-expert w1/w3 or gate_proj/up_proj stacked into one 3-D
experts.gate_up_proj, [E, 2I, H], and w2/down_proj into experts.down_proj).
Its rules are data: transformers.conversion_mapping's WeightRenaming and
WeightConverter lists, the converter's operations (MergeModulelist,
Concatenate) naming how the pieces are put together.

resolve() reads those rules from the transformers in this process (never a
copy of them kept here, so a transformers that changes them is followed or
refused, not bound wrongly), applies them to the served checkpoint names
with transformers' own rename_source_key, and for each module name that
is the target of a conversion computes where every piece must lie for the
target to be one served tensor: piece k right after piece k-1, in the
order the operations give. It then looks for a served entry (the daemon's
fused views: experts.w13_weight = per expert [gate; up] is exactly
gate_up_proj) that starts where the first piece lies, has the target's
dtype and covers exactly those bytes, and checks each piece's place in
the pool. Found: the module name is bound to it (no copy). Not found, or
an operation other than stacking and concatenation (a transpose, a
permutation, a split): a ConversionError naming the module name and why,
which load_into raises as its LoadError. A shape that differs (a
transposed layout) fails load_into's own shape check. Costs: one
rename_source_key per served checkpoint name (regular expressions,
~10 us each) and only when a module name is not served as it is."""
import collections

Place = collections.namedtuple("Place", "pool offset nbytes dtype shape")


class ConversionError(Exception):
    """A transformers conversion that no served tensor satisfies."""


def rules(module):
    """(renamings, converters, rename_source_key, natural_key) of a
    transformers model, or None (no transformers, or one without
    conversion rules: transformers 4 binds checkpoint names)."""
    cfg = getattr(module, "config", None)
    if cfg is None or not getattr(cfg, "model_type", None):
        return None
    try:
        from transformers import conversion_mapping as cm
        from transformers import core_model_loading as cl
    except ImportError:
        return None
    get = getattr(cm, "get_model_conversion_mapping", None)
    rename = getattr(cl, "rename_source_key", None)
    if get is None or rename is None:
        return None
    mapping = get(module) or []
    conv = [t for t in mapping if isinstance(t, cl.WeightConverter)]
    ren = [t for t in mapping if isinstance(t, cl.WeightRenaming) and t not in conv]
    natural = getattr(cl, "dot_natural_key", None) or (lambda s: s)
    return ren, conv, rename, natural


def _op(o):
    """An operation as (kind, dim), kind None for one not servable."""
    kind = type(o).__name__
    if kind in ("MergeModulelist", "Concatenate") and \
            getattr(o, "num_shards_attribute", None) is None:
        return kind, getattr(o, "dim", None)
    return None, repr(o)


def _order(conv, sources, target):
    """The served names of a converted target in the order of its bytes,
    or raises ConversionError. sources: {source pattern: [names in
    transformers' order]}; the supported operations are
    [MergeModulelist(0)] (a stack of one pattern's pieces),
    [MergeModulelist(0), Concatenate(1)] (per piece index, the patterns'
    pieces back to back: MoE gate_up) and [Concatenate(0)] (patterns back
    to back: a fused qkv)."""
    ops = [_op(o) for o in getattr(conv, "operations", [])]
    bad = [d for k, d in ops if k is None]
    if bad:
        raise ConversionError("%s: transformers builds it with %s, which is no view of the "
                              "checkpoint's bytes" % (target, ", ".join(bad)))
    pats = [p for p in conv.source_patterns if p in sources]
    if len(pats) != len(conv.source_patterns):
        lack = [p for p in conv.source_patterns if p not in sources]
        raise ConversionError("%s: no served tensor matches transformers' source pattern(s) %s"
                              % (target, ", ".join(lack)))
    kinds = [(k, d) for k, d in ops]
    if kinds == [("MergeModulelist", 0)] and len(pats) == 1:
        return sources[pats[0]]
    if kinds == [("MergeModulelist", 0), ("Concatenate", 1)]:
        n = len(sources[pats[0]])
        if any(len(sources[p]) != n for p in pats):
            raise ConversionError("%s: transformers stacks %s pieces of unequal counts (%s)"
                                  % (target, "/".join(pats),
                                     ", ".join(str(len(sources[p])) for p in pats)))
        return [sources[p][i] for i in range(n) for p in pats]
    if kinds == [("Concatenate", 0)]:
        return [x for p in pats for x in sources[p]]
    raise ConversionError("%s: transformers builds it with %s, which wcache does not bind "
                          "(stacking on dim 0 and concatenation are)"
                          % (target, ", ".join("%s(dim=%s)" % kd for kd in kinds)))


def _find(target, names, place, by_start):
    """The served name whose bytes are exactly names' pieces back to back
    (checked piece by piece), or raises ConversionError."""
    first = place[names[0]]
    at, total = first.offset, 0
    for n in names:
        p = place[n]
        if p.pool != first.pool or p.offset != at or p.dtype != first.dtype:
            raise ConversionError(
                "%s: transformers puts %s right after %s, but the daemon serves it elsewhere "
                "(pool %s offset %d, not pool %s offset %d): no served tensor is this layout"
                % (target, n, names[names.index(n) - 1] if names.index(n) else "the start",
                   p.pool, p.offset, first.pool, at))
        at += p.nbytes
        total += p.nbytes
    for cand in by_start.get((first.pool, first.offset), ()):
        c = place[cand]
        if c.nbytes == total and c.dtype == first.dtype and cand not in names:
            return cand
    raise ConversionError("%s: the pieces %s ... %s lie back to back but the daemon serves no "
                          "tensor over them (its layout has no view or stack for it)"
                          % (target, names[0], names[-1]))


def rules_key(r):
    """What the rules r say, hashable (for a cache of resolve's results)."""
    if r is None:
        return None
    return tuple((type(t).__name__, tuple(t.source_patterns), tuple(t.target_patterns),
                  tuple(repr(o) for o in getattr(t, "operations", ())),
                  getattr(t, "scope_prefix", None))
                 for t in r[0] + r[1])


def resolve(module, want, place, r):
    """{module name: served name} for the names of want (module names no
    served tensor has) that transformers' conversions r (rules(module))
    produce, checked as above; raises ConversionError for one it produces
    but that cannot be bound without a copy. place: {served name: Place}."""
    if r is None or not want:
        return {}
    ren, conv, rename, natural = r
    want = set(want)
    by_pat = {p: c for c in conv for p in c.source_patterns}
    meta = dict.fromkeys(want)
    renamed, groups = {}, {}
    for name in sorted(place, key=natural):
        try:
            new, pat = rename(name, ren, conv, getattr(module, "base_model_prefix", None), meta)
        except Exception:   # a rule transformers itself would fail on
            continue
        if new not in want:
            continue
        if pat is None:
            if new != name:
                renamed.setdefault(new, name)
        else:
            groups.setdefault(new, {}).setdefault(pat, []).append(name)
    by_start = {}
    for n, p in place.items():
        by_start.setdefault((p.pool, p.offset), []).append(n)
    out = dict(renamed)
    for target, sources in groups.items():
        c = by_pat[next(iter(sources))]
        names = _order(c, sources, target)
        out[target] = _find(target, names, place, by_start)
    return out


def places(model, served):
    """{served name: Place}: from a wcache.Model's manifest (no tensor
    made), or from the tensors of a plain mapping (data pointers)."""
    info = getattr(model, "manifest", None) if hasattr(model, "tensors") else None
    if info is not None:
        if callable(info):
            info = info()
        return {t.name: Place(t.pool, t.offset, t.nbytes, t.dtype, tuple(t.shape))
                for t in info}
    return {n: Place(0, t.data_ptr(), t.numel() * t.element_size(), str(t.dtype), tuple(t.shape))
            for n, t in served.items()}
