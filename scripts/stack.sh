# Sourced by the set-up and test scripts: shardline's two stacks, and which one this machine runs.
#
#   petastorm  Spark 3.5, pyarrow 14, numpy 1.26, Petastorm (the default reader); Python 3.10-3.12;
#              Java 8/11/17; .venv/, pinned by constraints.txt
#   current    Spark 4, a current pyarrow, numpy 2, reader.backend pyarrow (no Petastorm);
#              Python 3.10-3.13 (on 3.10 Spark 4.2 and numpy 2.2: 4.3 and 2.4 need 3.11); Java 17/21;
#              .venv-current/, pinned by constraints-current.txt
#
#   stack_python STACK     the first interpreter on PATH that STACK runs on (its path), else nothing
#   stack_pick             sets STACK: $SHARDLINE_STACK when set (a one-line error if this machine
#                          cannot run it), else petastorm when a Python 3.10-3.12 exists, else current;
#                          prints which and why in one line (stderr)
#   stack_venv STACK       its environment's folder
#   stack_constraints STACK
#   stack_check_java STACK a one-line error when java is missing, a warning when its version is untested
# Only bash builtins and the interpreters themselves: tests/unit/test_stack_choice.py runs this with
# nothing but fake interpreters on PATH.

_stack_versions() {
  case $1 in
    petastorm) echo "3.10 3.11 3.12" ;;
    current) echo "3.10 3.11 3.12 3.13" ;;
    *) return 1 ;;
  esac
}

# Named interpreters first (a machine whose python3 is 3.13 may also have python3.12), python3 last;
# the current stack prefers the machine's own python3.
_stack_candidates() {
  case $1 in
    petastorm) echo "python3.12 python3.11 python3.10 python3" ;;
    current) echo "python3 python3.13 python3.12 python3.11 python3.10" ;;
  esac
}

# "3.11" for an interpreter that runs, nothing for one that does not (a pyenv shim of an inactive version).
_python_version() {
  "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null
}

stack_python() {
  local wanted candidate path version
  wanted=" $(_stack_versions "$1") "
  for candidate in $(_stack_candidates "$1"); do
    path=$(command -v "$candidate") || continue
    version=$(_python_version "$path") || continue
    if [[ -n $version && $wanted == *" $version "* ]]; then
      echo "$path"
      return 0
    fi
  done
  return 1
}

_python3_says() {
  local path version
  path=$(command -v python3) || { echo "no python3 on PATH"; return; }
  version=$(_python_version "$path")
  echo "python3 is ${version:-not runnable}"
}

stack_pick() {
  local found
  case ${SHARDLINE_STACK:-} in
    petastorm | current)
      if ! found=$(stack_python "$SHARDLINE_STACK"); then
        local versions
        versions=$(_stack_versions "$SHARDLINE_STACK")
        echo "SHARDLINE_STACK=$SHARDLINE_STACK needs Python ${versions// /, } ($(_python3_says), and no python${versions// /, python} runs); install one, or unset SHARDLINE_STACK" >&2
        return 1
      fi
      STACK=$SHARDLINE_STACK
      echo "shardline: stack $STACK with $found, as SHARDLINE_STACK says" >&2
      ;;
    "")
      if found=$(stack_python petastorm); then
        STACK=petastorm
        echo "shardline: stack petastorm with $found (Python $(_python_version "$found"): Petastorm runs there; SHARDLINE_STACK=current picks Spark 4)" >&2
      elif found=$(stack_python current); then
        STACK=current
        echo "shardline: stack current with $found (no Python 3.10-3.12 for Petastorm; $(_python3_says)): Spark 4, reader.backend pyarrow" >&2
      else
        echo "shardline needs Python 3.10-3.13 ($(_python3_says)); install one, e.g. python3.12" >&2
        return 1
      fi
      ;;
    *)
      echo "SHARDLINE_STACK=$SHARDLINE_STACK is not a stack; use petastorm or current" >&2
      return 1
      ;;
  esac
}

stack_venv() {
  case $1 in petastorm) echo .venv ;; current) echo .venv-current ;; esac
}

stack_constraints() {
  case $1 in petastorm) echo constraints.txt ;; current) echo constraints-current.txt ;; esac
}

stack_check_java() {
  local version major supported
  case $1 in petastorm) supported="8 11 17" ;; current) supported="17 21" ;; esac
  if ! command -v java >/dev/null 2>&1; then
    echo "the $1 stack's Spark needs Java ${supported// //}, and java was not found on PATH; install one, e.g. 'apt-get install openjdk-17-jre-headless'" >&2
    return 1
  fi
  version=$(java -version 2>&1)
  if [[ $version =~ version\ \"(1\.)?([0-9]+) ]]; then
    major=${BASH_REMATCH[2]}
  fi
  if [[ " $supported " != *" ${major:-?} "* ]]; then
    echo "warning: Java ${major:-of unknown version} found; the $1 stack's Spark is tested on Java ${supported// //}" >&2
  fi
  return 0
}
