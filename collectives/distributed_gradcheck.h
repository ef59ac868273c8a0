// Kept for code that includes the distributed gradcheck by its first path; it lives in
// collectives/differentiable/ now.
#pragma once

#include <ferry/collectives/differentiable/distributed_gradcheck.h>
