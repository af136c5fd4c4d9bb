// The first start on an empty store: users "admin" and "agent" and their
// token files (docs/fleet-server.md, "Tokens").
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>

#include "ferry/base/hash.h"
#include "fleet/server/api_tokens.h"
#include "fleet/server/clock.h"
#include "fleet/server/fleet_server.h"
#include "fleet/server/server_log.h"

namespace ferry::fleet::server_internal {

Status WriteFileAtomically(const std::string& path, const std::string& text, mode_t mode) {
  // Unique per call: two threads may write the same path at once.
  static std::atomic<uint64_t> calls{0};
  const std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(calls.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return Status::FromErrno(errno, "cannot create " + tmp);
  ::fchmod(fd, mode);
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return Status::FromErrno(err, "cannot write " + tmp);
    }
    written += static_cast<size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return Status::FromErrno(err, "cannot rename " + tmp + " to " + path);
  }
  return Status::OK();
}

Status Bootstrap(Store& store, const std::string& data_dir) {
  FERRY_ASSIGN_OR_RAISE(int64_t users, store.CountUsers());
  if (users > 0) return Status::OK();
  std::error_code ec;
  std::filesystem::create_directories(data_dir.empty() ? "." : data_dir, ec);
  if (ec) return Status::IOError("cannot create data directory " + data_dir + ": " + ec.message());
  const std::filesystem::path dir(data_dir.empty() ? "." : data_dir);
  FERRY_ASSIGN_OR_RAISE(std::string admin_token, NewToken());
  FERRY_ASSIGN_OR_RAISE(std::string agent_token, NewToken());
  FERRY_RETURN_NOT_OK(WriteFileAtomically((dir / "admin.token").string(), admin_token, 0600));
  FERRY_RETURN_NOT_OK(WriteFileAtomically((dir / "agent.token").string(), agent_token, 0600));
  const int64_t now = NowMs();
  FERRY_ASSIGN_OR_RAISE(int64_t tenant, store.EnsureTenant("default"));
  FERRY_ASSIGN_OR_RAISE(int64_t team, store.EnsureTeam(tenant, "default"));
  FERRY_ASSIGN_OR_RAISE(int64_t admin, store.CreateUser(team, "admin", Role::kPlatformAdmin));
  FERRY_RETURN_NOT_OK(store.AddToken(admin, Sha256Hex(admin_token), "bootstrap", now).status());
  FERRY_ASSIGN_OR_RAISE(int64_t agent, store.CreateUser(team, "agent", Role::kAgent));
  FERRY_RETURN_NOT_OK(store.AddToken(agent, Sha256Hex(agent_token), "bootstrap", now).status());
  ServerLog().Info("bootstrapped; tokens in " + (dir / "admin.token").string() + " and " +
                   (dir / "agent.token").string());
  return Status::OK();
}

}  // namespace ferry::fleet::server_internal
