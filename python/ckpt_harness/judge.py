"""Running `ckpt-harness judge DIR` and reading what it decided (framework-neutral).

The driver never judges: it writes the judge input (dump.py), runs the C program and turns
its exit code, stdout and report folder into a Result.
"""
import inspect
import json
import os
import shutil
import subprocess
import sys

_PKG = os.path.dirname(os.path.abspath(__file__))


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


def find_harness(explicit=None):
    """The ckpt-harness program: explicit (or $CKPT_HARNESS), build/ckpt-harness of the
    source tree this package sits in, or PATH. UsageError when none is found."""
    if explicit:
        if os.path.isfile(explicit) and os.access(explicit, os.X_OK):
            return os.path.abspath(explicit)
        raise UsageError(f"{explicit}: no such program (--harness)")
    env = os.environ.get("CKPT_HARNESS")
    if env:
        if os.path.isfile(env) and os.access(env, os.X_OK):
            return os.path.abspath(env)
        raise UsageError(f"CKPT_HARNESS={env}: no such program")
    tree = os.path.join(os.path.dirname(os.path.dirname(_PKG)), "build", "ckpt-harness")
    for c in (tree, shutil.which("ckpt-harness")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.abspath(c)
    raise UsageError("ckpt-harness not found: build it (make) or pass --harness PATH "
                     "(or set CKPT_HARNESS)")


def source_file(fn):
    """The absolute path of the file that defines fn (the user's script or module), or None
    (a function typed into a REPL): what the reports name as the model's file."""
    try:
        f = inspect.getsourcefile(fn)
    except TypeError:
        return None
    return os.path.abspath(f) if f and os.path.isfile(f) else None


class Result:
    """What `ckpt-harness judge` decided.

    passed      True when every judged item passed (exit code 0)
    verdict     "pass", "fail" or "error"
    summary     the harness's text summary (its stdout), the pytest helper's message
    report_path the report folder (summary.json and one JSON report per item), or None
    items       summary.json's items (case, dtype, status, message, report: the report's file
                name in report_path), [] without a report folder
    exit_code   the judge's exit code (0 pass, 1 fail, 2 bad input)
    """

    def __init__(self, exit_code, summary, report_path=None, dump_path=None, stderr=""):
        self.exit_code = exit_code
        self.passed = exit_code == 0
        self.verdict = {0: "pass", 1: "fail"}.get(exit_code, "error")
        self.summary = summary + (("\n" + stderr.strip()) if stderr.strip() else "")
        self.report_path = report_path
        self.dump_path = dump_path
        self.items = []
        if report_path and os.path.isfile(os.path.join(report_path, "summary.json")):
            with open(os.path.join(report_path, "summary.json")) as f:
                self.items = json.load(f).get("items", [])

    def reports(self):
        """Every item's JSON report (schema ckpt-harness/report) as a dict."""
        out = []
        for it in self.items:
            rf = it.get("report")
            if rf:
                with open(os.path.join(self.report_path, rf)) as f:
                    out.append(json.load(f))
        return out

    def __bool__(self):
        return self.passed

    def __repr__(self):
        return f"Result(verdict={self.verdict!r}, report_path={self.report_path!r})"


def run_judge(dump_dir, harness=None, report=None, junit=None, html=None, bisect=True,
              min_saving=None, quiet=False, echo=True, extra=(), temporary=False):
    """Runs `ckpt-harness judge dump_dir` and returns its Result. echo: copy the harness's
    output to this process's stdout/stderr as well. temporary: dump_dir is deleted after the
    judge, so its outputs must not name dump_dir/judge.json (--temporary-input)."""
    prog = find_harness(harness)
    cmd = [prog, "judge", dump_dir]
    if report:
        cmd += ["--report", report]
    if junit:
        cmd += ["--junit", junit]
    if html:
        cmd += ["--html", html]
    if not bisect:
        cmd += ["--no-bisect"]
    if min_saving is not None:
        cmd += ["--min-saving", repr(float(min_saving))]
    if quiet:
        cmd += ["--quiet"]
    if temporary:
        cmd += ["--temporary-input"]
    cmd += list(extra)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if echo:
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr)
        sys.stdout.flush()
    return Result(p.returncode, p.stdout, report_path=report, dump_path=dump_dir,
                  stderr=p.stderr)
