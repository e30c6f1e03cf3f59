#!/usr/bin/env bash
# Headless Chromium for the report's browser test (tests/report/test_report_browser.py): installed with
# Debian's package where apt is available and chromium is missing; elsewhere nothing is done and that
# test is skipped, saying why.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium
