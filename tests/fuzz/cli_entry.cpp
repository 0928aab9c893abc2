// The `strata` command line's main() under the name strata_cli_main, so that the config fuzz test
// runs exactly what the CLI runs (argument parsing, the one catch at the top, format_error and the
// exit codes) in forked children, without copying any of it.
#define main strata_cli_main
#include "../../core/app/main.cpp"
