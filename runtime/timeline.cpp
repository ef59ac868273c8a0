#include <ferry/runtime/timeline.h>

#include <ferry/runtime/config.h>
#include <ferry/runtime/log_sink.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <set>
#include <unistd.h>

namespace ferry::detail {
namespace {

int64_t micros(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

std::string escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;  // op names have none; stay valid JSON
    out += c;
  }
  return out;
}

// The open file; closes the JSON array at exit. Opened at the first event, when init() has
// told the log module this process's rank (the path's %r).
class Timeline {
 public:
  ~Timeline() {
    std::lock_guard<std::mutex> lock(mu_);
    if (file_ == nullptr) return;
    std::fputs("\n]\n", file_);
    std::fclose(file_);
    file_ = nullptr;
    closed_ = true;
  }

  void add(const std::string& name, int rank, uint64_t group, int64_t begin_us, int64_t dur_us,
           const std::string& args) {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_ || !open()) return;
    if (named_ranks_.insert(rank).second) {
      char host[256] = {};
      gethostname(host, sizeof host - 1);
      std::fprintf(file_,
                   "%s{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": "
                   "{\"name\": \"rank %d (%s:%d)\"}},\n"
                   "{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": %d, \"args\": "
                   "{\"sort_index\": %d}}",
                   first_ ? "" : ",\n", rank, rank, escaped(host).c_str(),
                   static_cast<int>(getpid()), rank, rank);
      first_ = false;
    }
    std::fprintf(file_,
                 ",\n{\"name\": \"%s\", \"cat\": \"coll\", \"ph\": \"X\", \"ts\": %lld, "
                 "\"dur\": %lld, \"pid\": %d, \"tid\": %llu, \"args\": {%s}}",
                 escaped(name).c_str(), static_cast<long long>(begin_us),
                 static_cast<long long>(dur_us), rank, static_cast<unsigned long long>(group),
                 args.c_str());
    std::fflush(file_);  // a job that is killed keeps what it recorded
  }

 private:
  bool open() {
    if (file_ != nullptr) return true;
    if (failed_) return false;
    const int r = current_log_rank();
    const std::string path = expand_log_path(config().timeline, r >= 0 ? std::to_string(r) : "-");
    file_ = std::fopen(path.c_str(), "w");
    if (file_ == nullptr) {
      failed_ = true;
      std::fprintf(stderr, "[ferry] FERRY_TIMELINE: cannot write '%s'; no timeline\n",
                   path.c_str());
      return false;
    }
    std::fputs("[\n", file_);
    return true;
  }

  std::mutex mu_;
  std::FILE* file_ = nullptr;
  bool failed_ = false;
  bool closed_ = false;
  bool first_ = true;
  std::set<int> named_ranks_;
};

Timeline& timeline() {
  static Timeline t;
  return t;
}

}  // namespace

bool timeline_on() {
  static const bool on = !config().timeline.empty();
  return on;
}

void timeline_event(const std::string& name, int rank, uint64_t group,
                    std::chrono::system_clock::time_point begin,
                    std::chrono::system_clock::time_point end, const std::string& args) {
  if (!timeline_on()) return;
  timeline().add(name, rank, group, micros(begin), std::max<int64_t>(0, micros(end) - micros(begin)),
                 args);
}

}  // namespace ferry::detail
