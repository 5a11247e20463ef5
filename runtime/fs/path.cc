#include "runtime/fs/path.h"

#include <vector>

namespace dslaunch::runtime {

std::string JoinPath(const std::string& folder, const std::string& name) {
  if (folder.empty() || (!name.empty() && name.front() == '/')) return name;
  if (folder.back() == '/') return folder + name;
  return folder + "/" + name;
}

std::string ParentDirectory(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string BaseName(const std::string& path) {
  const size_t end = path.find_last_not_of('/');
  if (end == std::string::npos) return "";
  const size_t slash = path.find_last_of('/', end);
  return path.substr(slash == std::string::npos ? 0 : slash + 1, end - (slash == std::string::npos ? 0 : slash + 1) + 1);
}

std::string LexicallyNormal(const std::string& path) {
  if (path.empty()) return path;
  const bool absolute = path.front() == '/';
  std::vector<std::string> names;
  // Whether the result ends in a separator: after a name followed by one,
  // after a dropped "." or a removed "name/.." that leave names before them.
  bool trailing_separator = false;
  size_t begin = 0;
  while (begin < path.size()) {
    const size_t slash = path.find('/', begin);
    const size_t end = slash == std::string::npos ? path.size() : slash;
    const bool followed_by_separator = end < path.size();
    if (end > begin) {
      const std::string name = path.substr(begin, end - begin);
      if (name == ".") {
        trailing_separator = !names.empty();
      } else if (name == "..") {
        if (!names.empty() && names.back() != "..") {
          names.pop_back();
          trailing_separator = !names.empty();
        } else if (!absolute) {
          names.push_back(name);
          trailing_separator = false;  // never after a final ".."
        }
      } else {
        names.push_back(name);
        trailing_separator = followed_by_separator;
      }
    }
    begin = end + 1;
  }
  std::string normal = absolute ? "/" : "";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) normal += '/';
    normal += names[i];
  }
  if (trailing_separator && !names.empty() && names.back() != "..") normal += '/';
  return normal.empty() ? "." : normal;
}

}  // namespace dslaunch::runtime
