// The PostgreSQL driver (libpq): a pool of connections, one per concurrent
// transaction, so HTTP threads never queue behind each other for reads.
// `?` placeholders become $1..$n; parameters travel as text with their type
// (int8, float8, text) except blobs, which travel as binary bytea.
#include <libpq-fe.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "fleet/store/sql_db.h"

namespace ferry::fleet::sql {
namespace {

// Type OIDs from pg_type (stable across PostgreSQL versions).
constexpr Oid kBoolOid = 16;
constexpr Oid kByteaOid = 17;
constexpr Oid kInt8Oid = 20;
constexpr Oid kInt2Oid = 21;
constexpr Oid kInt4Oid = 23;
constexpr Oid kTextOid = 25;
constexpr Oid kOidOid = 26;
constexpr Oid kFloat4Oid = 700;
constexpr Oid kFloat8Oid = 701;

// Rewrites `?` outside quotes and comments to $1, $2, ...
std::string RewritePlaceholders(std::string_view sql) {
  std::string out;
  out.reserve(sql.size() + 16);
  int n = 0;
  char quote = 0;
  for (size_t i = 0; i < sql.size(); ++i) {
    char c = sql[i];
    if (quote != 0) {
      out += c;
      if (c == quote) quote = 0;
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
      out += c;
    } else if (c == '-' && i + 1 < sql.size() && sql[i + 1] == '-') {
      size_t end = sql.find('\n', i);
      if (end == std::string_view::npos) end = sql.size();
      out.append(sql.substr(i, end - i));
      i = end - 1;
    } else if (c == '?') {
      out += '$';
      out += std::to_string(++n);
    } else {
      out += c;
    }
  }
  return out;
}

std::string HexDecodeBytea(const char* text, int length) {
  // Text-format bytea is "\x" followed by hex digits (bytea_output = hex).
  std::string out;
  if (length < 2 || text[0] != '\\' || text[1] != 'x') return std::string(text, length);
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return 0;
  };
  out.reserve((length - 2) / 2);
  for (int i = 2; i + 1 < length; i += 2) {
    out += static_cast<char>(digit(text[i]) << 4 | digit(text[i + 1]));
  }
  return out;
}

ErrorKind ClassifySqlState(const char* state) {
  if (state == nullptr) return ErrorKind::kOther;
  std::string_view s(state);
  if (s == "40001" || s == "40P01") return ErrorKind::kRetry;  // serialization, deadlock
  if (s == "23505") return ErrorKind::kUnique;
  if (s.substr(0, 2) == "08") return ErrorKind::kRetry;  // connection exception
  return ErrorKind::kOther;
}

void IgnoreNotice(void*, const char*) {}

class PgConnection final : public Connection {
 public:
  explicit PgConnection(PGconn* conn) : conn_(conn) {}
  ~PgConnection() override { PQfinish(conn_); }

  bool broken() const { return PQstatus(conn_) != CONNECTION_OK; }

