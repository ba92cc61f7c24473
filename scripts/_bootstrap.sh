# Sourced by scripts/serve and scripts/test: make .venv and install the project into it.
# Re-installs only when pyproject.toml changed since the last install (a stamp file records it).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
EXTRAS="${1:-}"

find_python() {
    for cand in "${ROOM_PYTHON:-}" python3.13 python3.12 python3.11 python3; do
        [ -n "$cand" ] || continue
        if command -v "$cand" >/dev/null 2>&1 &&
            "$cand" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
            echo "$cand"
            return 0
        fi
    done
    echo "Project Room needs Python 3.11 or newer; none was found on PATH." >&2
    return 1
}

if [ ! -x "$VENV/bin/python" ]; then
    PY="$(find_python)"
    echo "==> creating $VENV with $($PY --version)"
    "$PY" -m venv "$VENV"
fi

# The stamp is "<hash of pyproject.toml>-<extras installed>". No extras asked (scripts/serve) is
# satisfied by any install of the same pyproject.toml: after scripts/test (extras "test") serve
# used to reinstall, and the next test run reinstalled again.
want="$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)-${EXTRAS}"
stamp="$VENV/.room-installed"
have="$(cat "$stamp" 2>/dev/null || true)"
if [ "$have" != "$want" ] && { [ -n "$EXTRAS" ] || [ "${have%-*}" != "${want%-*}" ]; }; then
    echo "==> installing project${EXTRAS:+ with [$EXTRAS]} into .venv"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    spec="$ROOT"
    [ -n "$EXTRAS" ] && spec="$ROOT[$EXTRAS]"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$spec"
    echo "$want" > "$stamp"
fi
