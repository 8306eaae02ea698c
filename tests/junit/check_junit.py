#!/usr/bin/env python3
"""Checks a JUnit file from ckpt-harness: well-formed, the shape CI systems read, counts
that add up. Usage: check_junit.py FILE TESTS FAILURES ERRORS SKIPPED [FAILING-NAME...]
Exit 0 when it holds, 1 with one line per problem otherwise."""
import sys
import xml.etree.ElementTree as ET

path, want = sys.argv[1], [int(x) for x in sys.argv[2:6]]
failing = sys.argv[6:]
problems = []
root = ET.parse(path).getroot()
if root.tag != "testsuites":
    problems.append("root is <%s>, not <testsuites>" % root.tag)
suites = root.findall("testsuite")
if len(suites) != 1:
    problems.append("%d testsuites, want 1" % len(suites))
cases = [c for s in suites for c in s.findall("testcase")]
got = [len(cases),
       sum(1 for c in cases if c.find("failure") is not None),
       sum(1 for c in cases if c.find("error") is not None),
       sum(1 for c in cases if c.find("skipped") is not None)]
if got != want:
    problems.append("tests/failures/errors/skipped %s, want %s" % (got, want))
for elem in [root] + suites:
    attrs = [int(elem.get(k, "-1")) for k in ("tests", "failures", "errors", "skipped")]
    if attrs != got:
        problems.append("<%s> counts %s disagree with its testcases %s" % (elem.tag, attrs, got))
for c in cases:
    if not c.get("name") or not c.get("classname"):
        problems.append("a testcase lacks name or classname")
    for p in c.findall("failure") + c.findall("error"):
        if not p.get("message"):
            problems.append("%s: <%s> without a message" % (c.get("name"), p.tag))
failed_names = {c.get("name") for c in cases if c.find("failure") is not None}
for name in failing:
    if not any(n.startswith(name + " ") for n in failed_names):
        problems.append("%s is not among the failures %s" % (name, sorted(failed_names)))
for p in problems:
    print("%s: %s" % (path, p))
sys.exit(1 if problems else 0)
