// Whether differentiable ops record nodes on the tape. Per thread, so that ranks running as
// threads of one process (the local transport) each have their own mode.
#pragma once

namespace ferry {

bool grad_enabled();

// While alive, ops compute values only and record nothing (torch.no_grad()).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// While alive, recording is on again (inside a NoGradGuard, e.g. in a backward that builds a
// graph of its own).
class EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace ferry
