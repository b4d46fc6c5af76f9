#!/usr/bin/env bash
# The Python side of the tests: build/python-openai, a virtual environment
# with the pinned `openai` package (tests/server/openai_python/requirements.txt)
# that openai_python_e2e_test drives the HTTP API with. tests/run.sh calls it.
# Idempotent (a stamp records what was installed). Without PyPI it warns and
# exits 0: that test then skips and says why.
set -uo pipefail
cd "$(dirname "$0")/.."
venv=build/python-openai
req=tests/server/openai_python/requirements.txt
stamp=$venv/.installed-requirements
if [[ -f $stamp ]] && cmp -s "$req" "$stamp"; then
  exit 0
fi
rm -rf "$venv"
if python3 -m venv "$venv" &&
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req"; then
  cp "$req" "$stamp"
  echo "setup_python: $venv ready ($(tr '\n' ' ' <"$req"))"
else
  rm -rf "$venv"
  echo "setup_python: WARNING: could not install $req; openai_python_e2e_test will skip" >&2
fi
exit 0