  Result<Rows> Query(std::string_view sql, const Params& params) override {
    last_error_ = ErrorKind::kNone;
    std::string text = RewritePlaceholders(sql);
    const int n = static_cast<int>(params.size());
    std::vector<Oid> types(n, 0);
    std::vector<std::string> storage(n);
    std::vector<const char*> values(n, nullptr);
    std::vector<int> lengths(n, 0);
    std::vector<int> formats(n, 0);
    for (int i = 0; i < n; ++i) {
      std::visit(
          [&](const auto& v) {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, std::monostate>) {
              values[i] = nullptr;
            } else if constexpr (std::is_same_v<T, int64_t>) {
              types[i] = kInt8Oid;
              storage[i] = std::to_string(v);
              values[i] = storage[i].c_str();
            } else if constexpr (std::is_same_v<T, double>) {
              types[i] = kFloat8Oid;
              char buffer[64];
              std::snprintf(buffer, sizeof(buffer), "%.17g", v);
              storage[i] = buffer;
              values[i] = storage[i].c_str();
            } else if constexpr (std::is_same_v<T, std::string>) {
              types[i] = kTextOid;
              values[i] = v.c_str();
            } else {
              types[i] = kByteaOid;
              values[i] = v.bytes.data();
              lengths[i] = static_cast<int>(v.bytes.size());
              formats[i] = 1;
            }
          },
          params[i]);
    }
    PGresult* res = PQexecParams(conn_, text.c_str(), n, types.data(), values.data(),
                                 lengths.data(), formats.data(), 0);
    struct Clear {
      PGresult* res;
      ~Clear() { PQclear(res); }
    } clear{res};
    ExecStatusType status = res != nullptr ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
      const char* state = res != nullptr ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
      last_error_ = broken() ? ErrorKind::kRetry : ClassifySqlState(state);
      std::string message = res != nullptr ? PQresultErrorMessage(res) : PQerrorMessage(conn_);
      while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) {
        message.pop_back();
      }
      return Status::IOError("postgresql: " + message + " (in: " + std::string(sql.substr(0, 200)) +
                             ")");
    }
    Rows out;
    const int rows = PQntuples(res);
    const int columns = PQnfields(res);
    out.rows.reserve(rows);
    for (int r = 0; r < rows; ++r) {
      std::vector<Value> row;
      row.reserve(columns);
      for (int c = 0; c < columns; ++c) {
        if (PQgetisnull(res, r, c)) {
          row.emplace_back(std::monostate{});
          continue;
        }
        const char* v = PQgetvalue(res, r, c);
        int length = PQgetlength(res, r, c);
        switch (PQftype(res, c)) {
          case kInt2Oid:
          case kInt4Oid:
          case kInt8Oid:
          case kOidOid:
            row.emplace_back(static_cast<int64_t>(std::strtoll(v, nullptr, 10)));
            break;
          case kFloat4Oid:
          case kFloat8Oid:
            row.emplace_back(std::strtod(v, nullptr));
            break;
          case kBoolOid:
            row.emplace_back(static_cast<int64_t>(v[0] == 't' ? 1 : 0));
            break;
          case kByteaOid:
            row.emplace_back(Blob{HexDecodeBytea(v, length)});
            break;
          default:
            row.emplace_back(std::string(v, length));
        }
      }
      out.rows.emplace_back(std::move(row));
    }
    const char* tuples = PQcmdTuples(res);
    out.affected = tuples != nullptr && *tuples != '\0' ? std::strtoll(tuples, nullptr, 10) : 0;
    return out;
  }

  Status Begin(bool write) override {
    // Reads get one consistent snapshot; read-only snapshots never fail to
    // serialise. Writes run in READ COMMITTED and lock the rows they decide on.
    return Query(write ? "BEGIN" : "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", {}).status();
  }
  Status Commit() override { return Query("COMMIT", {}).status(); }
  Status Rollback() override {
    ErrorKind kept = last_error_;
    Status st = Status::OK();
    if (PQtransactionStatus(conn_) != PQTRANS_IDLE) st = Query("ROLLBACK", {}).status();
    last_error_ = kept;
    return st;
  }

 private:
  PGconn* conn_;
};

class PgDatabase final : public Database {
 public:
  explicit PgDatabase(std::string conninfo) : conninfo_(std::move(conninfo)) {}

  Dialect dialect() const override { return Dialect::kPostgres; }

  Result<Lease> Acquire(bool write) override {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // Bounded: never more than kMaxConnections open; wait for one back.
      bool got = cv_.wait_for(lock, std::chrono::seconds(30),
                              [&] { return !idle_.empty() || open_ < kMaxConnections; });
      if (!got) return Status::TimedOut("postgresql: no free connection in the pool after 30 s");
      if (!idle_.empty()) {
        Connection* conn = idle_.back().release();
        idle_.pop_back();
        return Lease(this, conn, write);
      }
      ++open_;
    }
    auto conn = Connect();
    if (!conn.ok()) {
      std::lock_guard<std::mutex> lock(mutex_);
      --open_;
      cv_.notify_one();
      return conn.status();
    }
    return Lease(this, conn->release(), write);
  }

  Result<std::unique_ptr<PgConnection>> Connect() {
    PGconn* raw = PQconnectdb(conninfo_.c_str());
    if (raw == nullptr) return Status::OutOfMemory("postgresql: PQconnectdb failed");
    auto conn = std::make_unique<PgConnection>(raw);
    if (PQstatus(raw) != CONNECTION_OK) {
      std::string message = PQerrorMessage(raw);
      while (!message.empty() && message.back() == '\n') message.pop_back();
      return Status::IOError("postgresql: cannot connect to " + RedactUrl(conninfo_) + ": " +
                             message);
    }
    PQsetNoticeProcessor(raw, IgnoreNotice, nullptr);
    return conn;
  }

 protected:
  void Release(Connection* conn, bool write, bool discard) override {
    std::unique_ptr<Connection> owned(conn);
    auto* pg = static_cast<PgConnection*>(conn);
    std::lock_guard<std::mutex> lock(mutex_);
    if (discard || pg->broken()) {
      --open_;
      // One broken connection usually means the server restarted: the idle
      // ones are broken too, so drop them rather than fail on each in turn.
      if (pg->broken()) {
        open_ -= static_cast<int>(idle_.size());
        idle_.clear();
      }
    } else {
      idle_.push_back(std::move(owned));
    }
    cv_.notify_one();
  }

 private:
  static constexpr int kMaxConnections = 16;
  std::string conninfo_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Connection>> idle_;
  int open_ = 0;
};

}  // namespace

Result<std::unique_ptr<Database>> OpenPostgres(const std::string& conninfo) {
  auto db = std::make_unique<PgDatabase>(conninfo);
  // Connect once now so a bad URL fails at open, and keep the connection.
  FERRY_ASSIGN_OR_RAISE(auto lease, db->Acquire(true));
  (void)lease;
  return std::unique_ptr<Database>(std::move(db));
}

}  // namespace ferry::fleet::sql
