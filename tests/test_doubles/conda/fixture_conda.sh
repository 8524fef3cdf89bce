# TEST DOUBLE of conda's etc/profile.d/conda.sh (molecule/anaconda fixture), laid out by the fixture installer with
# @PREFIX@ replaced, as the real installer rewrites its prefix placeholder. Like the real one it exports CONDA_EXE,
# puts condabin on PATH and defines the conda shell function; activate and deactivate only set the variables.
export CONDA_EXE='@PREFIX@/bin/conda'
export CONDA_PYTHON_EXE=/usr/bin/python3
if [ -z "${CONDA_SHLVL+x}" ]; then
    export CONDA_SHLVL=0
    export PATH="@PREFIX@/condabin${PATH:+:$PATH}"
fi
conda() {
    case "${1:-}" in
        activate)
            if [ -z "${2:-}" ] || [ "$2" = base ]; then __conda_target='@PREFIX@'; else __conda_target="@PREFIX@/envs/$2"; fi
            export CONDA_PREFIX="$__conda_target" CONDA_DEFAULT_ENV="${2:-base}" CONDA_SHLVL=1
            export PATH="$__conda_target/bin:$PATH"
            unset __conda_target
            ;;
        deactivate)
            unset CONDA_PREFIX CONDA_DEFAULT_ENV
            export CONDA_SHLVL=0
            ;;
        *)
            "$CONDA_EXE" "$@"
            ;;
    esac
}
