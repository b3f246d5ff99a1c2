#pragma once
// The quantity parser lives in topologies/ (with the strict JSON reader that
// uses it); this header keeps the front end's includes working.
#include "topologies/units.hpp"
