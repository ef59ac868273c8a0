// Kept for code that includes the differentiable collectives by their first path; they live in
// collectives/differentiable/ now.
#pragma once

#include <ferry/collectives/differentiable/differentiable.h>
