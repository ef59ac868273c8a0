// GradientReducer: buckets, the readiness bookkeeping driven by the post-accumulate hooks, the
// launches in bucket order, finish(), and the agreement check at construction.
#include <ferry/collectives/ddp/gradient_reducer.h>

#include <ferry/collectives/collectives.h>
#include <ferry/collectives/engine/validator.h>
#include <ferry/collectives/engine/group_impl.h>
#include <ferry/collectives/shm/shm_ops.h>
#include <ferry/runtime/error.h>

#include <cstring>
#include <exception>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>

namespace ferry {

namespace {

// A bucket's flat gradients, all zero, where the all_reduce's peers reach them
// (shm::empty_for_peers: in shared memory where the group's ranks share a host and the bucket
// is above the slots, so that a peer reduces it where it lies).
Tensor bucket_buffer(const GradientBucketInfo& b, const Group& group) {
  Tensor t = detail::shm::empty_for_peers({b.numel}, b.dtype, group.impl(), "a gradient bucket");
  t.fill_(0);
  return t;
}

}  // namespace

struct GradientReducer::State {
  Group group;
  GradientReducerOptions options;
  std::vector<Variable> params;
  std::vector<GradientBucketInfo> buckets;
  std::vector<size_t> bucket_of;   // parameter -> its bucket
  std::vector<int64_t> offset_of;  // parameter -> first element of its slot in the bucket
  std::vector<Tensor> buffers;     // per bucket: the flat gradients, reduced in place

  // This step (since the last finish()).
  std::vector<char> ready;        // per parameter: its gradient arrived
  std::vector<size_t> waiting;    // per bucket: parameters not ready yet
  std::vector<char> had_grad;     // per parameter: it had a gradient when its bucket was packed
  std::vector<Work> works;        // per launched bucket, in bucket order
  size_t launched = 0;
  int no_sync_depth = 0;

  Tensor slot(size_t p) const {
    return buffers[bucket_of[p]].narrow(0, offset_of[p], params[p].numel());
  }

  void reset_step() {
    std::fill(ready.begin(), ready.end(), 0);
    std::fill(had_grad.begin(), had_grad.end(), 0);
    for (size_t b = 0; b < buckets.size(); ++b) waiting[b] = buckets[b].parameters.size();
    works.clear();
    launched = 0;
  }

  void mark_ready(size_t p) {
    if (no_sync_depth > 0) return;
    const size_t b = bucket_of[p];
    FERRY_CHECK(b >= launched && !ready[p], InvalidArgument,
                "GradientReducer: a second gradient of ", params[p].describe(),
                " arrived in one step (its bucket ", b,
                b < launched ? " is already being reduced" : " was waiting for its other parameters",
                "); call finish() after every backward, or accumulate under no_sync()");
    ready[p] = 1;
    --waiting[b];
    while (launched < buckets.size() && waiting[launched] == 0) launch(launched);
  }

  // Packs bucket b (this rank's gradients, zeros where there are none), starts its all_reduce.
  void launch(size_t b) {
    Tensor& buffer = buffers[b];
    for (size_t p : buckets[b].parameters) {
      Tensor s = slot(p);
      const Tensor& g = params[p].grad();
      if (g.defined()) {
        s.copy_(g);
        had_grad[p] = 1;
      } else {
        s.fill_(0.0);
        had_grad[p] = 0;
      }
    }
    Work work = all_reduce(buffer, group, options.reduce_op);
    // An op started at issue (MPI) moves only while someone tests it; nobody waits before
    // finish(), so its group's worker drives it meanwhile (Work::progress_in_background).
    work.progress_in_background();
    works.push_back(std::move(work));
    ++launched;
  }

