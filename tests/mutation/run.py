#!/usr/bin/env python3
"""make mutation: plant each bug of tests/mutation/catalogue.txt, one at a time, in a
scratch copy of the tree (build/mutation/tree), build it, run the tests, record the result
and restore the file. Prints the score and the survivors; see CONTRIBUTING.md, "Mutation testing".

  python3 tests/mutation/run.py [--mutants id1,id2] [--timeout S] [--full] [--list] [--check]

--check only verifies that every mutant's search text occurs exactly once (no build).
--full runs the whole of make check for every mutant, even when its hinted suite failed.
Exit status: 0 when every non-equivalent mutant was killed and none is stale or broken.
"""
import argparse
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CATALOGUE = os.path.join(ROOT, "tests", "mutation", "catalogue.txt")
WORK = os.path.join(ROOT, "build", "mutation")
TREE = os.path.join(WORK, "tree")
# build outputs copied into the scratch tree so that only the mutated file recompiles
BUILD_COPY = ["obj", "pic", "gen", "libckpt.a", "ckpt-harness", "check_runner",
              "ckpt-harness-cuda.so", "test_gpu"]
KEYS = ("file", "area", "suite", "what", "equivalent")


class CatalogueError(Exception):
    pass


def parse_catalogue(path):
    mutants, cur, section = [], None, None
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for n, line in enumerate(lines, 1):
        if line.startswith("=== "):
            cur = {"id": line[4:].strip(), "line": n, "search": None, "replace": None}
            mutants.append(cur)
            section = None
        elif line in ("--- search", "--- replace"):
            if cur is None:
                raise CatalogueError(f"{path}:{n}: {line} before any === id")
            section = line[4:]
            cur[section] = []
        elif section is not None:
            cur[section].append(line)
        elif line.startswith("#") or not line.strip():
            continue
        elif cur is not None and ":" in line:
            key, val = line.split(":", 1)
            if key not in KEYS:
                raise CatalogueError(f"{path}:{n}: unknown key '{key}' (expected {', '.join(KEYS)})")
            cur[key] = val.strip()
        else:
            raise CatalogueError(f"{path}:{n}: cannot read: {line}")
    seen = set()
    for m in mutants:
        for sec in ("search", "replace"):
            body = m[sec]
            # a text runs to the next marker; blank lines and comments between blocks are not part of it
            while body is not None and body and (not body[-1].strip() or body[-1].startswith("# ")):
                body.pop()
            m[sec] = None if body is None else "\n".join(body) + "\n"
        for key in ("file", "area", "what"):
            if not m.get(key):
                raise CatalogueError(f"{path}:{m['line']}: mutant {m['id']} has no {key}")
        if m["search"] is None or m["replace"] is None:
            raise CatalogueError(f"{path}:{m['line']}: mutant {m['id']} needs --- search and --- replace")
        if m["search"] == m["replace"]:
            raise CatalogueError(f"{path}:{m['line']}: mutant {m['id']} changes nothing")
        if m["id"] in seen:
            raise CatalogueError(f"{path}:{m['line']}: duplicate mutant id {m['id']}")
        seen.add(m["id"])
    return mutants


def known_suites(root):
    """The Check suites (suite_create names in tests/test_*.c) and `cli`."""
    import glob
    import re
    names = {"cli"}
    for path in glob.glob(os.path.join(root, "tests", "test_*.c")):
        with open(path, encoding="utf-8", errors="replace") as f:
            names.update(re.findall(r'suite_create\("([a-z0-9_]+)"\)', f.read()))
    return names


def check_suites(mutants, root):
    suites = known_suites(root)
    for m in mutants:
        for s in (x.strip() for x in m.get("suite", "").split(",")):
            if s and s not in suites:
                raise CatalogueError(f"{CATALOGUE}:{m['line']}: mutant {m['id']}: unknown suite "
                                     f"'{s}' (known: {', '.join(sorted(suites))})")


