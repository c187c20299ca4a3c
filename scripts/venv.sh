# Sourced by the setup scripts: the steps every environment shares.
#   venv_create DIR             create DIR with $PYTHON (python3) unless it exists
#   venv_stale DIR FILE...      true when FILE...'s hash differs from DIR's install stamp
#   venv_stamp DIR              record that hash, after a successful install
# Idempotence comes from the stamp: an unchanged pin file means nothing to install.

venv_create() {
  if [ ! -x "$1/bin/python" ]; then
    "${PYTHON:-python3}" -m venv "$1"
  fi
}

venv_stale() {
  local dir=$1
  shift
  _venv_want=$(cat "$@" | sha256sum | cut -d' ' -f1)
  [ "$(cat "$dir/.shardline-installed" 2>/dev/null)" != "$_venv_want" ]
}

venv_stamp() {
  echo "$_venv_want" > "$1/.shardline-installed"
}
