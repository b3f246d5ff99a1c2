#pragma once
// Calibration profiles as JSON (the format of calibration/profiles/*.json,
// docs/calibration.md): the strict reader shared by the shipped profiles, a
// scenario's calibration.profiles entries and `trainsim calibrate`, and the
// writer. Every problem names the file and the JSON pointer (InputError).
#include <string>

#include <nlohmann/json.hpp>

#include "calibration/profile.hpp"
#include "topologies/json_reader.hpp"

namespace trainsim {

// Reads a profile object; problems go to the reader's diagnostics.
CalibrationProfile read_profile(ObjectReader& r);

// Reads a profile file with the same strict reader as a scenario's
// calibration.profiles entry. Throws InputError.
CalibrationProfile load_profile_file(const std::string& path);

// The profile in the shipped format: read_profile gives it back unchanged.
// Optional entries absent from the profile read are left out; times and sizes
// carry a unit.
nlohmann::ordered_json profile_to_json(const CalibrationProfile& profile);

// Writes a profile (2-space JSON); throws InputError when the file cannot be written.
void write_profile_file(const nlohmann::ordered_json& profile, const std::string& path);

}  // namespace trainsim
