#!/usr/bin/env bash
# Make sure Debian's chromium and chromedriver are installed for tests/e2e/test_graph_page.py.
#
# Installs them with apt-get when they are missing and this runs as root (CI). Otherwise it
# only says what to run and exits 0: without them the browser tests skip, nothing fails.
set -euo pipefail

CHROMIUM=/usr/bin/chromium
CHROMEDRIVER=/usr/bin/chromedriver
PACKAGES=(chromium chromium-driver)

if [[ -x "$CHROMIUM" && -x "$CHROMEDRIVER" ]]; then
    echo "ensure-chromium: $("$CHROMEDRIVER" --version 2>/dev/null | head -n 1 || echo "$CHROMEDRIVER")"
    exit 0
fi

if [[ "$(id -u)" -ne 0 ]]; then
    echo "ensure-chromium: $CHROMIUM or $CHROMEDRIVER is missing; the browser tests will skip." >&2
    echo "ensure-chromium: to run them: sudo apt-get install -y ${PACKAGES[*]}" >&2
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-chromium: no apt-get here; install chromium and chromedriver at" \
        "$CHROMIUM and $CHROMEDRIVER by other means, or the browser tests will skip." >&2
    exit 0
fi

echo "ensure-chromium: installing ${PACKAGES[*]} with apt-get"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${PACKAGES[@]}" >/dev/null
"$CHROMEDRIVER" --version
