// The main of a Catch2 test binary with nothing of its own to set up.
#include "run_catch.h"

int main(int argc, char** argv) { return ferry_test::run_catch(argc, argv); }