def staleness(m, root):
    """None when the mutant applies, else why it does not."""
    path = os.path.join(root, m["file"])
    if not os.path.isfile(path):
        return f"{m['file']} does not exist"
    with open(path, encoding="utf-8") as f:
        count = f.read().count(m["search"])
    if count == 0:
        return f"search text not found in {m['file']}"
    if count > 1:
        return f"search text occurs {count} times in {m['file']}"
    return None


def sh(cmd, cwd, timeout, log):
    """Runs cmd; returns 'ok', 'fail' or 'timeout'. Output appended to log."""
    with open(log, "a") as out:
        out.write(f"$ {cmd}\n")
        out.flush()
        p = subprocess.Popen(cmd, shell=True, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            p.wait()
            out.write(f"\n(timed out after {timeout} s)\n")
            return "timeout"
    return "ok" if rc == 0 else "fail"


def prepare_tree(jobs):
    """A scratch copy of the working tree (tracked and untracked, not ignored files) with
    the main build's outputs, so a mutant rebuilds only what it touches."""
    subprocess.run(["make", f"-j{jobs}", "--no-print-directory", "all", "build/check_runner"],
                   cwd=ROOT, check=True)
    shutil.rmtree(TREE, ignore_errors=True)
    os.makedirs(TREE)
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, check=True, capture_output=True).stdout.split(b"\0")
    for rel in (f.decode() for f in files if f):
        src = os.path.join(ROOT, rel)
        if not os.path.isfile(src) or rel.startswith("build/"):
            continue
        dst = os.path.join(TREE, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(src, dst)
    os.makedirs(os.path.join(TREE, "build"))
    for name in os.listdir(os.path.join(ROOT, "build")):
        if name in BUILD_COPY or name.startswith(".config-"):
            src, dst = os.path.join(ROOT, "build", name), os.path.join(TREE, "build", name)
            if os.path.isdir(src):
                shutil.copytree(src, dst, symlinks=True)
            else:
                shutil.copy2(src, dst)


def run_mutant(m, args, log):
    path = os.path.join(TREE, m["file"])
    with open(path, encoding="utf-8") as f:
        original = f.read()
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(original.replace(m["search"], m["replace"], 1))
        build = sh(f"make -j{args.jobs} --no-print-directory all build/check_runner", TREE,
                   args.timeout, log)
        if build != "ok":
            return "broken", "does not build"
        hints = [s.strip() for s in m.get("suite", "").split(",") if s.strip()]
        if not args.full:
            for s in hints:
                if s == "cli":
                    cmd = ("CK_PROG=build/ckpt-harness sh tests/cli/run.sh && "
                           "CK_PROG=build/ckpt-harness sh tests/cli/compare.sh")
                else:
                    cmd = f"CK_RUN_SUITE={s} CK_ROOT=. build/check_runner"
                r = sh(cmd, TREE, args.timeout, log)
                if r != "ok":
                    return "killed", f"by {s}" + (" (timeout)" if r == "timeout" else "")
        r = sh(f"make -j{args.jobs} --no-print-directory check-run", TREE, args.timeout, log)
        if r == "ok":
            return "survived", ""
        return "killed", "by make check" + (" (timeout)" if r == "timeout" else "")
    finally:
        # restored with a new mtime, so the next build recompiles the file
        with open(path, "w", encoding="utf-8") as f:
            f.write(original)


def main():
    try:
        return run_main()
    except BrokenPipeError:
        return 1


def run_main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mutants", default=os.environ.get("MUTANTS", ""),
                    help="comma-separated ids (default: all)")
    ap.add_argument("--timeout", type=int, default=int(os.environ.get("MUTATION_TIMEOUT", "1200")),
                    help="seconds per build or test command of one mutant (default 1200)")
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("MUTATION_JOBS", "2")))
    ap.add_argument("--full", action="store_true", default=os.environ.get("MUTATION_FULL") == "1")
    ap.add_argument("--list", action="store_true", help="list the catalogue and exit")
    ap.add_argument("--check", action="store_true", help="only check that every mutant applies")
    args = ap.parse_args()
    try:
        mutants = parse_catalogue(CATALOGUE)
        check_suites(mutants, ROOT)
    except CatalogueError as e:
        print(f"mutation: {e}", file=sys.stderr)
        return 2
    if args.mutants:
        want = [w.strip() for w in args.mutants.split(",") if w.strip()]
        known = {m["id"] for m in mutants}
        unknown = [w for w in want if w not in known]
        if unknown:
            print(f"mutation: unknown mutant id(s): {', '.join(unknown)}", file=sys.stderr)
            return 2
        mutants = [m for m in mutants if m["id"] in want]
    if args.list:
        for m in mutants:
            eq = f" [equivalent: {m['equivalent']}]" if m.get("equivalent") else ""
            print(f"{m['id']:36} {m['area']:11} {m['file']}: {m['what']}{eq}")
        return 0

    stale = [(m, staleness(m, ROOT)) for m in mutants]
    stale = [(m, why) for m, why in stale if why]
    if args.check:
        for m, why in stale:
            print(f"stale     {m['id']}: {why}")
        print(f"mutation: {len(mutants) - len(stale)} of {len(mutants)} mutants apply")
        return 1 if stale else 0

    os.makedirs(WORK, exist_ok=True)
    prepare_tree(args.jobs)
    results = []
    stale_why = {m["id"]: why for m, why in stale}
    t_all = time.time()
    for k, m in enumerate(mutants, 1):
        log = os.path.join(WORK, f"{m['id']}.log")
        if os.path.exists(log):
            os.remove(log)
        t0 = time.time()
        if m["id"] in stale_why:
            status, how = "stale", stale_why[m["id"]]
        else:
            status, how = run_mutant(m, args, log)
        dt = time.time() - t0
        results.append((m, status, how, dt))
        print(f"[{k}/{len(mutants)}] {status:9} {m['id']:36} {how} ({dt:.0f} s)", flush=True)

    with open(os.path.join(WORK, "results.tsv"), "w") as f:
        f.write("id\tstatus\thow\tseconds\tequivalent\tfile\n")
        for m, status, how, dt in results:
            f.write(f"{m['id']}\t{status}\t{how}\t{dt:.0f}\t{m.get('equivalent', '')}\t{m['file']}\n")

    counted = [r for r in results if not r[0].get("equivalent") and r[1] in ("killed", "survived")]
    killed = [r for r in counted if r[1] == "killed"]
    survivors = [r for r in counted if r[1] == "survived"]
    equivalent = [r for r in results if r[0].get("equivalent")]
    bad = [r for r in results if r[1] in ("stale", "broken")]
    print()
    subset = "" if not args.mutants else f" (subset of {len(results)} mutants)"
    if counted:
        print(f"mutation score: {len(killed)}/{len(counted)} non-equivalent mutants killed "
              f"({100.0 * len(killed) / len(counted):.1f} %){subset} in {time.time() - t_all:.0f} s")
    for m, status, how, _ in survivors:
        print(f"SURVIVED  {m['id']} ({m['file']}): {m['what']}")
    for m, status, how, _ in equivalent:
        print(f"equivalent {m['id']} ({status}): {m['equivalent']}")
        if status == "killed":
            print(f"  ... but it was killed: it is not equivalent, fix the catalogue")
    for m, status, how, _ in bad:
        print(f"{status.upper():9} {m['id']}: {how} (catalogue line {m['line']})")
    print(f"logs: {WORK}/<id>.log, results: {WORK}/results.tsv")
    broken_equiv = [r for r in equivalent if r[1] == "killed"]
    return 0 if not survivors and not bad and not broken_equiv else 1


if __name__ == "__main__":
    sys.exit(main())
