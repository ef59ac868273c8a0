#include "spmd_case.h"

#include <string>
#include <utility>

namespace ftest {

bool register_spmd_case(const char* name, const char* tags, SpmdBody body,
                        SpmdSkipReason skip_reason) {
  spmd::Case c{name, tags, [body](Group& g) {
                      Ctx ctx(g.size());
                      body(g, ctx);
                      std::string why;
                      for (const std::string& m : ctx.messages()) why += "\n  " + m;
                      if (ctx.failures() > ctx.messages().size())
                        why += "\n  (" + std::to_string(ctx.failures() - ctx.messages().size()) +
                               " more failures not shown)";
                      if (ctx.failures() > 0)
                        throw spmd::Failed(std::to_string(ctx.failures()) + " check(s) failed:" + why);
                      if (ctx.checks() == 0) throw spmd::Failed("the case made no checks");
                    }};
  if (skip_reason != nullptr) c.skip_reason = skip_reason;
  return spmd::add(std::move(c));
}

}  // namespace ftest
