#!/usr/bin/env bash
# Install the official SDKs that tests/test_sdks.py drives into .ci-sdk/ (a scratch folder beside
# the checkout's code, ignored by git; never the project's own dependencies), at the versions tested:
#   bash tests/sdk/install.sh && .venv/bin/python -m pytest tests/test_sdks.py
set -euo pipefail
cd "$(dirname "$0")/../.."
sdk=.ci-sdk
mkdir -p "$sdk"
[ -x "$sdk/py/bin/python" ] || python3 -m venv "$sdk/py"
"$sdk/py/bin/python" -m pip install -q 'qstash==3.4.0'
# ... and, as a user's project would have them, pytest and qstash-lists itself (its pytest plugin)
"$sdk/py/bin/python" -m pip install -q 'pytest==8.4.2' 'pytest-xdist==3.8.0' -e .
(cd "$sdk" && npm install --silent --no-audit --no-fund '@upstash/qstash@2.12.0')
echo "SDKs installed in $sdk/"
