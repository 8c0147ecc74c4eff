// SPDX-License-Identifier: Apache-2.0
//
// Status and Result<T>: how pmtree reports environmental failures.
//
// Expected outcomes of an operation (a key that is absent, a key that is
// already present) are ordinary return values, never a Status.  A Status
// reports something the caller did not ask for: a pool that cannot be opened,
// a corrupt or foreign file, a full pool, an invalid option, a broken
// invariant found by Verify().  Its message names the structure, the offset
// and the violated rule where there is one.
//
// An OK Status holds no allocation, so returning one costs a null pointer.
// No exception crosses the library boundary.

#ifndef PMTREE_STATUS_H_
#define PMTREE_STATUS_H_

#include <cassert>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace pmtree {

class [[nodiscard]] Status {
 public:
  enum class Code : unsigned char {
    kOk = 0,
    kInvalidArgument,  // a bad option, key too long, unknown tree name
    kNotFound,         // a file or object that must exist does not
    kIoError,          // the OS refused: open, mmap, ftruncate, msync
    kCorruption,       // bytes that cannot be what we wrote (bad magic, checksum, broken pointer)
    kIncompatible,     // a valid pool of another format version or another tree
    kOutOfSpace,       // the pool has no room; the structure stays consistent
    kNotSupported,     // the operation is not offered by this tree / backend
    kBusy,             // the pool is open elsewhere or a precondition on state fails
    kInternal,         // an invariant of ours is broken (Verify() failures use kCorruption)
  };

  Status() noexcept = default;
  Status(const Status& other) : rep_(other.rep_ ? std::make_unique<Rep>(*other.rep_) : nullptr) {}
  Status& operator=(const Status& other) {
    if (this != &other) rep_ = other.rep_ ? std::make_unique<Rep>(*other.rep_) : nullptr;
    return *this;
  }
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) { return Status(Code::kInvalidArgument, std::move(msg)); }
  static Status NotFound(std::string msg) { return Status(Code::kNotFound, std::move(msg)); }
  static Status IoError(std::string msg) { return Status(Code::kIoError, std::move(msg)); }
  static Status Corruption(std::string msg) { return Status(Code::kCorruption, std::move(msg)); }
  static Status Incompatible(std::string msg) { return Status(Code::kIncompatible, std::move(msg)); }
  static Status OutOfSpace(std::string msg) { return Status(Code::kOutOfSpace, std::move(msg)); }
  static Status NotSupported(std::string msg) { return Status(Code::kNotSupported, std::move(msg)); }
  static Status Busy(std::string msg) { return Status(Code::kBusy, std::move(msg)); }
  static Status Internal(std::string msg) { return Status(Code::kInternal, std::move(msg)); }

  bool ok() const { return rep_ == nullptr; }
  Code code() const { return rep_ ? rep_->code : Code::kOk; }
  std::string_view message() const { return rep_ ? std::string_view(rep_->msg) : std::string_view(); }
  bool IsOutOfSpace() const { return code() == Code::kOutOfSpace; }

  // "Corruption: leaf at offset 0x4000: keys not sorted (invariant 2)".
  std::string ToString() const;
  static std::string_view CodeName(Code c);

  // Prefixes the message with context, keeping the code: "opening /dev/shm/x: ...".
  Status Annotate(std::string_view context) const;

 private:
  struct Rep {
    Code code;
    std::string msg;
  };
  Status(Code code, std::string msg) : rep_(std::make_unique<Rep>(Rep{code, std::move(msg)})) {}
  std::unique_ptr<Rep> rep_;
};

// A value or the Status explaining why there is none.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}              // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {       // NOLINT
    assert(!status_.ok() && "Result built from an OK Status carries no value");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & {
    assert(ok());
    return *value_;
  }
  const T& value() const& {
    assert(ok());
    return *value_;
  }
  T&& value() && {
    assert(ok());
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  T& operator*() { return value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace pmtree

// Returns from the enclosing function when `expr` (a Status) is not OK.
#define PMTREE_RETURN_IF_ERROR(expr)          \
  do {                                        \
    ::pmtree::Status pmtree_s_ = (expr);      \
    if (!pmtree_s_.ok()) return pmtree_s_;    \
  } while (0)

#define PMTREE_CONCAT_INNER_(a, b) a##b
#define PMTREE_CONCAT_(a, b) PMTREE_CONCAT_INNER_(a, b)
// `PMTREE_ASSIGN_OR_RETURN(auto x, F());` binds the value or returns the Status.
#define PMTREE_ASSIGN_OR_RETURN(lhs, rexpr)                         \
  auto PMTREE_CONCAT_(pmtree_r_, __LINE__) = (rexpr);               \
  if (!PMTREE_CONCAT_(pmtree_r_, __LINE__).ok())                    \
    return PMTREE_CONCAT_(pmtree_r_, __LINE__).status();            \
  lhs = std::move(PMTREE_CONCAT_(pmtree_r_, __LINE__)).value()

#endif  // PMTREE_STATUS_H_
