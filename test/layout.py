#!/usr/bin/env python3
"""test/layout.py [SRC]: the shape of src/ that src/README.md describes.

src/esrc.c (_PG_init) and one folder per subsystem.  The face of folder X
is X/X.h: the one header other folders may include, by its path
("log/log.h").  A folder's own private headers are included by their bare
name ("logint.h") and only from that folder.  Checks, each printed with
ok or FAIL:
  - every C file but esrc.c is in a folder, and every folder has its face;
  - no file includes another folder's private header, nor a header of its
    own folder by path unless it is the face;
  - esrc.c defines no function other files call (only _PG_init is
    exported, and no header declares anything of it);
  - the folders' include graph has no cycle (it is printed, bottom up);
  - no C file over MAX_FILE_LINES lines, no function over
    MAX_FUNCTION_LINES lines (a function: from a line "{" to a line "}").
Exits 1 if any check failed."""
import os
import re
import sys

MAX_FILE_LINES = 1200
MAX_FUNCTION_LINES = 120

src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'src')
src = os.path.normpath(src)
failures = 0


def check(ok, what):
    global failures
    print(('ok   ' if ok else 'FAIL ') + what)
    if not ok:
        failures += 1


folders = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)) and d != 'sql')
files = {}  # path relative to src -> text
for dirpath, _, names in os.walk(src):
    if os.path.relpath(dirpath, src).split(os.sep)[0] == 'sql':
        continue
    for n in names:
        if n.endswith(('.c', '.h')):
            rel = os.path.relpath(os.path.join(dirpath, n), src)
            with open(os.path.join(dirpath, n)) as f:
                files[rel] = f.read()

top = sorted(f for f in files if os.sep not in f)
check(top == ['esrc.c'], 'src/ holds esrc.c and folders only (top level: %s)' % ', '.join(top))
for d in folders:
    check(os.path.join(d, d + '.h') in files, 'folder %s has its face %s/%s.h' % (d, d, d))

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
graph = {d: set() for d in folders}
bad = []
for rel, text in sorted(files.items()):
    here = rel.split(os.sep)[0] if os.sep in rel else None
    for inc in INCLUDE.findall(text):
        if '/' in inc:
            d, name = inc.split('/', 1)
            if d not in folders:
                continue
            if name != d + '.h':
                bad.append('%s includes %s, a header of %s that is not its face' % (rel, inc, d))
            elif here is not None and d != here:
                graph[here].add(d)
        elif here is not None and os.path.join(here, inc) in files:
            continue
        elif any(f.endswith(os.sep + inc) for f in files):
            bad.append('%s includes %s by its bare name from another folder' % (rel, inc))
for b in bad:
    print('     ' + b)
check(not bad, 'no file includes another folder\'s private header (%d includes read)'
      % sum(len(INCLUDE.findall(t)) for t in files.values()))

esrc = re.sub(r'/\*.*?\*/', '', files.get('esrc.c', ''), flags=re.S)
defined = re.findall(r'^(?!static)\w[\w \*]*\n(\w+)\(', esrc, re.M)
check(defined == ['_PG_init'], 'esrc.c exports only _PG_init (found: %s)' % ', '.join(defined))
mentioned = [f for f, t in files.items() if f != 'esrc.c' and re.search(r'\besrc\.c\b|\besrc\.h\b', re.sub(r'/\*.*?\*/', '', t, flags=re.S))]
check(not mentioned, 'no file includes or calls into esrc.c%s' % (' (' + ', '.join(mentioned) + ')' if mentioned else ''))

# the folders bottom up (Kahn); what is left over lies on a cycle
order, left = [], {d: set(e) for d, e in graph.items()}
while True:
    ready = sorted(d for d, e in left.items() if not e)
    if not ready:
        break
    order.append(ready)
    for d in ready:
        del left[d]
    for e in left.values():
        e.difference_update(ready)
for level, ds in enumerate(order):
    print('     level %d: %s' % (level, ', '.join('%s -> %s' % (d, ', '.join(sorted(graph[d])) or '-') for d in ds)))
check(not left, 'the folders\' include graph has no cycle%s' % (' (on a cycle: ' + ', '.join(sorted(left)) + ')' if left else ''))

long_files, long_functions = [], []
for rel, text in sorted(files.items()):
    lines = text.split('\n')
    if rel.endswith('.c') and len(lines) - 1 > MAX_FILE_LINES:
        long_files.append('%s: %d lines' % (rel, len(lines) - 1))
    start = None
    for i, line in enumerate(lines):
        if line == '{':
            start = i
        elif line == '}' and start is not None:
            if i - start + 1 > MAX_FUNCTION_LINES:
                name = next((l for l in reversed(lines[:start]) if '(' in l), '?')
                long_functions.append('%s:%d %s: %d lines' % (rel, start, name.split('(')[0].strip(), i - start + 1))
            start = None
for x in long_files + long_functions:
    print('     ' + x)
check(not long_files, 'no C file over %d lines' % MAX_FILE_LINES)
check(not long_functions, 'no function over %d lines' % MAX_FUNCTION_LINES)

sys.exit(1 if failures else 0)
