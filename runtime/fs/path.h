// Paths as strings, for code that links LibTorch and so cannot use
// std::filesystem (file_system.h says why): joining, the folder and the last
// name of a path, and lexical normalisation with std::filesystem's rules
// (path_test.cc checks them against libstdc++ on random paths). POSIX paths:
// '/' separates; nothing here touches the disk.
#pragma once

#include <string>

namespace dslaunch::runtime {

// `name` inside `folder`: "a" + "b" is "a/b", "a/" + "b" is "a/b"; an
// absolute `name` or an empty `folder` gives `name`, as std::filesystem's
// operator/ does.
std::string JoinPath(const std::string& folder, const std::string& name);

// The folder holding `path`: "." for a bare name, "/" for a file in the root.
std::string ParentDirectory(const std::string& path);

// The last name of `path`, trailing separators ignored: "/models/llama/"
// gives "llama"; "/" and "" give "".
std::string BaseName(const std::string& path);

// std::filesystem::path::lexically_normal: separators collapsed, "." names
// dropped, "name/.." pairs removed, ".." at the root dropped, a trailing
// separator kept unless the path ends in "..", "." for what becomes empty
// ("" stays ""). Separators alone give "/" (libstdc++ leaves "//" as is).
std::string LexicallyNormal(const std::string& path);

}  // namespace dslaunch::runtime
