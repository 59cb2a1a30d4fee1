// Where motley's shipped files live at run time, found relative to the running executable so that
// no build or install path is compiled in: the data folder `share/motley` (the shipped corpus
// under data/corpus/, the examples under examples/) of the first folder, from the executable's
// own folder upwards, that holds it. The build tree has one (CMake copies the corpus to
// BUILD/share/motley/data/corpus/, for the binary in BUILD and the tests below it) and so does
// an install (`cmake --install build --prefix P`: P/bin/motley, P/share/motley). The environment
// variable MOTLEY_DATA_DIR, when set, names the folder instead.
// Pure functions of the file system and the environment; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace motley {

// The folder of the running executable (/proc/self/exe), or "" when it cannot be read.
std::string ExecutableDir();

// The folders DataDir looks in, in order.
std::vector<std::string> DataDirCandidates();

// The shared data folder (one of DataDirCandidates that exists and holds `probe`, a path
// relative to it), or an error listing where it looked.
Result<std::string> FindDataFile(const std::string& probe);

}  // namespace motley
