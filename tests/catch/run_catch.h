// Catch2's session, compiled once for every test binary (tests/catch/catch_impl.cpp). Catch2 v2's
// implementation is a 17,000-line header: built into each binary's main it cost 20 s of compile
// per binary (40 s under ASan), a fifth of the CI build.
#pragma once

namespace ferry_test {

// Catch::Session().run(argc, argv): the default main, for binaries that need their own.
int run_catch(int argc, char** argv);

}  // namespace ferry_test
