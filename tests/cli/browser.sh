#!/bin/sh
# The HTML page in a real browser: renders a run's page (a failing canary and two passing
# cases) in headless Chromium, takes a screenshot and checks facts from the DOM the browser
# built: the number of cases, the failing case first and in a failing section, its bisect
# cause with the layer and policy as code elements, every chart drawn with data. Skipped, with a message, where Chromium is not installed (CI installs
# Debian's `chromium`). The page and the screenshot stay in $CK_OUT/browser/ to look at.
# Usage: CK_PROG=build/ckpt-harness CK_OUT=build/test-out sh tests/cli/browser.sh
set -u
PROG=${CK_PROG:-build/ckpt-harness}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${CK_OUT:-build/test-out}/browser
CHROMIUM=
for c in chromium chromium-browser google-chrome; do
    if command -v "$c" >/dev/null 2>&1; then CHROMIUM=$c; break; fi
done
if [ -z "$CHROMIUM" ]; then
    echo "browser tests: skipped: Chromium is not installed (apt-get install chromium)"
    exit 0
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
rm -rf "$OUT"
mkdir -p "$OUT" "$TMP/cases"
OUT=$(cd "$OUT" && pwd)
cp "$ROOT/cases/mlp_dropout.json" "$ROOT/cases/cnn_bn.json" "$TMP/cases/"
sed 's/"expect": "mismatch"/"expect": "identical"/; s/"name": "canary_dropout_stateful"/"name": "canary_fails"/' \
    "$ROOT/cases/canary_dropout_stateful.json" >"$TMP/cases/canary_fails.json"
"$PROG" bisect "$TMP/cases" --dtype fp32 --html "$OUT/page.html" --quiet >"$TMP/out" 2>&1
rc=$?
if [ "$rc" -ne 1 ]; then echo "FAIL: the run exited $rc, want 1"; cat "$TMP/out"; exit 1; fi
# no network, no scripts: the page must stand alone
if grep -io '<script\|src="http[^"]*"\|href="http[^"]*"' "$OUT/page.html" | head -1 | grep -q .; then
    echo "FAIL: the page loads something from elsewhere"; exit 1
fi
FLAGS="--headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run --user-data-dir=$TMP/profile"
timeout 120 "$CHROMIUM" $FLAGS --window-size=1100,1600 --screenshot="$OUT/page.png" "file://$OUT/page.html" \
    >"$TMP/shot.log" 2>&1
if [ ! -s "$OUT/page.png" ]; then echo "FAIL: no screenshot"; tail -5 "$TMP/shot.log"; exit 1; fi
timeout 120 "$CHROMIUM" $FLAGS --dump-dom "file://$OUT/page.html" >"$OUT/dom.html" 2>"$TMP/dom.log"
python3 - "$OUT/dom.html" <<'PYEOF'
import sys
from html.parser import HTMLParser

class Dom(HTMLParser):
    def __init__(self):
        super().__init__()
        self.sections = []      # (status, name)
        self.charts = []        # [data-points, drawn marks]
        self.in_name = False
        self.in_cause = False
        self.cause_code = []    # the <code> texts inside the first cause item
        self.in_code = False
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section" and "case" in a.get("class", "").split():
            self.sections.append([a.get("data-status"), ""])
        if tag == "span" and a.get("class") == "case-name":
            self.in_name = True
        if tag == "svg" and "ck-chart" in a.get("class", ""):
            self.charts.append([int(a.get("data-points", "0")), 0])
        if tag in ("path", "circle") and self.charts:
            self.charts[-1][1] += 1
        if tag == "code" and self.in_cause:
            self.in_code = True
            self.cause_code.append("")
    def handle_endtag(self, tag):
        if tag == "span":
            self.in_name = False
        if tag == "code":
            self.in_code = False
        if tag == "li" and self.in_cause:
            self.in_cause = None  # only the first cause
    def handle_data(self, data):
        if self.in_name and self.sections:
            self.sections[-1][1] += data
        if data == "cause:" and self.in_cause is False:
            self.in_cause = True
        if self.in_code and self.in_cause:
            self.cause_code[-1] += data

d = Dom()
d.feed(open(sys.argv[1], encoding="utf-8").read())
problems = []
if len(d.sections) != 3:
    problems.append("%d case sections, want 3" % len(d.sections))
if d.sections[:1] != [["fail", "canary_fails"]]:
    problems.append("the failing canary_fails is not the first section: %s" % d.sections)
if d.cause_code[:2] != ["drop1", "stateful"]:
    problems.append("the first cause's code spans are %s, want drop1, stateful" % d.cause_code)
if len(d.charts) != 9:
    problems.append("%d charts, want 3 per case" % len(d.charts))
for i, (points, marks) in enumerate(d.charts):
    if points <= 0 or marks == 0:
        problems.append("chart %d has no data (%d points, %d marks)" % (i, points, marks))
for p in problems:
    print("FAIL: browser DOM: " + p)
print("browser tests: %s (%d sections, %d charts); screenshot %s" %
      ("failed" if problems else "passed", len(d.sections), len(d.charts),
       sys.argv[1].replace("dom.html", "page.png")))
sys.exit(1 if problems else 0)
PYEOF
