#!/usr/bin/env python3
"""Summarises the precision judgement over a directory of run reports (JSON, schema 2):
per dtype, the cases judged, the false alarms (a case whose expect_precision is "close"
but whose judgement against fp32 failed), and, over the healthy cases, the ratio
error / spread of every calibrated row whose spread is above the dtype floor, as median,
99th percentile and maximum; then the canaries' verdicts. Usage: python3 tests/corpus/summarize.py REPORT_DIR"""
import glob
import json
import os
import sys


def pct(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))]


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__ + "\n")
        return 2
    by = {}
    for f in sorted(glob.glob(os.path.join(argv[1], "*.json"))):
        with open(f) as fh:
            r = json.load(fh)
        vs = (r.get("precision") or {}).get("vs_fp32")
        if not vs:
            continue
        dt = r["precision"]["dtype"]
        d = by.setdefault(dt, {"cases": 0, "alarms": [], "ratios": [], "worst": (0, "")})
        d["cases"] += 1
        if vs["expect"] == "close" and vs["verdict"] == "mismatch":
            d["alarms"].append(r["case"]["name"])
        if vs["expect"] != "close":
            # a canary: its rows are no sample of healthy models
            d.setdefault("canaries", []).append("%s %s" % (r["case"]["name"], vs["verdict"]))
            continue
        u = vs["rule"]["unit_roundoff"]
        for t in vs["tensors"]:
            if t.get("bound_source") != "calibrated" or t.get("spread") is None:
                continue
            if t["spread"] <= u or t["error"] is None:
                continue
            ratio = t["error"] / t["spread"]
            d["ratios"].append(ratio)
            if ratio > d["worst"][0]:
                d["worst"] = (ratio, "%s %s %s step %d" % (r["case"]["name"], t["kind"], t["name"], t["step"]))
    for dt, d in sorted(by.items()):
        print("%s: %d cases, %d false alarms%s; error/spread over %d calibrated rows: median %.2f, "
              "p99 %.2f, max %.2f (%s)" % (dt, d["cases"], len(d["alarms"]),
                                           (" (" + ", ".join(d["alarms"]) + ")") if d["alarms"] else "",
                                           len(d["ratios"]), pct(d["ratios"], 0.5), pct(d["ratios"], 0.99),
                                           max(d["ratios"] or [float("nan")]), d["worst"][1]))
        if d.get("canaries"):
            print("%s canaries (expect_precision mismatch): %s" % (dt, ", ".join(d["canaries"])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
