#include "fleet/server/ui_assets.h"

#include <algorithm>
#include <array>
#include <utility>

namespace ferry::fleet::server_internal {

const UiAsset* FindUiAsset(std::string_view name) {
  if (name.empty() || name.find('/') != std::string_view::npos) return nullptr;
  for (const UiAsset& asset : UiAssets()) {
    if (asset.name == name) return &asset;
  }
  return nullptr;
}

std::string_view UiContentType(std::string_view name) {
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 7> kTypes = {{
      {".html", "text/html; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".svg", "image/svg+xml"},
      {".png", "image/png"},
      {".ico", "image/x-icon"},
      {".json", "application/json"},
  }};
  const size_t dot = name.rfind('.');
  if (dot == std::string_view::npos) return "application/octet-stream";
  const std::string_view extension = name.substr(dot);
  const auto* found = std::find_if(kTypes.begin(), kTypes.end(),
                                   [&](const auto& entry) { return entry.first == extension; });
  return found == kTypes.end() ? std::string_view("application/octet-stream") : found->second;
}

}  // namespace ferry::fleet::server_internal
