// The dashboard's files (src/fleet/server/ui/, docs/fleet-dashboard.md),
// embedded in the binary at build time so that `ferry server` serves them
// from wherever it runs, and the headers every /ui answer carries. The
// table itself is generated (ui/embed_ui.cmake writes ui_assets_data.cc).
// Internal to src/fleet/server.
#pragma once

#include <span>
#include <string_view>

namespace ferry::fleet::server_internal {

struct UiAsset {
  std::string_view name;  // the file name under ui/ ("app.js"); never holds '/'
  std::string_view body;
};

// Every embedded file, in the order the build listed them. Static storage,
// safe to call from any thread.
std::span<const UiAsset> UiAssets();

// The asset called `name`, or null when there is none (".." and names with
// '/' never match, so a request cannot reach anything but the table).
const UiAsset* FindUiAsset(std::string_view name);

// The Content-Type of a file name, by its extension (with charset=utf-8 for
// text); application/octet-stream for an extension the dashboard does not use.
std::string_view UiContentType(std::string_view name);

// The Content-Security-Policy of every /ui answer: scripts, styles, images
// and API calls from the server itself only, no inline script or style, no
// framing, no plugins, forms post nowhere.
inline constexpr std::string_view kUiContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

}  // namespace ferry::fleet::server_internal
