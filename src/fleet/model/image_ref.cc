// The grammar of image references (image_ref.h), after the distribution
// project's reference format, restricted to references that name their
// registry and to sha256 digests.
#include "ferry/fleet/image_ref.h"

#include <cctype>
#include <string>

namespace ferry::fleet {
namespace {

constexpr std::string_view kExample = "e.g. registry.example.com/team/app:1";

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool IsAlnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

// One path component: [a-z0-9]+ joined by '.', '_', '__' or runs of '-'.
bool ValidComponent(std::string_view part) {
  if (part.empty() || !IsLowerAlnum(part.front()) || !IsLowerAlnum(part.back())) return false;
  for (size_t index = 0; index < part.size(); ++index) {
    const char c = part[index];
    if (IsLowerAlnum(c)) continue;
    if (c == '-') continue;  // runs of '-' are allowed
    if (c != '.' && c != '_') return false;
    // A separator sits between alphanumerics; only "__" may double.
    const char next = part[index + 1];
    if (c == '_' && next == '_' && index + 2 < part.size() && IsLowerAlnum(part[index + 2])) {
      ++index;
      continue;
    }
    if (!IsLowerAlnum(next) || !IsLowerAlnum(part[index - 1])) return false;
  }
  return true;
}

bool ValidPort(std::string_view port) {
  if (port.empty() || port.size() > 5) return false;
  int value = 0;
  for (char c : port) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  return value >= 1 && value <= 65535;
}

// host[:port]: DNS labels, or an IPv6 address in brackets.
bool ValidHost(std::string_view host) {
  std::string_view name = host;
  if (!host.empty() && host.front() == '[') {
    const size_t close = host.find(']');
    if (close == std::string_view::npos || close < 3) return false;
    for (char c : host.substr(1, close - 1)) {
      if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':') return false;
    }
    const std::string_view rest = host.substr(close + 1);
    return rest.empty() || (rest.front() == ':' && ValidPort(rest.substr(1)));
  }
  if (const size_t colon = host.find(':'); colon != std::string_view::npos) {
    if (!ValidPort(host.substr(colon + 1))) return false;
    name = host.substr(0, colon);
  }
  if (name.empty() || name.size() > 253) return false;
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string_view::npos) dot = name.size();
    const std::string_view label = name.substr(start, dot - start);
    if (label.empty() || label.size() > 63 || !IsAlnum(label.front()) || !IsAlnum(label.back())) {
      return false;
    }
    for (char c : label) {
      if (!IsAlnum(c) && c != '-') return false;
    }
    start = dot + 1;
  }
  return true;
}

bool ValidTag(std::string_view tag) {
  if (tag.empty() || tag.size() > ImageRef::kMaxTagChars) return false;
  if (!IsAlnum(tag.front()) && tag.front() != '_') return false;
  for (char c : tag) {
    if (!IsAlnum(c) && c != '_' && c != '.' && c != '-') return false;
  }
  return true;
}

bool ValidDigest(std::string_view digest) {
  constexpr std::string_view kPrefix = "sha256:";
  if (digest.size() != kPrefix.size() + 64 || digest.substr(0, kPrefix.size()) != kPrefix) {
    return false;
  }
  for (char c : digest.substr(kPrefix.size())) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

Status Bad(std::string_view what) { return Status::Invalid(std::string(what)); }

}  // namespace

std::string ImageRef::Pinned(std::string_view with_digest) const {
  if (with_digest.empty()) return registry + "/" + repository + ":" + tag;
  return registry + "/" + repository + "@" + std::string(with_digest);
}

bool ImageRef::IsLoopback() const {
  std::string_view host = registry;
  if (host.rfind("[::1]", 0) == 0) return true;
  host = host.substr(0, host.find(':'));
  return host == "localhost" || host.rfind("127.", 0) == 0;
}

Result<ImageRef> ParseImageRef(std::string_view text) {
  if (text.empty()) return Bad("must not be empty");
  if (text.size() > ImageRef::kMaxChars) {
    return Bad("must be at most " + std::to_string(ImageRef::kMaxChars) + " characters");
  }
  for (char c : text) {
    if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
      return Bad("must not contain spaces or control characters");
    }
  }
  ImageRef out;
  std::string_view name = text;
  if (const size_t at = text.find('@'); at != std::string_view::npos) {
    out.digest = std::string(text.substr(at + 1));
    name = text.substr(0, at);
    if (!ValidDigest(out.digest)) {
      return Bad("the digest after '@' must be \"sha256:\" and 64 lower-case hex digits");
    }
  }
  const size_t slash = name.find('/');
  const std::string_view host = slash == std::string_view::npos ? name : name.substr(0, slash);
  const bool names_registry =
      slash != std::string_view::npos &&
      (host.find('.') != std::string_view::npos || host.find(':') != std::string_view::npos ||
       host == "localhost" || host.front() == '[');
  if (!names_registry) {
    return Bad("must name its registry (host[:port]/path[:tag]), " + std::string(kExample));
  }
  if (!ValidHost(host)) {
    return Bad("the registry '" + std::string(host) +
               "' is not a host name or [IPv6] address with an optional port");
  }
  out.registry = std::string(host);
  std::string_view path = name.substr(slash + 1);
  if (const size_t colon = path.rfind(':'); colon != std::string_view::npos) {
    out.tag = std::string(path.substr(colon + 1));
    path = path.substr(0, colon);
    if (!ValidTag(out.tag)) {
      return Bad("the tag '" + out.tag +
                 "' must be 1 to 128 of [A-Za-z0-9_.-], not starting with '.' or '-'");
    }
  }
  if (path.empty())
    return Bad("needs a repository path after the registry, " + std::string(kExample));
  size_t start = 0;
  while (start <= path.size()) {
    size_t next = path.find('/', start);
    if (next == std::string_view::npos) next = path.size();
    const std::string_view component = path.substr(start, next - start);
    if (!ValidComponent(component)) {
      return Bad("the repository path component '" + std::string(component) +
                 "' must be lower-case letters and digits, joined by '.', '_', '__' or '-'");
    }
    start = next + 1;
  }
  out.repository = std::string(path);
  if (out.tag.empty() && out.digest.empty()) out.tag = "latest";
  return out;
}

}  // namespace ferry::fleet
