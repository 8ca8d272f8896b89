#!/usr/bin/env python3
"""test/package/versions.py [TREE]: the version of esrc and its supported
PostgreSQL majors agree everywhere they are written down.

The version: esrc.control's default_version, META.json (version, and the
version and install script its "provides" name), CHANGELOG.md's top entry
and debian/changelog's top entry (its upstream part).  The majors:
debian/pgversions, and the supported-versions line of the README.  Prints
what disagrees and exits 1, or prints the version and exits 0."""
import json, os, re, sys

tree = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
def read(p):
    with open(os.path.join(tree, p), encoding="utf-8") as f:
        return f.read()

found = {}
m = re.search(r"^default_version\s*=\s*'([^']+)'", read("esrc.control"), re.M)
found["esrc.control default_version"] = m.group(1) if m else None
meta = json.loads(read("META.json"))
found["META.json version"] = meta.get("version")
prov = meta.get("provides", {}).get("esrc", {})
found["META.json provides.esrc.version"] = prov.get("version")
m = re.match(r"esrc--(.+)\.sql$", prov.get("file", ""))
found["META.json provides.esrc.file"] = m.group(1) if m else None
m = re.search(r"^## (\S+) \(", read("CHANGELOG.md"), re.M)
found["CHANGELOG.md top entry"] = m.group(1) if m else None
m = re.match(r"esrc \(([^)-]+)(-[^)]*)?\)", read("debian/changelog"))
found["debian/changelog top entry"] = m.group(1) if m else None

errors = []
want = found["esrc.control default_version"]
for where, v in found.items():
    if v != want:
        errors.append("%s is %r, esrc.control says %r" % (where, v, want))

majors = read("debian/pgversions").split()
readme = read("README.md")
m = re.search(r"<!-- supported majors: ([0-9, ]+) -->", readme)
if not m:
    errors.append("README.md has no '<!-- supported majors: ... -->' line")
elif [x.strip() for x in m.group(1).split(",")] != majors:
    errors.append("README.md supports %s, debian/pgversions %s" % (m.group(1), " ".join(majors)))
if "PostgreSQL %s" % majors[0] not in meta.get("description", "") or \
        not all(x in meta.get("description", "") for x in majors):
    errors.append("META.json's description does not name the majors %s" % " ".join(majors))

if errors:
    print("\n".join(errors))
    sys.exit(1)
print("esrc %s everywhere; PostgreSQL %s" % (want, ", ".join(majors)))
