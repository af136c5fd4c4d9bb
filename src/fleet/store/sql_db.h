// A small SQL driver interface shared by the SQLite and PostgreSQL back ends,
// so the fleet's job logic (sql_store.cc) is written once. Statements use `?`
// placeholders; the PostgreSQL driver rewrites them to $1..$n. Results are
// materialised (the store reads small row sets).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ferry/base/status.h"

namespace ferry::fleet::sql {

enum class Dialect { kSqlite, kPostgres };

// Bytes that may not be valid text (stored as BLOB / BYTEA).
struct Blob {
  std::string bytes;
};

// A bound parameter or a column value.
using Value = std::variant<std::monostate, int64_t, double, std::string, Blob>;
using Params = std::vector<Value>;

// Lenient accessors: integers, reals and numeric text convert into each other,
// NULL reads as 0 / "".
class Row {
 public:
  explicit Row(std::vector<Value> values) : values_(std::move(values)) {}
  size_t size() const { return values_.size(); }
  bool IsNull(size_t i) const;
  int64_t Int(size_t i) const;
  double Double(size_t i) const;
  std::string Text(size_t i) const;
  std::optional<int64_t> OptInt(size_t i) const;

 private:
  std::vector<Value> values_;
};

struct Rows {
  std::vector<Row> rows;
  int64_t affected = 0;  // rows changed by INSERT/UPDATE/DELETE
  bool empty() const { return rows.empty(); }
  size_t size() const { return rows.size(); }
  const Row& operator[](size_t i) const { return rows[i]; }
};

// What kind of failure the last statement hit: the store retries kRetry
// (SQLITE_BUSY, a serialization failure, a deadlock, a dropped connection)
// and turns kUnique into a conflict where that is the expected outcome.
enum class ErrorKind { kNone, kRetry, kUnique, kOther };

// One connection, used by one thread at a time (between Acquire and release).
class Connection {
 public:
  virtual ~Connection() = default;
  // Runs one statement with `params` bound to its `?` placeholders.
  virtual Result<Rows> Query(std::string_view sql, const Params& params = {}) = 0;
  // BEGIN (IMMEDIATE for SQLite writes; a read-only snapshot for reads).
  virtual Status Begin(bool write) = 0;
  virtual Status Commit() = 0;
  virtual Status Rollback() = 0;
  // The kind of the last failed call since the last successful one.
  ErrorKind last_error() const { return last_error_; }

 protected:
  ErrorKind last_error_ = ErrorKind::kNone;
};

class Database;

// A borrowed connection; goes back to its database when destroyed.
class Lease {
 public:
  Lease(Database* db, Connection* conn, bool write) : db_(db), conn_(conn), write_(write) {}
  Lease(Lease&& other) noexcept : db_(other.db_), conn_(other.conn_), write_(other.write_) {
    other.conn_ = nullptr;
  }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  Lease& operator=(Lease&&) = delete;
  ~Lease();
  Connection& operator*() const { return *conn_; }
  Connection* operator->() const { return conn_; }
  // Drops the connection instead of reusing it (after it broke).
  void Discard() { discard_ = true; }

 private:
  Database* db_;
  Connection* conn_;
  bool write_;
  bool discard_ = false;
};

// A connection pool. Thread-safe.
class Database {
 public:
  virtual ~Database() = default;
  virtual Dialect dialect() const = 0;
  // A connection for one transaction. SQLite hands out its single writer
  // (holding the write lock until the lease ends) or a reader; PostgreSQL
  // hands out a pooled connection either way.
  virtual Result<Lease> Acquire(bool write) = 0;

 protected:
  friend class Lease;
  virtual void Release(Connection* conn, bool write, bool discard) = 0;
};

inline Lease::~Lease() {
  if (conn_ != nullptr) db_->Release(conn_, write_, discard_);
}

// "/path/to/file.db" or ":memory:".
Result<std::unique_ptr<Database>> OpenSqlite(const std::string& path);
// A libpq connection URI or key=value string.
Result<std::unique_ptr<Database>> OpenPostgres(const std::string& conninfo);

// The URL with any password replaced by "***", for error messages.
std::string RedactUrl(std::string_view url);

}  // namespace ferry::fleet::sql
