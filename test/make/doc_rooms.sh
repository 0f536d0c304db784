#!/usr/bin/env bash
# The docs by room: every README.md of the tree keeps its paragraphs short
# (at most 250 words, code blocks and tables apart) and its links true (a
# relative link names a file or directory that exists, and its #anchor a
# heading there). README.md's length is test/make/tree_limits.sh's.
. "$(dirname "$0")/../lib/lib.sh"
out=$(cd "$WC_TOP" && "${PYTHON:-python3}" - <<'PY'
import os, re, subprocess
files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                        "README.md", "*/README.md"], capture_output=True, text=True).stdout.split()
files = [f for f in files if os.path.isfile(f)] or ["README.md"]

def anchors(path):
    out, fence = set(), False
    for l in open(path):
        if l.startswith("```"):
            fence = not fence
        elif not fence and l.startswith("#"):
            t = l.lstrip("#").strip().lower()
            t = re.sub(r"[^\w\- ]", "", t).replace(" ", "-")
            out.add(t)
    return out

bad = []
for f in files:
    text = open(f).read()
    cur, fence = [], False
    paras = []
    for l in text.split("\n"):
        if l.startswith("```"):
            fence = not fence
            paras.append(cur); cur = []
            continue
        if fence:
            continue
        if not l.strip() or l.startswith("#") or l.startswith("|"):
            paras.append(cur); cur = []
            continue
        if re.match(r"\s*(- |\d+\. )", l):
            paras.append(cur); cur = []
        cur.append(l)
    paras.append(cur)
    for p in paras:
        w = len(" ".join(p).split())
        if w > 250:
            bad.append("%s: a paragraph of %d words (at most 250): %s" % (f, w, p[0][:60]))
    for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"```.*?```", "", text, flags=re.S)):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
        if not os.path.exists(dest):
            bad.append("%s: link to %s: no such file" % (f, target))
            continue
        if os.path.isdir(dest):
            dest = os.path.join(dest, "README.md")
        if anchor and (not os.path.isfile(dest) or anchor not in anchors(dest)):
            bad.append("%s: link to %s: no heading #%s in %s" % (f, target, anchor, dest))
print("\n".join(bad) if bad else "ok %d files" % len(files))
PY
) || fail "the check itself failed: $out"
[[ $out == ok* ]] || fail "$out"
echo "README.md files: $out"
