// What a test's code under test prints on stderr: the rendezvous and the store server name the
// connections they reject there, and the tests check how many lines that makes.
#pragma once

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

namespace ferry::test {

// Sends stderr (fd 2) to a temporary file while it lives; text() restores it and returns what
// was written.
class StderrCapture {
 public:
  StderrCapture() {
    std::fflush(stderr);
    saved_ = ::dup(2);
    file_ = std::tmpfile();
    REQUIRE(saved_ >= 0);
    REQUIRE(file_ != nullptr);
    REQUIRE(::dup2(::fileno(file_), 2) >= 0);
  }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;
  ~StderrCapture() {
    restore();
    if (file_ != nullptr) std::fclose(file_);
  }

  // What was written so far, while the capture goes on (read without moving the offset that
  // fd 2 writes at).
  std::string so_far() {
    std::fflush(stderr);
    std::string out;
    char buf[4096];
    for (off_t at = 0;;) {
      const ssize_t n = ::pread(::fileno(file_), buf, sizeof buf, at);
      if (n <= 0) return out;
      out.append(buf, static_cast<size_t>(n));
      at += n;
    }
  }

  std::string text() {
    restore();
    std::string out;
    std::rewind(file_);
    char buf[4096];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, file_)) > 0) out.append(buf, n);
    return out;
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
  }
  int saved_ = -1;
  std::FILE* file_ = nullptr;
};

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

inline size_t count_containing(const std::vector<std::string>& lines, const std::string& part) {
  size_t n = 0;
  for (const std::string& l : lines) n += l.find(part) != std::string::npos;
  return n;
}

}  // namespace ferry::test
