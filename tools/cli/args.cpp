#include "tools/cli/args.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <utility>

namespace ferry::cli {
namespace {

// Built with append: GCC 12 at -O3 warns falsely (-Wrestrict) on "literal" + std::string.
std::string join(std::initializer_list<std::string> parts) {
  std::string out;
  for (const std::string& p : parts) out.append(p);
  return out;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> split_names(const std::string& names) {
  std::vector<std::string> out;
  std::stringstream ss(names);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t b = item.find_first_not_of(' ');
    const size_t e = item.find_last_not_of(' ');
    if (b != std::string::npos) out.push_back(item.substr(b, e - b + 1));
  }
  return out;
}

}  // namespace

int64_t parse_int(const std::string& flag, const std::string& text, int64_t lo, int64_t hi) {
  int64_t value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  if (first != last && *first == '+') ++first;  // from_chars takes '-' but not '+'
  auto [ptr, ec] = std::from_chars(first, last, value);
  if (text.empty() || ec != std::errc() || ptr != last || value < lo || value > hi) {
    throw UsageError(join({flag, " expects a whole number in [", std::to_string(lo), ", ",
                           std::to_string(hi), "], given '", text, "'"}));
  }
  return value;
}

double parse_double(const std::string& flag, const std::string& text, double lo, double hi) {
  double value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  if (first != last && *first == '+') ++first;
  auto [ptr, ec] = std::from_chars(first, last, value);
  if (text.empty() || ec != std::errc() || ptr != last || !std::isfinite(value) || value < lo ||
      value > hi) {
    std::ostringstream os;
    os << flag << " expects a number in [" << lo << ", " << hi << "], given '" << text << "'";
    throw UsageError(os.str());
  }
  return value;
}

size_t parse_bytes(const std::string& flag, const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const std::string suffix = lower(text.substr(digits));
  int shift = -1;
  if (suffix.empty() || suffix == "b") shift = 0;
  else if (suffix == "k" || suffix == "kb" || suffix == "kib") shift = 10;
  else if (suffix == "m" || suffix == "mb" || suffix == "mib") shift = 20;
  else if (suffix == "g" || suffix == "gb" || suffix == "gib") shift = 30;
  size_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + digits, value);
  if (shift < 0 || digits == 0 || ec != std::errc() || ptr != text.data() + digits ||
      value > (std::numeric_limits<size_t>::max() >> shift)) {
    throw UsageError(join({flag, " expects a byte count like 8, 64K, 1M or 2G (binary units), ",
                           "given '", text, "'"}));
  }
  return value << shift;
}

Parser::Parser(std::string program, std::string synopsis, std::string about)
    : program_(std::move(program)), synopsis_(std::move(synopsis)), about_(std::move(about)) {}

Parser& Parser::option(const std::string& names, const std::string& meta,
                       const std::string& help, std::function<void(const std::string&)> apply) {
  specs_.push_back(Spec{split_names(names), meta, help, std::move(apply)});
  return *this;
}

Parser& Parser::flag(const std::string& names, const std::string& help,
                     std::function<void()> apply) {
  specs_.push_back(Spec{split_names(names), "", help,
                        [apply = std::move(apply)](const std::string&) { apply(); }});
  return *this;
}

Parser& Parser::int_option(const std::string& names, const std::string& help, int* target,
                           int64_t lo, int64_t hi, const std::string& meta) {
  const std::string shown = split_names(names).back();
  return option(names, meta, help, [=](const std::string& v) {
    *target = static_cast<int>(parse_int(shown, v, lo, hi));
  });
}

Parser& Parser::int_option(const std::string& names, const std::string& help, int64_t* target,
                           int64_t lo, int64_t hi, const std::string& meta) {
  const std::string shown = split_names(names).back();
  return option(names, meta, help,
                [=](const std::string& v) { *target = parse_int(shown, v, lo, hi); });
}

Parser& Parser::double_option(const std::string& names, const std::string& help, double* target,
                              double lo, double hi, const std::string& meta) {
  const std::string shown = split_names(names).back();
  return option(names, meta, help,
                [=](const std::string& v) { *target = parse_double(shown, v, lo, hi); });
}

Parser& Parser::string_option(const std::string& names, const std::string& help,
                              std::string* target, const std::string& meta) {
  const std::string shown = split_names(names).back();
  return option(names, meta, help, [=](const std::string& v) {
    if (v.empty()) throw UsageError(join({shown, " needs a non-empty value"}));
    *target = v;
  });
}

Parser& Parser::choice_option(const std::string& names, const std::string& help,
                              std::string* target, const std::vector<std::string>& choices) {
  std::string meta;
  for (const std::string& c : choices) meta.append(meta.empty() ? "" : "|").append(c);
  const std::string shown = split_names(names).back();
  return option(names, meta, help, [=](const std::string& v) {
    for (const std::string& c : choices) {
      if (v == c) {
        *target = v;
        return;
      }
    }
    throw UsageError(join({shown, " takes ", meta, ", given '", v, "'"}));
  });
}

