#!/usr/bin/env bash
# Screenshots of five pages of a built docs site, to look at the layout (sidebars, landing page).
#
#     bash scripts/screenshots.sh [SITE] [OUT]
#
# SITE: the built HTML (default docs/_build/html, from `bash scripts/docs.sh`); OUT: where the PNGs
# go (default docs/img/screenshots). Serves SITE on a free localhost port with
# `python -m http.server` and shoots, with headless Chromium (/usr/bin/chromium, or $CHROMIUM;
# Debian: `apt-get install -y chromium`), at 1400 x 1000 (the landing page at 1400 x 1800, so that
# its install line, example, figure and section list are all in the picture):
#   landing.png      index.html
#   guide.png        guide/classification.html
#   examples.png     auto_examples/index.html (the gallery) if built, else guide/robust_regression.html
#   api.png          api/generated/qpinfer.GPClassifier.html
#   development.png  development/benchmarks.html
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SITE=$(realpath "${1:-$ROOT/docs/_build/html}")
OUT=$(realpath -m "${2:-$ROOT/docs/img/screenshots}")
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
PYTHON=${PYTHON:-$(command -v python3)}

[[ -f $SITE/index.html ]] || { echo "no built site at $SITE (build it: bash scripts/docs.sh)" >&2; exit 2; }
[[ -x $CHROMIUM ]] || { echo "no Chromium at $CHROMIUM (apt-get install -y chromium, or set CHROMIUM)" >&2; exit 2; }
mkdir -p "$OUT"

PORT=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$PYTHON" -m http.server "$PORT" --bind 127.0.0.1 --directory "$SITE" >/dev/null 2>&1 &
SERVER=$!
PROFILE=$(mktemp -d)
cleanup() { kill "$SERVER" 2>/dev/null || true; rm -rf "$PROFILE"; }
trap cleanup EXIT

for _ in $(seq 50); do # wait until the server answers (at most ~5 s)
    "$PYTHON" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/')" 2>/dev/null && break
    sleep 0.1
done

examples=auto_examples/index.html
[[ -f $SITE/$examples ]] || examples=guide/robust_regression.html
pages=(
    "landing index.html 1800"
    "guide guide/classification.html 1000"
    "examples $examples 1000"
    "api api/generated/qpinfer.GPClassifier.html 1000"
    "development development/benchmarks.html 1000"
)
for entry in "${pages[@]}"; do
    read -r name page height <<<"$entry"
    [[ -f $SITE/$page ]] || { echo "missing page $SITE/$page" >&2; exit 1; }
    "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --hide-scrollbars --user-data-dir="$PROFILE" --window-size=1400,"$height" \
        --screenshot="$OUT/$name.png" "http://127.0.0.1:$PORT/$page" >/dev/null 2>&1
    [[ -s $OUT/$name.png ]] || { echo "no screenshot of $page" >&2; exit 1; }
    echo "$OUT/$name.png <- $page"
done
