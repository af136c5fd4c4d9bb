// The SQLite driver: one writer connection behind a mutex (SQLite allows one
// writer at a time anyway) and a pool of reader connections for file
// databases, which WAL mode lets read while the writer writes. Each
// connection caches its prepared statements.
#include <sqlite3.h>

#include <condition_variable>
#include <mutex>
#include <unordered_map>

#include "fleet/store/sql_db.h"

namespace ferry::fleet::sql {
namespace {

ErrorKind Classify(int extended_code) {
  int primary = extended_code & 0xff;
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) return ErrorKind::kRetry;
  if (extended_code == SQLITE_CONSTRAINT_UNIQUE || extended_code == SQLITE_CONSTRAINT_PRIMARYKEY) {
    return ErrorKind::kUnique;
  }
  return ErrorKind::kOther;
}

class SqliteConnection final : public Connection {
 public:
  explicit SqliteConnection(sqlite3* db) : db_(db) {}
  ~SqliteConnection() override {
    for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
    sqlite3_close_v2(db_);
  }

  Result<Rows> Query(std::string_view sql, const Params& params) override {
    last_error_ = ErrorKind::kNone;
    sqlite3_stmt* stmt = nullptr;
    std::string key(sql);
    bool cached = true;
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      stmt = it->second;
    } else {
      // Statements built from many filter combinations could grow the
      // cache without bound: past the cap, prepare them for one use.
      cached = cache_.size() < kMaxCached;
      int rc = sqlite3_prepare_v3(db_, key.data(), static_cast<int>(key.size()),
                                  cached ? SQLITE_PREPARE_PERSISTENT : 0, &stmt, nullptr);
      if (rc != SQLITE_OK) return Fail(rc, "prepare", sql);
      if (stmt == nullptr) return Rows{};  // only whitespace or a comment
      if (cached) cache_.emplace(key, stmt);
    }
    // Leaves the statement ready for its next use (or finalised) whatever
    // happens below.
    struct Resetter {
      sqlite3_stmt* stmt;
      bool cached;
      ~Resetter() {
        if (!cached) {
          sqlite3_finalize(stmt);
          return;
        }
        sqlite3_reset(stmt);
        sqlite3_clear_bindings(stmt);
      }
    } resetter{stmt, cached};

    if (static_cast<int>(params.size()) != sqlite3_bind_parameter_count(stmt)) {
      last_error_ = ErrorKind::kOther;
      return Status::Invalid("sqlite: statement expects " +
                             std::to_string(sqlite3_bind_parameter_count(stmt)) +
                             " parameters, got " + std::to_string(params.size()) + ": " + key);
    }
    for (size_t i = 0; i < params.size(); ++i) {
      int index = static_cast<int>(i) + 1;
      int rc = std::visit(
          [&](const auto& v) -> int {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, std::monostate>) {
              return sqlite3_bind_null(stmt, index);
            } else if constexpr (std::is_same_v<T, int64_t>) {
              return sqlite3_bind_int64(stmt, index, v);
            } else if constexpr (std::is_same_v<T, double>) {
              return sqlite3_bind_double(stmt, index, v);
            } else if constexpr (std::is_same_v<T, std::string>) {
              return sqlite3_bind_text64(stmt, index, v.data(), v.size(), SQLITE_TRANSIENT,
                                         SQLITE_UTF8);
            } else {
              return sqlite3_bind_blob64(stmt, index, v.bytes.data(), v.bytes.size(),
                                         SQLITE_TRANSIENT);
            }
          },
          params[i]);
      if (rc != SQLITE_OK) return Fail(rc, "bind", sql);
    }

