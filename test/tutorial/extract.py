#!/usr/bin/env python3
"""test/tutorial/extract.py README OUTDIR: write the README's tutorial blocks,
exactly as shown, into OUTDIR as NN.ROLE.sql (or NN.python.py), one per
fenced block that follows a line <!-- tutorial: WHO[, fails with SQLSTATE] -->,
and OUTDIR/blocks (one line per block: file, who, expected SQLSTATE or -).
Blocks inside a list item are unindented as Markdown does."""
import os, re, sys

readme, out = sys.argv[1], sys.argv[2]
lines = open(readme, encoding="utf-8").read().split("\n")
marker = re.compile(r"^(\s*)<!-- tutorial: ([a-z_]+)(?:, fails with ([0-9A-Z]{5}))? -->$")
blocks = []
i = 0
while i < len(lines):
    m = marker.match(lines[i])
    if not m:
        i += 1
        continue
    indent, who, sqlstate = m.group(1), m.group(2), m.group(3) or "-"
    j = i + 1
    while j < len(lines) and not lines[j].strip():
        j += 1
    fence = re.match(r"^(\s*)```(sql|python)$", lines[j]) if j < len(lines) else None
    if not fence:
        sys.exit("README.md:%d: a tutorial marker not followed by a ```sql or ```python block" % (i + 1))
    pad = len(fence.group(1))
    body = []
    j += 1
    while not re.match(r"^\s*```$", lines[j]):
        body.append(lines[j][pad:] if lines[j][:pad].strip() == "" else lines[j])
        j += 1
    ext = "py" if fence.group(2) == "python" else "sql"
    name = "%02d.%s.%s" % (len(blocks) + 1, who, ext)
    with open(os.path.join(out, name), "w", encoding="utf-8") as f:
        f.write("\n".join(body) + "\n")
    blocks.append("%s %s %s" % (name, who, sqlstate))
    i = j + 1
if not blocks:
    sys.exit("no tutorial blocks in " + readme)
with open(os.path.join(out, "blocks"), "w") as f:
    f.write("\n".join(blocks) + "\n")
print("%d tutorial blocks" % len(blocks))
