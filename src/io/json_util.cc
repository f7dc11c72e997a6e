// Strict JSON parsing (duplicate keys rejected) and small-file reading for index and config files.
#include "io/json_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <set>
#include <vector>

namespace tierflow {

Status ParseJsonStrict(std::string_view text, std::string_view what, nlohmann::json* out) {
  using Json = nlohmann::json;
  // One key set and one name per object being parsed, innermost last.
  std::vector<std::set<std::string>> keys;
  std::vector<std::string> object_names;
  std::string last_key = "";
  std::string duplicate;
  auto callback = [&](int /*depth*/, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
        object_names.push_back(keys.empty() ? std::string() : last_key);
        keys.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        if (!keys.empty()) {
          keys.pop_back();
          object_names.pop_back();
        }
        break;
      case Json::parse_event_t::key:
        last_key = parsed.get<std::string>();
        if (!keys.empty() && !keys.back().insert(last_key).second && duplicate.empty()) {
          duplicate = "key \"" + last_key + "\" appears twice " +
                      (keys.size() == 1 ? std::string("at top level")
                                        : "inside \"" + object_names.back() + "\"");
        }
        break;
      default:
        break;
    }
    return true;
  };
  try {
    *out = Json::parse(text.begin(), text.end(), callback);
  } catch (const Json::exception& e) {
    return DataLossError(std::string(what) + ": not valid JSON (" + e.what() + ")");
  }
  if (!duplicate.empty()) return DataLossError(std::string(what) + ": " + duplicate);
  return Status::Ok();
}

StatusOr<std::string> ReadSmallFile(const std::string& path, size_t max_num_bytes) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return ErrnoStatus(errno, "open " + path);
  std::string contents;
  Status s;
  char buf[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      s = ErrnoStatus(errno, "read " + path);
      break;
    }
    if (n == 0) break;
    if (contents.size() + static_cast<size_t>(n) > max_num_bytes) {
      s = InvalidArgumentError(path + " is larger than " + std::to_string(max_num_bytes) +
                               " bytes; it is not the small JSON file expected here");
      break;
    }
    contents.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  if (!s.ok()) return s;
  return contents;
}

}  // namespace tierflow