    Rows out;
    const int columns = sqlite3_column_count(stmt);
    while (true) {
      int rc = sqlite3_step(stmt);
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) return Fail(rc, "step", sql);
      std::vector<Value> values;
      values.reserve(columns);
      for (int c = 0; c < columns; ++c) {
        switch (sqlite3_column_type(stmt, c)) {
          case SQLITE_INTEGER:
            values.emplace_back(static_cast<int64_t>(sqlite3_column_int64(stmt, c)));
            break;
          case SQLITE_FLOAT:
            values.emplace_back(sqlite3_column_double(stmt, c));
            break;
          case SQLITE_TEXT: {
            const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt, c));
            values.emplace_back(std::string(text, sqlite3_column_bytes(stmt, c)));
            break;
          }
          case SQLITE_BLOB: {
            const auto* data = static_cast<const char*>(sqlite3_column_blob(stmt, c));
            int size = sqlite3_column_bytes(stmt, c);
            values.emplace_back(Blob{data == nullptr ? std::string() : std::string(data, size)});
            break;
          }
          default:
            values.emplace_back(std::monostate{});
        }
      }
      out.rows.emplace_back(std::move(values));
    }
    out.affected = sqlite3_changes64(db_);
    return out;
  }

  Status Begin(bool write) override { return Simple(write ? "BEGIN IMMEDIATE" : "BEGIN"); }
  Status Commit() override { return Simple("COMMIT"); }
  Status Rollback() override {
    if (sqlite3_get_autocommit(db_)) return Status::OK();  // nothing open
    return Simple("ROLLBACK");
  }

  Status Simple(const char* sql) {
    last_error_ = ErrorKind::kNone;
    char* error = nullptr;
    int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &error);
    if (rc == SQLITE_OK) return Status::OK();
    std::string message = error != nullptr ? error : sqlite3_errstr(rc);
    sqlite3_free(error);
    last_error_ = Classify(sqlite3_extended_errcode(db_));
    return Status::IOError(std::string("sqlite: ") + sql + ": " + message);
  }

 private:
  Status Fail(int rc, const char* step, std::string_view sql) {
    int extended = sqlite3_extended_errcode(db_);
    last_error_ = Classify(extended != 0 ? extended : rc);
    std::string message = "sqlite: " + std::string(step) + " failed: " + sqlite3_errmsg(db_) +
                          " (in: " + std::string(sql.substr(0, 200)) + ")";
    return Status::IOError(std::move(message));
  }

  static constexpr size_t kMaxCached = 256;
  sqlite3* db_;
  std::unordered_map<std::string, sqlite3_stmt*> cache_;
};

Result<std::unique_ptr<SqliteConnection>> OpenConnection(const std::string& path, bool reader) {
  sqlite3* db = nullptr;
  int flags = SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_READWRITE | (reader ? 0 : SQLITE_OPEN_CREATE);
  int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close_v2(db);
    return Status::IOError("sqlite: cannot open " + path + ": " + message);
  }
  auto conn = std::make_unique<SqliteConnection>(db);
  // busy_timeout first: switching to WAL itself may wait for another process.
  FERRY_RETURN_NOT_OK(conn->Simple("PRAGMA busy_timeout = 5000"));
  if (!reader && path != ":memory:") {
    FERRY_RETURN_NOT_OK(conn->Simple("PRAGMA journal_mode = WAL"));
  }
  FERRY_RETURN_NOT_OK(conn->Simple("PRAGMA synchronous = NORMAL"));
  FERRY_RETURN_NOT_OK(conn->Simple("PRAGMA foreign_keys = ON"));
  if (reader) FERRY_RETURN_NOT_OK(conn->Simple("PRAGMA query_only = 1"));
  return conn;
}

class SqliteDatabase final : public Database {
 public:
  SqliteDatabase(std::string path, std::unique_ptr<SqliteConnection> writer)
      : path_(std::move(path)), writer_(std::move(writer)) {}

  Dialect dialect() const override { return Dialect::kSqlite; }

  Result<Lease> Acquire(bool write) override {
    // A private in-memory database has one connection only.
    if (write || path_ == ":memory:") {
      writer_mutex_.lock();
      return Lease(this, writer_.get(), true);
    }
    {
      std::lock_guard<std::mutex> lock(readers_mutex_);
      if (!idle_readers_.empty()) {
        Connection* conn = idle_readers_.back().release();
        idle_readers_.pop_back();
        return Lease(this, conn, false);
      }
    }
    FERRY_ASSIGN_OR_RAISE(auto conn, OpenConnection(path_, /*reader=*/true));
    return Lease(this, conn.release(), false);
  }

 protected:
  void Release(Connection* conn, bool write, bool discard) override {
    if (write) {
      writer_mutex_.unlock();
      return;
    }
    std::unique_ptr<Connection> owned(conn);
    if (discard) return;
    std::lock_guard<std::mutex> lock(readers_mutex_);
    if (idle_readers_.size() < kMaxIdleReaders) idle_readers_.push_back(std::move(owned));
  }

 private:
  static constexpr size_t kMaxIdleReaders = 8;
  std::string path_;
  std::unique_ptr<SqliteConnection> writer_;
  std::mutex writer_mutex_;
  std::mutex readers_mutex_;
  std::vector<std::unique_ptr<Connection>> idle_readers_;
};

}  // namespace

Result<std::unique_ptr<Database>> OpenSqlite(const std::string& path) {
  if (path.empty()) return Status::Invalid("sqlite: empty database path");
  FERRY_ASSIGN_OR_RAISE(auto writer, OpenConnection(path, /*reader=*/false));
  return std::unique_ptr<Database>(new SqliteDatabase(path, std::move(writer)));
}

}  // namespace ferry::fleet::sql
