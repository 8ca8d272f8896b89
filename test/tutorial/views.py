#!/usr/bin/env python3
"""test/tutorial/views.py README CATALOG: the README's "## Views" section
lists every column of every view of schema esrc, and nothing else.
CATALOG: lines "view|column" (the views of schema esrc and their columns,
from the server).  Prints the differences and exits 1, or exits 0."""
import re, sys

text = open(sys.argv[1], encoding="utf-8").read()
m = re.search(r"^## Views\n(.*?)(?=^## )", text, re.M | re.S)
if not m:
    sys.exit("README.md has no '## Views' section")
documented = {}
view = None
for line in m.group(1).split("\n"):
    h = re.match(r"^### `esrc\.([a-z_]+)`", line)
    if h:
        view = h.group(1)
        documented.setdefault(view, set())
        continue
    if view and line.startswith("| `"):
        first = line.split("|")[1]
        documented[view].update(re.findall(r"`([a-z_]+)`", first))
actual = {}
for line in open(sys.argv[2]):
    if line.strip():
        v, c = line.strip().split("|")
        actual.setdefault(v, set()).add(c)
errors = []
for v in sorted(set(actual) | set(documented)):
    if v not in documented:
        errors.append("view esrc.%s is not in the README's Views section" % v)
    elif v not in actual:
        errors.append("the README documents esrc.%s, which is not a view" % v)
    else:
        for c in sorted(actual[v] - documented[v]):
            errors.append("esrc.%s.%s is not in the README" % (v, c))
        for c in sorted(documented[v] - actual[v]):
            errors.append("the README lists esrc.%s.%s, which the view does not have" % (v, c))
if errors:
    print("\n".join(errors))
    sys.exit(1)
print("%d views, %d columns, all in the README" % (len(actual), sum(len(c) for c in actual.values())))
