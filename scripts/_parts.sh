# Sourced by reference.sh and replication.sh after _python.sh: "$@" -> the named PARTs in
# $parts (default: the caller's $all_parts) and "--parallel N" in $args (default 2).
parts=() args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --parallel) args+=(--parallel "$2"); shift 2 ;;
    *) parts+=("$1"); shift ;;
  esac
done
if [[ ${#args[@]} -eq 0 ]]; then args=(--parallel 2); fi
if [[ ${#parts[@]} -eq 0 ]]; then parts=("${all_parts[@]}"); fi
# Every named part is checked before the first one runs (a typo must not surface hours later).
for part in "${parts[@]}"; do
  if [[ " ${all_parts[*]} " != *" $part "* ]]; then
    echo "error: unknown part '$part' (parts: ${all_parts[*]})" >&2
    exit 2
  fi
done
