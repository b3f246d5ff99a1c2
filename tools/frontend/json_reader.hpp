#pragma once
// The strict JSON reader lives in topologies/ so that the calibration profile
// loader below the front end can use it; this header keeps the front end's
// includes working.
#include "topologies/json_reader.hpp"