Parser& Parser::epilog(std::string text) {
  epilog_ = std::move(text);
  return *this;
}

Parser& Parser::positional_rest(const std::string& meta) {
  rest_meta_ = meta;
  return *this;
}

const Parser::Spec* Parser::find(const std::string& name) const {
  for (const Spec& s : specs_)
    for (const std::string& n : s.names)
      if (n == name) return &s;
  return nullptr;
}

int Parser::parse(int argc, char** argv) const {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      if (rest_meta_.empty()) throw UsageError("unexpected '--'");
      return i + 1;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      if (!rest_meta_.empty()) return i;
      throw UsageError(join({"unexpected argument '", arg, "'"}));
    }
    if (arg == "--help" || arg == "-h") {
      std::fputs(help().c_str(), stdout);
      std::exit(0);
    }
    std::string name = arg;
    bool has_inline = false;
    std::string inline_value;
    if (arg.rfind("--", 0) == 0) {
      if (const size_t eq = arg.find('='); eq != std::string::npos) {
        name = arg.substr(0, eq);
        inline_value = arg.substr(eq + 1);
        has_inline = true;
      }
    } else if (arg.size() > 2 && find(arg) == nullptr) {  // -n4: a short option and its value
      name = arg.substr(0, 2);
      inline_value = arg.substr(2);
      has_inline = true;
    }
    const Spec* spec = find(name);
    if (spec == nullptr) throw UsageError(join({"unknown option '", name, "'"}));
    if (spec->meta.empty()) {
      if (has_inline) throw UsageError(join({name, " takes no value"}));
      spec->apply("");
      continue;
    }
    if (!has_inline) {
      if (i + 1 >= argc) throw UsageError(join({name, " needs a value (", spec->meta, ")"}));
      inline_value = argv[++i];
    }
    spec->apply(inline_value);
  }
  return argc;
}

std::string Parser::help() const {
  std::ostringstream os;
  os << "usage: " << program_ << " " << synopsis_ << "\n";
  if (!about_.empty()) os << "\n" << about_ << "\n";
  os << "\noptions:\n";
  constexpr size_t kColumn = 28;
  auto entry = [&](const std::string& left, const std::string& help) {
    os << "  " << left;
    if (left.size() + 2 >= kColumn) os << "\n" << std::string(kColumn, ' ');
    else os << std::string(kColumn - 2 - left.size(), ' ');
    // Continuation lines of a long help text line up under its first line.
    for (char c : help) {
      os << c;
      if (c == '\n') os << std::string(kColumn, ' ');
    }
    os << "\n";
  };
  for (const Spec& s : specs_) {
    std::string left;
    for (const std::string& n : s.names) left.append(left.empty() ? "" : ", ").append(n);
    if (!s.meta.empty()) left.append(" ").append(s.meta);
    entry(left, s.help);
  }
  entry("-h, --help", "this text");
  if (!epilog_.empty()) os << "\n" << epilog_ << "\n";
  return os.str();
}

namespace {

// The launcher's rank of this process, or -1.
int launcher_rank() {
  for (const char* name : {"FERRY_RANK", "PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "RANK",
                           "SLURM_PROCID"}) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') continue;
    int r = 0;
    const char* end = v + std::strlen(v);
    const auto [ptr, ec] = std::from_chars(v, end, r);
    if (ec == std::errc() && ptr == end && r >= 0) return r;
  }
  return -1;
}

}  // namespace

std::string error_line(const std::string& program, const std::string& what) {
  std::string message = what;
  int rank = -1;
  // "rank 3: ..." (run_ranks' prefix): that rank, and the prefix is not repeated.
  if (message.rfind("rank ", 0) == 0) {
    const char* begin = message.c_str() + 5;
    const char* end = message.c_str() + message.size();
    int r = 0;
    const auto [ptr, ec] = std::from_chars(begin, end, r);
    if (ec == std::errc() && ptr + 1 < end && ptr[0] == ':' && ptr[1] == ' ' && r >= 0) {
      rank = r;
      message.erase(0, static_cast<size_t>(ptr + 2 - message.c_str()));
    }
  }
  // "ferry: " says nothing after "TOOL: rank R: ".
  if (message.rfind("ferry: ", 0) == 0) message.erase(0, 7);
  if (rank < 0) rank = launcher_rank();
  if (rank < 0) rank = 0;
  std::string line = join({program, ": rank ", std::to_string(rank), ": "});
  for (char c : message) {
    if (c == '\n') line.append("; ");
    else if (c != '\r') line.push_back(c);
  }
  while (line.size() > 2 && line.compare(line.size() - 2, 2, "; ") == 0) line.resize(line.size() - 2);
  return line;
}

int guarded_main(const std::string& program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s (see %s --help)\n", program.c_str(), e.what(), program.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", error_line(program, e.what()).c_str());
  } catch (...) {
    std::fprintf(stderr, "%s\n", error_line(program, "unknown exception").c_str());
  }
  std::fflush(stderr);
  return 1;
}

}  // namespace ferry::cli
