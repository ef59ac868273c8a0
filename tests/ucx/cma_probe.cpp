#include "tests/ucx/cma_probe.h"

#include <ferry/backends/ucx/ucx_cma.h>
#include <ferry/ferry.h>

#include <unistd.h>

#include <cstring>
#include <string>

namespace ucxtest {

int cma_unreadable_peers(const ferry::Group& g) {
  using namespace ferry;
  // Per rank: pid, the token's address, its 16 bytes.
  constexpr int64_t kWords = 4;
  const detail::CmaToken& mine = detail::cma_self_token();
  Tensor in = empty({kWords}, DType::Int64), all = empty({kWords * g.size()}, DType::Int64);
  int64_t* w = in.data<int64_t>();
  w[0] = static_cast<int64_t>(getpid());
  std::memcpy(&w[1], &mine.address, sizeof mine.address);
  std::memcpy(&w[2], mine.value, sizeof mine.value);
  all_gather(in, all, g).wait();
  int unreadable = 0;
  for (int r = 0; r < g.size(); ++r) {
    if (r == g.rank()) continue;
    const int64_t* p = all.data<int64_t>() + kWords * r;
    detail::CmaToken token;
    std::memcpy(&token.address, &p[1], sizeof token.address);
    std::memcpy(token.value, &p[2], sizeof token.value);
    std::string why;
    if (!detail::cma_token_matches(static_cast<uint32_t>(p[0]), token, why)) ++unreadable;
  }
  return unreadable;
}

}  // namespace ucxtest
