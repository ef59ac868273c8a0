// The command line of every ferry tool (ferry-bench, ferry-run, ferry-dlrm, ferry-train, the small
// benches): one parser, so they all take `--flag value` and `--flag=value`, answer `--help`, and
// refuse what they do not understand instead of guessing.
//
// Ours rather than a library: the tools need a few dozen lines of it, Debian's CLI11 and cxxopts
// would be one more build dependency for every user of ferry's tools, and neither knows the byte
// sizes (64K, 1M) that the benches share with nccl-tests. Numbers are read strictly: the whole
// text must be the number and in range ("--epochs 3x" is an error, not 3).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ferry::cli {

// A bad command line. The tools print it with a pointer to --help and exit with status 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// `flag` names the option in the message. Integers: decimal digits with an optional sign.
int64_t parse_int(const std::string& flag, const std::string& text, int64_t lo, int64_t hi);
// A finite decimal number (1, 0.5, 1e-3) in [lo, hi].
double parse_double(const std::string& flag, const std::string& text, double lo, double hi);
// "8", "64K", "1M", "2G", "1MiB", "1KB": binary units, as nccl-tests reads -b / -e.
size_t parse_bytes(const std::string& flag, const std::string& text);

class Parser {
 public:
  // `synopsis` follows "usage: PROGRAM " in --help; `about` is the paragraph below it.
  Parser(std::string program, std::string synopsis, std::string about);

  // An option with a value. `names` is "--epochs" or "-n, --world-size" (aliases, comma
  // separated); `meta` names the value in --help ("N", "PATH"); `apply` receives the text and
  // throws UsageError when it is not acceptable.
  Parser& option(const std::string& names, const std::string& meta, const std::string& help,
                 std::function<void(const std::string&)> apply);
  // A switch without a value.
  Parser& flag(const std::string& names, const std::string& help, std::function<void()> apply);

  // Typed options over the usual parse_* functions.
  Parser& int_option(const std::string& names, const std::string& help, int* target, int64_t lo,
                     int64_t hi, const std::string& meta = "N");
  Parser& int_option(const std::string& names, const std::string& help, int64_t* target,
                     int64_t lo, int64_t hi, const std::string& meta = "N");
  Parser& double_option(const std::string& names, const std::string& help, double* target,
                        double lo, double hi, const std::string& meta = "X");
  Parser& string_option(const std::string& names, const std::string& help, std::string* target,
                        const std::string& meta = "TEXT");
  // One of `choices`, e.g. on|off.
  Parser& choice_option(const std::string& names, const std::string& help, std::string* target,
                        const std::vector<std::string>& choices);

  // Text after the option list in --help (exit status, environment, examples).
  Parser& epilog(std::string text);
  // Stop at the first argument that is not an option (or after "--"): a launcher's program and
  // its arguments; parse() returns its index. Without it a positional argument is an error.
  Parser& positional_rest(const std::string& meta);

  // Reads argv[1..]. --help / -h prints help() to stdout and exits 0. Returns the index of the
  // first positional argument (argc when there is none). Throws UsageError.
  int parse(int argc, char** argv) const;
  std::string help() const;
  const std::string& program() const { return program_; }

 private:
  struct Spec {
    std::vector<std::string> names;
    std::string meta;  // empty: a switch
    std::string help;
    std::function<void(const std::string&)> apply;
  };
  const Spec* find(const std::string& name) const;

  std::string program_;
  std::string synopsis_;
  std::string about_;
  std::string epilog_;
  std::string rest_meta_;
  std::vector<Spec> specs_;
};

// Runs `body` and turns what it throws into one line on stderr and an exit status, so that no
// tool ends in std::terminate (an abort and a core dump per rank):
//   UsageError                          "PROGRAM: message (see PROGRAM --help)", status 2;
//   any other exception (ferry::Error,  "PROGRAM: rank R: message", status 1.
//   std::bad_alloc, ...)
// R is the rank the message names first ("rank 3: ..." from run_ranks, whose ranks are threads
// of this process), else this process's rank from its launcher (FERRY_RANK, PMI_RANK, PMIX_RANK,
// OMPI_COMM_WORLD_RANK, RANK, SLURM_PROCID), else 0. Line breaks in the message become "; ".
int guarded_main(const std::string& program, const std::function<int()>& body);

// The line guarded_main prints for an exception with message `what` (without the newline).
std::string error_line(const std::string& program, const std::string& what);

}  // namespace ferry::cli
