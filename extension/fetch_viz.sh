#!/usr/bin/env bash
# Re-vendor the WebAssembly Graphviz (Viz.js) that trace_lab uses when `dot` is absent.
#
#   extension/fetch_viz.sh            # the pinned version below, checksum verified
#   VIZ_VERSION=3.32.0 VIZ_SHA256= extension/fetch_viz.sh   # refresh: prints the new checksums
#
# Fetches the npm tarball with `npm pack` (the registry's ordinary client), checks
# its sha256, and copies the single-file standalone build dist/viz-global.js to
# trace_lab/static/viz-global.js (shipped in the wheel through package-data static/*).
# After a refresh: update VIZ_VERSION/VIZ_SHA256 here, the table in extension/README.md
# and trace_lab/static/viz-global.js.LICENSE.txt, then run tests/test_graph_render.py.
set -euo pipefail
VIZ_VERSION="${VIZ_VERSION:-3.31.0}"
VIZ_SHA256="${VIZ_SHA256-7dc0189874849cca2fed7cbe88bf334cd0e6e012db16657794a812ad6f2b8c70}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
cd "$TMP"
npm pack --silent "@viz-js/viz@${VIZ_VERSION}" >/dev/null
TGZ="viz-js-viz-${VIZ_VERSION}.tgz"
GOT="$(sha256sum "$TGZ" | cut -d' ' -f1)"
if [ -n "$VIZ_SHA256" ] && [ "$GOT" != "$VIZ_SHA256" ]; then
  echo "checksum mismatch for $TGZ: got $GOT, expected $VIZ_SHA256" >&2
  exit 1
fi
tar xzf "$TGZ"
LICENSE="$(node -e 'console.log(require("./package/package.json").license)')"
if [ "$LICENSE" != "MIT" ]; then
  echo "@viz-js/viz ${VIZ_VERSION} declares license '$LICENSE', not MIT: review before vendoring" >&2
  exit 1
fi
if grep -qi '</script' package/dist/viz-global.js; then
  echo "viz-global.js contains '</script': it cannot be inlined in HTML as is" >&2
  exit 1
fi
cp package/dist/viz-global.js "$ROOT/trace_lab/static/viz-global.js"
echo "vendored @viz-js/viz ${VIZ_VERSION} (tarball sha256 $GOT)"
echo "viz-global.js sha256 $(sha256sum "$ROOT/trace_lab/static/viz-global.js" | cut -d' ' -f1)"
