# Sourced by the scripts here: cd to the repository root and pick the interpreter
# ($PYTHON if set, else the repo's .venv/bin/python if present, else python3).
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ -n "${PYTHON:-}" ]]; then
    :
elif [[ -x .venv/bin/python ]]; then
    PYTHON=.venv/bin/python
else
    PYTHON=python3
fi
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-3}"
