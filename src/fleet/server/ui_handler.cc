// /ui: the dashboard (docs/fleet-dashboard.md). The pages are static files
// embedded in the binary (ui_assets.h); they call the /v1 API with the
// token the user signs in with, so they see exactly what the API lets that
// token see. Chart.js comes from the Debian package libjs-chart.js, read at
// the path --ui-chart-js names; without it the pages work and draw no charts.
#include <fstream>
#include <iterator>
#include <string>

#include "fleet/server/fleet_server.h"
#include "fleet/server/ui_assets.h"

namespace ferry::fleet::server_internal {

namespace {

// Chart.js is about 200 KB; anything much larger is not the file we expect.
constexpr std::streamsize kMaxVendorBytes = 16 << 20;

void SetUiHeaders(httplib::Response& res) {
  res.set_header("Content-Security-Policy", std::string(kUiContentSecurityPolicy));
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("X-Frame-Options", "DENY");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("Cache-Control", "no-cache");
}

}  // namespace

void FleetServer::RedirectToUi(Call& c) {
  SetUiHeaders(c.res);
  c.res.status = 302;
  c.res.set_header("Location", "/ui/");
}

void FleetServer::ServeUi(Call& c) {
  SetUiHeaders(c.res);
  const std::string name = c.captures.empty() ? "index.html" : c.captures.at(0);
  const UiAsset* asset = FindUiAsset(name);
  if (asset == nullptr) return SendProblem(c, 404, "not-found", "no dashboard file " + name);
  c.res.status = 200;
  c.res.set_content(std::string(asset->body), std::string(UiContentType(name)));
}

void FleetServer::ServeUiVendor(Call& c) {
  SetUiHeaders(c.res);
  const std::string& name = c.captures.at(0);
  if (name != "chart.js") return SendProblem(c, 404, "not-found", "no dashboard file " + name);
  const std::string& path = options_.ui_chart_js;
  if (path.empty()) {
    return SendProblem(c, 404, "not-found", "charts are off (--ui-chart-js is empty)");
  }
  std::ifstream file(path, std::ios::binary);
  std::string body;
  if (file) {
    file.seekg(0, std::ios::end);
    const std::streamsize size = file.tellg();
    file.seekg(0, std::ios::beg);
    if (size > 0 && size <= kMaxVendorBytes) {
      body.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
    }
  }
  if (body.empty()) {
    // The path is for the operator's log, not for anonymous callers.
    LogError("dashboard", Status::IOError("no Chart.js at " + path +
                                          " (install libjs-chart.js or set --ui-chart-js)"));
    return SendProblem(c, 404, "not-found", "the server has no Chart.js; the pages draw no charts");
  }
  c.res.status = 200;
  c.res.set_content(body, std::string(UiContentType(name)));
}

}  // namespace ferry::fleet::server_internal
