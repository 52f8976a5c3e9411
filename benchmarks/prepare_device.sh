#!/usr/bin/env bash
# Makes .device/ for this project's GPU machine (../shared/device/prepare.sh) and checks the setup script it
# copies: the shared recipe's setup.sh has carried the placeholder `<tmp>` where a directory belongs (2026-11-29,
# session 34, 2026-12-07), which made the first GPU call run without nvFuser or stop in a syntax error. The
# placeholder becomes /tmp here, and the script must then parse. Run in the project root:
#     bash benchmarks/prepare_device.sh          # then every device call: source .device/setup.sh && ...
set -euo pipefail
RECIPE="${RECIPE:-../shared/device}"
DEST=.device
if [ ! -f "$DEST/setup.sh" ] || [ ! -d "$DEST/whl" ]; then
  bash "$RECIPE/prepare.sh" "$DEST"
fi
chmod u+w "$DEST/setup.sh"
if grep -q '<tmp>' "$DEST/setup.sh"; then
  sed -i 's#<tmp>#/tmp#g' "$DEST/setup.sh"
  echo "prepare_device: $DEST/setup.sh carried <tmp>; it now unpacks into /tmp/site"
fi
bash -n "$DEST/setup.sh" || { echo "prepare_device: $DEST/setup.sh does not parse" >&2; exit 1; }
grep -q 'PYTHONPATH=' "$DEST/setup.sh" || { echo "prepare_device: $DEST/setup.sh sets no PYTHONPATH" >&2; exit 1; }
du -sh "$DEST"
