// Where dslaunch finds the binaries it runs (dsagent, dsrank).
#pragma once

#include <string>

namespace dslaunch {

// `name` beside this executable (the build tree, an install prefix) when it
// is there and executable; otherwise `name` itself, found in PATH.
std::string BinaryBesideThisOne(const std::string& name);

}  // namespace dslaunch
