// Running a node's build command (build.h).
#include "flow/daemon/build.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "flow/daemon/process.h"

namespace ferry::flow::daemon {
namespace {

// Reads what is there; false once the pipe is at its end.
bool Pump(internal::UniqueFd& fd, LineBuffer& buffer, bool from_stderr, NodeOutput& output) {
  char chunk[16384];
  for (;;) {
    const ssize_t count = ::read(fd.get(), chunk, sizeof(chunk));
    if (count > 0) {
      for (const std::string& line :
           buffer.Append(std::string_view(chunk, static_cast<size_t>(count)))) {
        output.Line(from_stderr, "(build) " + line);
      }
      continue;
    }
    if (count < 0 && errno == EINTR) continue;
    if (count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    for (const std::string& line : buffer.Finish()) output.Line(from_stderr, "(build) " + line);
    fd.reset();
    return false;
  }
}

}  // namespace

Status RunBuild(const NodeSpec& node, const std::string& working_directory, NodeOutput& output) {
  if (node.build.empty()) return Status::OK();
  output.Note("build: " + node.build, /*console=*/true);
  std::vector<std::pair<std::string, std::string>> overrides(node.env.begin(), node.env.end());
  SpawnRequest request;
  request.program = "/bin/sh";
  request.argv = {"/bin/sh", "-c", node.build};
  request.env = MergeEnvironment(overrides);
  request.working_directory = working_directory;
  auto child = Spawn(request);
  const std::string what = "node '" + node.id + "': build '" + node.build + "'";
  if (!child.ok()) return Status::Invalid(what + " cannot start: " + child.status().message());

  LineBuffer out_lines;
  LineBuffer err_lines;
  std::optional<ExitStatus> ended;
  while (!ended) {
    std::vector<pollfd> fds;
    if (child->stdout_fd.valid()) fds.push_back({child->stdout_fd.get(), POLLIN, 0});
    if (child->stderr_fd.valid()) fds.push_back({child->stderr_fd.get(), POLLIN, 0});
    // Short waits: a build that leaves a process holding its pipes still ends.
    ::poll(fds.data(), fds.size(), 100);
    if (child->stdout_fd.valid()) Pump(child->stdout_fd, out_lines, false, output);
    if (child->stderr_fd.valid()) Pump(child->stderr_fd, err_lines, true, output);
    auto reaped = TryReap(child->pid);
    if (!reaped.ok()) return Status::Invalid(what + ": " + reaped.status().message());
    ended = *reaped;
  }
  // What the shell wrote just before it exited.
  if (child->stdout_fd.valid()) Pump(child->stdout_fd, out_lines, false, output);
  if (child->stderr_fd.valid()) Pump(child->stderr_fd, err_lines, true, output);
  for (const std::string& line : out_lines.Finish()) output.Line(false, "(build) " + line);
  for (const std::string& line : err_lines.Finish()) output.Line(true, "(build) " + line);
  KillLeftovers(child->pid);
  const ExitStatus status = *ended;
  if (status.success()) {
    output.Note("build finished", /*console=*/false);
    return Status::OK();
  }
  output.Note("build failed: " + status.ToString(), /*console=*/false);
  return Status::Invalid(
      what + " failed (" + status.ToString() + "); nothing was started" +
      (output.log_path().empty() ? "" : "; its output is in " + output.log_path()) +
      " (ferry run --no-build skips builds)");
}

}  // namespace ferry::flow::daemon