  void finish() {
    if (no_sync_depth > 0) return;
    std::exception_ptr error;
    Tensor used;  // find_unused_parameters: per parameter, 1 when some rank had a gradient
    Work used_work;
    try {
      while (launched < buckets.size()) launch(launched);
      if (options.find_unused_parameters) {
        used = empty({static_cast<int64_t>(params.size())}, DType::Int32);
        int32_t* u = used.data<int32_t>();
        for (size_t p = 0; p < params.size(); ++p) u[p] = had_grad[p];
        used_work = all_reduce(used, group, ReduceOp::Max);
      }
    } catch (...) {
      error = std::current_exception();
    }
    // Every launched bucket is waited for, also after a failure, so none is left in flight.
    for (Work& w : works) {
      try {
        w.wait();
      } catch (...) {
        if (!error) error = std::current_exception();
      }
    }
    if (!error && used.defined()) {
      try {
        used_work.wait();
      } catch (...) {
        error = std::current_exception();
      }
    }
    if (error) {
      reset_step();
      std::rethrow_exception(error);
    }
    const int32_t* u = used.defined() ? used.data<int32_t>() : nullptr;
    for (size_t p = 0; p < params.size(); ++p) {
      if (u != nullptr && u[p] == 0) continue;  // no rank had a gradient: stays undefined
      const Tensor s = slot(p);
      Variable& param = params[p];
      // In place when the parameter's gradient is its own (no copy, no allocation); a fresh
      // tensor when it has none or shares its storage with something the caller holds.
      if (param.grad().defined() && param.grad().owns_storage_alone()) {
        Tensor g = param.grad();
        g.copy_(s);
      } else {
        param.set_grad(s.clone().reshape(param.shape()));
      }
    }
    reset_step();
  }
};

namespace {

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// One line per item: the options, then one line per parameter "i: dtype[shape] (name)". The
// part before " (" must agree across ranks; names are only for the message.
std::vector<std::string> describe_registration(const std::vector<Variable>& params,
                                               const GradientReducerOptions& o) {
  std::vector<std::string> lines;
  lines.push_back(detail::str("bucket_cap_bytes=", o.bucket_cap_bytes, " reduce_op=",
                      reduce_op_name(o.reduce_op),
                      " find_unused_parameters=", o.find_unused_parameters ? "true" : "false"));
  for (size_t i = 0; i < params.size(); ++i) {
    lines.push_back(detail::str("parameter ", i, ": ", dtype_name(params[i].dtype()),
                        shape_str(params[i].shape()), " (",
                        params[i].name().empty() ? params[i].describe() : params[i].name(), ")"));
  }
  return lines;
}

std::string agreed_part(const std::string& line) { return line.substr(0, line.find(" (")); }

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// What differs between rank 0's registration and `other`'s, in words.
std::string first_difference(const std::vector<std::string>& ref, const std::vector<std::string>& mine,
                             int other) {
  if (agreed_part(ref[0]) != agreed_part(mine[0])) {
    return detail::str("options differ: rank 0 has ", ref[0], ", rank ", other, " has ", mine[0]);
  }
  const size_t n = std::min(ref.size(), mine.size());
  for (size_t i = 1; i < n; ++i) {
    if (agreed_part(ref[i]) != agreed_part(mine[i])) {
      return detail::str("rank 0 has ", ref[i], ", rank ", other, " has ", mine[i]);
    }
  }
  return detail::str("rank 0 registered ", ref.size() - 1, " parameters, rank ", other, " registered ",
             mine.size() - 1);
}

// Collective: every rank learns whether all registrations agree; if not, every rank throws the
// same MismatchError (all of them saw the same fingerprints, so all run the second exchange).
void check_agreement(const std::vector<std::string>& lines, const Group& group) {
  std::string agreed, full;
  for (const std::string& line : lines) {
    agreed += agreed_part(line) + "\n";
    full += line + "\n";
  }
  const uint64_t mine = fnv1a(agreed);
  Tensor fp = empty({1}, DType::Int64);
  std::memcpy(fp.raw_data(), &mine, sizeof mine);
  Tensor all = empty({group.size()}, DType::Int64);
  all_gather(fp, all, group).wait();
  const std::vector<int64_t> prints = all.to_vector<int64_t>();
  std::vector<int> differing;
  for (int r = 1; r < group.size(); ++r) {
    if (prints[r] != prints[0]) differing.push_back(r);
  }
  if (differing.empty()) return;

  Tensor bytes = empty({static_cast<int64_t>(full.size())}, DType::UInt8);
  std::memcpy(bytes.raw_data(), full.data(), full.size());
  Work w = all_gather_v(bytes, group);
  const Tensor gathered = w.output(0);
  const std::vector<int64_t> sizes = w.output(1).to_vector<int64_t>();
  std::vector<std::string> texts;
  const char* base = static_cast<const char*>(gathered.raw_data());
  int64_t at = 0;
  for (int64_t size : sizes) {
    texts.emplace_back(base + at, static_cast<size_t>(size));
    at += size;
  }
  std::string ranks;
  for (int r : differing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  const int first = differing.front();
  FERRY_THROW(MismatchError, "GradientReducer on ", group.describe(),
              ": the ranks registered different parameters (every rank must register the same "
              "dtypes and shapes in the same order, with the same options); rank(s) ", ranks,
              " differ from rank 0; first difference, rank ", first, ": ",
              first_difference(split_lines(texts[0]), split_lines(texts[first]), first));
}

}  // namespace

GradientReducer::GradientReducer(std::vector<Variable> parameters, Group group,
                                 GradientReducerOptions options)
    : state_(std::make_shared<State>()) {
  detail::check_group(group, "GradientReducer");
  FERRY_CHECK(options.reduce_op == ReduceOp::Avg || options.reduce_op == ReduceOp::Sum,
              InvalidArgument, "GradientReducer: reduce_op must be avg or sum, given ",
              reduce_op_name(options.reduce_op));
  std::set<const void*> seen;
  for (size_t i = 0; i < parameters.size(); ++i) {
    const Variable& p = parameters[i];
    FERRY_CHECK(p.defined(), InvalidArgument, "GradientReducer: parameter ", i, " is undefined");
    FERRY_CHECK(p.is_leaf() && p.requires_grad(), InvalidArgument, "GradientReducer: parameter ",
                i, " (", p.describe(), ") must be a leaf that requires grad");
    FERRY_CHECK(is_floating(p.dtype()), InvalidArgument, "GradientReducer: parameter ", i, " (",
                p.describe(), ") is ", dtype_name(p.dtype()), "; gradients are floating");
    FERRY_CHECK(seen.insert(p.impl()).second, InvalidArgument, "GradientReducer: parameter ", i,
                " (", p.describe(), ") is registered twice");
  }
  State& s = *state_;
  s.group = std::move(group);
  s.options = options;
  s.params = std::move(parameters);

  // Before any bucket exists: a rank that disagrees must not get as far as a collective of a
  // different size.
  check_agreement(describe_registration(s.params, options), s.group);

  // Reverse registration order; one open bucket per dtype.
  const int64_t cap = options.bucket_cap_bytes;
  const size_t n = s.params.size();
  s.bucket_of.assign(n, 0);
  s.offset_of.assign(n, 0);
  std::map<DType, size_t> open;
  for (size_t k = n; k-- > 0;) {
    const Variable& p = s.params[k];
    const int64_t bytes = p.numel() * static_cast<int64_t>(dtype_size(p.dtype()));
    auto it = open.find(p.dtype());
    if (it != open.end() && s.buckets[it->second].nbytes + bytes > cap) {
      open.erase(it);
      it = open.end();
    }
    if (it == open.end()) {
      it = open.emplace(p.dtype(), s.buckets.size()).first;
      s.buckets.push_back(GradientBucketInfo{.parameters = {}, .dtype = p.dtype()});
    }
    GradientBucketInfo& bucket = s.buckets[it->second];
    s.bucket_of[k] = it->second;
    s.offset_of[k] = bucket.numel;
    bucket.parameters.push_back(k);
    bucket.numel += p.numel();
    bucket.nbytes += bytes;
    if (cap <= 0 || bucket.nbytes >= cap) open.erase(it);
  }
  for (const GradientBucketInfo& b : s.buckets) s.buffers.push_back(bucket_buffer(b, s.group));
  s.ready.assign(n, 0);
  s.had_grad.assign(n, 0);
  s.waiting.assign(s.buckets.size(), 0);
  s.reset_step();

  for (size_t k = 0; k < n; ++k) {
    std::weak_ptr<State> weak = state_;
    s.params[k].register_post_accumulate_hook([weak, k](Variable&) {
      if (auto state = weak.lock()) state->mark_ready(k);
    });
  }
}

GradientReducer::~GradientReducer() = default;
GradientReducer::GradientReducer(GradientReducer&&) noexcept = default;
GradientReducer& GradientReducer::operator=(GradientReducer&&) noexcept = default;

void GradientReducer::broadcast_parameters(int root) {
  State& s = *state_;
  FERRY_CHECK(root >= 0 && root < s.group.size(), InvalidArgument,
              "GradientReducer::broadcast_parameters: root ", root, " is not a rank of ",
              s.group.describe());
  FERRY_CHECK(s.launched == 0, InvalidArgument,
              "GradientReducer::broadcast_parameters: gradients are being reduced (call finish() "
              "first)");
  // The gradient buffers are free between steps: one broadcast per bucket.
  std::vector<Work> works;
  for (size_t b = 0; b < s.buckets.size(); ++b) {
    if (s.group.rank() == root) {
      for (size_t p : s.buckets[b].parameters) s.slot(p).copy_(s.params[p].value());
    }
    works.push_back(broadcast(s.buffers[b], root, s.group));
  }
  wait_all(works);
  for (size_t p = 0; p < s.params.size(); ++p) {
    Tensor value = s.params[p].value();
    value.copy_(s.slot(p));
  }
}

void GradientReducer::finish() { state_->finish(); }

GradientReducer::NoSyncGuard::NoSyncGuard(GradientReducer& reducer) : state_(reducer.state_) {
  ++state_->no_sync_depth;
}
GradientReducer::NoSyncGuard::~NoSyncGuard() {
  if (state_) --state_->no_sync_depth;
}

bool GradientReducer::syncing() const { return state_->no_sync_depth == 0; }
const std::vector<Variable>& GradientReducer::parameters() const { return state_->params; }
const std::vector<GradientBucketInfo>& GradientReducer::buckets() const { return state_->buckets; }
size_t GradientReducer::buckets_launched() const { return state_->launched; }
const Group& GradientReducer::group() const { return state_->group; }
const GradientReducerOptions& GradientReducer::options() const { return state_->options; }

}  // namespace ferry
