#!/usr/bin/env python3
"""Check esrc.metrics through examples/postgres_exporter/queries.yaml.

Usage: check.py QUERIES.yaml EXPECTED.json PSQL-ARGS... [--scrape URL]

EXPECTED.json: {"database": NAME, "metrics": {"esrc_appends_total": 31, ...}}
(a figure of one projection or subscription: 'esrc_projection_lag_events{projection="p"}')
(">0": any positive number; ">=N": at least N).  Checks, each printed as
"ok - ..." or "FAIL - ...":
  * the file parses and has postgres_exporter's shape (namespace: query,
    metrics: [{column: {usage: LABEL|COUNTER|GAUGE, description}}]);
  * every query runs (psql) and every column it returns is mapped;
  * the metrics it maps (namespace_column) are exactly the names of
    esrc.metrics, and each value equals the expected one;
  * with --scrape: the exporter's /metrics has each expected metric, with
    the database label, its TYPE (counter/gauge) and the expected value.
Exit status 0 when all checks pass.
"""
import csv
import io
import json
import re
import subprocess
import sys
import urllib.request

import yaml

failures = 0


def check(ok, what, detail=""):
    global failures
    print(("ok - " if ok else "FAIL - ") + what + ("" if ok or not detail else f": {detail}"))
    if not ok:
        failures += 1


def psql(args, sql):
    out = subprocess.run(["psql", *args, "-X", "-v", "ON_ERROR_STOP=1", "--csv", "-c", sql],
                         check=True, capture_output=True, text=True).stdout
    return list(csv.DictReader(io.StringIO(out)))


def matches(got, want):
    if want == ">0":
        return got is not None and got > 0
    if isinstance(want, str) and want.startswith(">="):
        return got is not None and got >= float(want[2:])
    return got is not None and abs(got - float(want)) < 1e-9


def main():
    argv = sys.argv[1:]
    scrape = None
    if "--scrape" in argv:
        i = argv.index("--scrape")
        scrape = argv[i + 1]
        del argv[i:i + 2]
    queries_file, expected_file, *pargs = argv
    expected = json.load(open(expected_file))
    db, want = expected["database"], expected["metrics"]

    doc = yaml.safe_load(open(queries_file))
    shape = isinstance(doc, dict) and all(
        isinstance(q, dict) and isinstance(q.get("query"), str) and isinstance(q.get("metrics"), list)
        and all(isinstance(m, dict) and len(m) == 1 and
                list(m.values())[0].get("usage") in ("LABEL", "COUNTER", "GAUGE") and
                list(m.values())[0].get("description") for m in q["metrics"])
        for q in doc.values())
    check(shape, f"{queries_file} has postgres_exporter's queries.yaml shape")
    if not shape:
        return 1

    got, types = {}, {}
    for ns, q in doc.items():
        cols = {list(m)[0]: list(m.values())[0]["usage"] for m in q["metrics"]}
        try:
            rows = psql(pargs, q["query"])
        except subprocess.CalledProcessError as e:
            check(False, f"query {ns} runs", e.stderr.strip())
            continue
        unmapped = set(rows[0]) - set(cols) if rows else set()
        check(not unmapped, f"query {ns} runs ({len(rows)} rows), every column mapped",
              f"unmapped {sorted(unmapped)}")
        labels = [c for c, u in cols.items() if u == "LABEL"]
        for r in rows:
            if r.get("database") != db:
                continue
            for c, u in cols.items():
                if u != "LABEL":
                    # a figure per projection or subscription: name{label="value"}
                    key = f"{ns}_{c}" + "".join(f'{{{l}="{r[l]}"}}' for l in labels[1:])
                    got[key] = float(r[c]) if r[c] not in ("", None) else None
                    types[key] = u.lower()
        check(labels[:1] == ["database"], f"query {ns} labels its figures with the database")

    view = {r["name"] for r in psql(pargs, "SELECT name FROM esrc.metrics")}
    names = {k.split("{")[0] for k in got}
    check(names == view, "the queries map exactly the metrics of esrc.metrics",
          f"only in the queries {sorted(names - view)}, only in the view {sorted(view - names)}")
    bad = [f"{k}={got.get(k)} want {v}" for k, v in want.items() if not matches(got.get(k), v)]
    check(not bad, f"each query value equals what happened ({len(want)} figures)", "; ".join(bad))
    for k, v in sorted(got.items()):
        print(f"#   {k} = {v:g}" if v is not None else f"#   {k} = null")

    if scrape:
        text = urllib.request.urlopen(scrape, timeout=10).read().decode()
        scraped, stypes = {}, {}
        for line in text.splitlines():
            m = re.match(r"# TYPE (esrc_\w+) (\w+)", line)
            if m:
                stypes[m.group(1)] = m.group(2)
                continue
            m = re.match(r"(esrc_\w+)\{([^}]*)\} (\S+)$", line)
            if m and f'database="{db}"' in m.group(2):
                extra = "".join(f'{{{l}="{v}"}}' for l, v in re.findall(r'(projection|subscription)="([^"]*)"',
                                                                       m.group(2)))
                scraped[m.group(1) + extra] = float(m.group(3))
        bad = [f"{k}={scraped.get(k)} want {v}" for k, v in want.items() if not matches(scraped.get(k), v)]
        check(not bad, f"the exporter's scrape has each figure with its value ({len(want)})", "; ".join(bad))
        badt = [f"{k}: {stypes.get(k.split('{')[0])} want {t}" for k, t in types.items()
                if stypes.get(k.split("{")[0]) != t]
        check(not badt, "the exporter types each figure as the file says (counter/gauge)", "; ".join(badt))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
