// SPDX-License-Identifier: Apache-2.0
//
// Keyspace: Redis's data types on one kv::Store -- strings, hashes and
// sorted sets -- and the tree-key encoding that keeps them apart.
//
// ENCODING (docs/server.md has it as a byte table).  Every tree key starts
// with a namespace byte:
//   'k' + K                        the head of user key K:
//                                    a plain value 's' + V   string K = V
//                                    a field record {f: v}   small hash K (at most
//                                                            kSmallHashFields fields)
//                                    a plain value 'h' + n   large hash K with n
//                                                            fields (8 B BE)
//                                    a plain value 'z' + n   sorted set K with n
//                                                            members (8 B BE)
//   'h' + len(K) + K + F           field F of large hash K -> its value
//   'z' + len(K) + K + 'm' + M     member M of sorted set K -> its score (8 B)
//   'z' + len(K) + K + 's' + S + M score index: S = the score's order-preserving
//                                  8 bytes, value empty; a tree range scan is
//                                  ZRANGEBYSCORE
// len(K) is 4 bytes big-endian, so one set's keys are a contiguous range that
// no other set's keys enter.  User keys live only under 'k': DBSIZE, SCAN and
// RANGE iterate that range and never see members or the score index.
//
// ATOMICITY AND ISOLATION.  A command that reads before it writes (INCR,
// HSET, ZADD, SET NX, ...) holds the striped mutexes of its keys, so two such
// commands on one key run one after the other; every command's writes are one
// store call or one WriteBatch, so a crash keeps all of a command or none of
// it (ZADD's members, score index and count together; MSET's keys together).
// Reads take no lock.  DURABILITY: each method returns after the store call
// returned, i.e. after the write is durable (kv.h); given a Txn, its writes
// become durable when the Txn commits.
//
// VISIBILITY.  The server runs the store with deferred visibility (kv.h):
// a write may return before it is visible.  So point reads here are
// unpublished reads (the newest complete write of the key): a command that
// holds a key's lock sees the write that released it (two INCRs never read
// the same value), and any reply built on a write not yet visible raises the
// thread's acknowledgement timestamp, which the event loop waits for before
// it sends (server.h).  Iterator reads (member deletes, FLUSHALL) and EXEC's
// transaction snapshot first wait for every issued write to be visible
// (kv::Store::AwaitPublished); the iterating reads of commands (SCAN, the
// range read, DBSIZE, a large hash's HGETALL, ZRANGEBYSCORE) wait for the
// writes issued before them on their own connection
// (kv::Store::AwaitThreadTimestamp), so a pipelined SET then SCAN sees the
// SET, as commands of one connection run in order.
//
// ERRORS.  Methods return the store's Status (OutOfSpace: nothing changed)
// or Incompatible for a key of the wrong type (its message is Redis's
// WRONGTYPE text), or InvalidArgument with a Redis error text.

#ifndef PMTREE_SERVER_KEYSPACE_H_
#define PMTREE_SERVER_KEYSPACE_H_

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pmtree/kv.h"
#include "trees/common/version_lock.h"

namespace pmtree::server {

enum class KeyType { kNone, kString, kHash, kZset };

// The WRONGTYPE status (Incompatible, with Redis's message).
Status WrongType();

// A score bound of ZRANGEBYSCORE: value, exclusive with '('.
struct ScoreBound {
  double value = 0;
  bool exclusive = false;
};

// EXEC's transaction: the Keyspace methods that take a Txn* read its
// snapshot plus its own writes and buffer their writes in it; Commit makes
// them all durable at once, or none (kv::Transaction): the string, hash
// and sorted-set writes alike (a small hash's field record is one of the
// transaction's writes).  The caller holds the keys' locks
// (Keyspace::KeyLocks) for the transaction's lifetime, so the keys' member
// ranges cannot change under it.
class Txn {
 public:
  explicit Txn(kv::Store* store) : store_(store), t_(store->BeginTransaction()) {}
  Result<bool> Get(std::string_view key, std::string* value) { return t_->Get(key, value); }
  Result<bool> GetFields(std::string_view key, const std::vector<std::string>& names, kv::FieldMap* out) {
    return t_->GetFields(key, names, out);
  }
  Status Put(std::string_view key, std::string_view value);
  Status PutFields(std::string_view key, const kv::FieldMap& fields);
  Status Delete(std::string_view key);
  Status Write(const kv::WriteBatch& batch);
  // Every key in [prefix, end) as the transaction sees it.
  Status ForEachKey(std::string_view prefix, const std::string& end, const std::function<void(std::string_view)>& fn);
  Status Commit() { return t_->Commit(); }

 private:
  kv::Store* store_;
  std::unique_ptr<kv::Transaction> t_;
  std::map<std::string, bool, std::less<>> written_;  // key -> put (true) or deleted (false)
};

class Keyspace {
 public:
  explicit Keyspace(kv::Store* store) : store_(store) {}

  // ---- encoding (public for the tests and the docs) ----
  static constexpr char kUserPrefix = 'k';
  static constexpr char kZsetPrefix = 'z';
  static constexpr char kHashPrefix = 'h';
  // A hash lives in one field record (one read for HGETALL, YCSB's shape)
  // up to this many fields; past it, each field is a tree key, so HSET on a
  // hash of 100,000 fields (redis-benchmark's) costs one field's write.
  static constexpr uint64_t kSmallHashFields = 64;
  static std::string HeadKey(std::string_view key);
  static std::string MemberPrefix(char ns, std::string_view key);
  static std::string ZsetPrefix(std::string_view key);
  static std::string HashFieldKey(std::string_view key, std::string_view field);
  static std::string PrefixEnd(std::string prefix);
  static std::string ZsetMemberKey(std::string_view key, std::string_view member);
  static std::string ZsetScoreKey(std::string_view key, double score, std::string_view member);
  // Order-preserving 8 bytes: a < b  <=>  EncodeScore(a) < EncodeScore(b) (bytewise).
  static std::string EncodeScore(double score);
  static double DecodeScore(std::string_view bytes);
  // The longest user key (its head key is a tree key of kMaxKeyBytes).
  static constexpr size_t kMaxUserKeyBytes = kMaxKeyBytes - 1;

  // ---- generic ----
  Status Type(std::string_view key, KeyType* type, Txn* txn = nullptr);
  // Deletes each key of any type; *deleted counts those that existed.
  Status Del(const std::vector<std::string>& keys, int64_t* deleted, Txn* txn = nullptr);
  // Number of user keys (walks the 'k' range).
  Status DbSize(int64_t* n);
  // Deletes every key in the pool.  quiescent: the caller guarantees that
  // nothing else uses the store meanwhile (StoreQuiescent, commands.h): it
  // is cleared at once, atomically (kv::Store::Clear); else, or when the
  // clear cannot be made (no room for the new file), key by key in batches
  // (not atomic; other clients go on meanwhile).
  Status FlushAll(bool quiescent);
  // User keys >= from in order (at most `count` visited), keeping those that
  // match `pattern` (glob, empty = all); *next = the key to resume at, or
  // nullopt at the end.  RANGE uses it with an upper bound.
  Status ScanKeys(std::string_view from, const std::optional<std::string>& to, size_t count,
                  std::string_view pattern, bool with_values, std::vector<std::string>* out,
                  std::optional<std::string>* next);

  // ---- strings ----
  enum class SetCondition { kAlways, kIfAbsent, kIfPresent };
  // Get: nullopt when absent; WRONGTYPE for a hash or sorted set.
  Status Get(std::string_view key, std::optional<std::string>* value, Txn* txn = nullptr);
  // As Get, but calls fn with the value where it lies in the pool (nullopt
  // when absent) instead of copying it: GET appends it to its reply, one copy
  // where Get makes three (into a string, down over the type tag, into the
  // reply).  The view is valid only during the call; fn must not call the
  // keyspace.  On an error (WRONGTYPE, corruption) fn is not called.
  Status GetView(std::string_view key, const std::function<void(std::optional<std::string_view>)>& fn,
                 Txn* txn = nullptr);
  // SET: *applied false when the condition failed; *old (when asked) is the
  // previous string value.  Replaces a key of any type (as Redis), but with
  // old requested a non-string is WRONGTYPE.
  Status Set(std::string_view key, std::string_view value, SetCondition cond, bool* applied,
             std::optional<std::string>* old = nullptr, Txn* txn = nullptr);
  // One command of a group commit (WriteMany): a plain SET of `value` (no
  // condition, no GET), or with `incr` an INCRBY of `delta` (INCR, DECR,
  // INCRBY, DECRBY), whose new value WriteMany stores in `result`.
  struct GroupWrite {
    std::string_view key;
    std::string_view value;  // SET
    bool incr = false;
    int64_t delta = 0;   // INCRBY
    int64_t result = 0;  // INCRBY: the counter after it (set when applied)
  };
  // Group commit of writes to distinct keys (kv::Store::UpdateMany: one
  // fence for all records): the first *applied took effect, each exactly as
  // Set or IncrBy would, in order.  It stops before the first write that
  // Set or IncrBy must do otherwise or refuse -- a SET onto a sorted set or
  // large hash (whose members it must delete too), an INCRBY of a
  // non-integer, a non-string or past int64, a corrupt head -- and at a full
  // pool; the caller runs the rest through Set or IncrBy, which answer for
  // each.
  Status WriteMany(std::span<GroupWrite> writes, size_t* applied);
  Status GetDel(std::string_view key, std::optional<std::string>* old, Txn* txn = nullptr);
  Status IncrBy(std::string_view key, int64_t delta, int64_t* result, Txn* txn = nullptr);
  Status Append(std::string_view key, std::string_view suffix, int64_t* new_length, Txn* txn = nullptr);
  // Atomic: one WriteBatch.
  Status MSet(const std::vector<std::pair<std::string, std::string>>& pairs, Txn* txn = nullptr);

  // ---- hashes ----
  Status HSet(std::string_view key, const kv::FieldMap& fields, int64_t* added, Txn* txn = nullptr);
  // HGETALL without copying: fn gets every field of hash `key`, name and
  // value where they lie in the pool (nothing when absent), valid only during
  // the call; fn must not call the keyspace.  A large hash or a transaction's
  // read goes through HGet (copies).  WRONGTYPE for another type.
  Status HGetAllView(std::string_view key, const std::function<void(std::span<const kv::FieldView>)>& fn,
                     Txn* txn = nullptr);
  // All fields (names empty) or the named ones; false when the key is absent.
  Status HGet(std::string_view key, const std::vector<std::string>& names, kv::FieldMap* out, bool* found,
              Txn* txn = nullptr);
  Status HDel(std::string_view key, const std::vector<std::string>& names, int64_t* removed, Txn* txn = nullptr);
  Status HLen(std::string_view key, int64_t* n, Txn* txn = nullptr);

  // ---- sorted sets ----
  Status ZAdd(std::string_view key, const std::vector<std::pair<double, std::string>>& members, int64_t* added,
              Txn* txn = nullptr);
  Status ZRem(std::string_view key, const std::vector<std::string>& members, int64_t* removed, Txn* txn = nullptr);
  Status ZScore(std::string_view key, std::string_view member, std::optional<double>* score, Txn* txn = nullptr);
  Status ZCard(std::string_view key, int64_t* n, Txn* txn = nullptr);
  // Members with min <= score <= max (bounds may be exclusive), in score
  // then member order, skipping `offset` and returning at most `count`
  // (negative = all).
  Status ZRangeByScore(std::string_view key, ScoreBound min, ScoreBound max, int64_t offset, int64_t count,
                       std::vector<std::pair<std::string, double>>* out);

  kv::Store& store() { return *store_; }

  // Striped per-key mutexes (see ATOMICITY): holds the stripes of some keys,
  // taken in index order so two holders never deadlock.  Constructed with a
  // Txn it takes nothing (EXEC already holds every key's stripe).
  class KeyLocks {
   public:
    KeyLocks(Keyspace* ks, const std::vector<std::string_view>& keys, const Txn* txn = nullptr);
    ~KeyLocks();
    KeyLocks(const KeyLocks&) = delete;
    KeyLocks& operator=(const KeyLocks&) = delete;

   private:
    Keyspace* ks_;
    std::vector<size_t> idx_;
  };

 private:
  // The head of a user key: its type, and the string value or member count.
  struct Head {
    KeyType type = KeyType::kNone;
    bool large_hash = false;
    std::string value;
    uint64_t card = 0;  // members of a sorted set, fields of a large hash
  };
  Status ReadHead(std::string_view head_key, Head* head, Txn* txn = nullptr);
  // Sets head's type (and a sorted set's or large hash's count) from a head
  // record's tag; Corruption for a record no writer makes.  Not head->value.
  static Status ParseHeadTag(std::string_view rec, Head* head);
  // Adds to *batch the deletes of every member key of a sorted set or large
  // hash (nothing for other types).
  Status DeleteMembers(std::string_view key, const Head& head, kv::WriteBatch* batch, Txn* txn = nullptr);
  // The store or the transaction (txn null: the store, durable on return).
  // A store read sees the newest complete write, visible or not (see
  // VISIBILITY), so a read-modify-write sees what released its lock.
  Result<bool> Read(Txn* txn, std::string_view key, std::string* value) {
    return txn ? txn->Get(key, value) : store_->Get(key, value, {.unpublished = true});
  }
  Status PutKey(Txn* txn, std::string_view key, std::string_view value) {
    return txn ? txn->Put(key, value) : store_->Put(key, value);
  }
  Status Commit(Txn* txn, const kv::WriteBatch& batch) { return txn ? txn->Write(batch) : store_->Write(batch); }
  Status RemoveMembers(std::string_view key, const Head& h, const std::vector<std::string>& names, int64_t* removed,
                       Txn* txn = nullptr);
  Status ReadHash(const std::string& hk, const std::vector<std::string>& names, kv::FieldMap* fields, bool* found,
                  Head* head, Txn* txn);
  Status HSetLarge(std::string_view key, uint64_t card, const kv::FieldMap& convert, const kv::FieldMap& fields,
                   int64_t* added, Txn* txn);

  static constexpr size_t kStripes = 1024;
  // Spin locks: MULTI/EXEC and a large-hash conversion hold many at once,
  // beyond what TSan's deadlock detector tracks for pthread mutexes (64).
  std::array<SpinLock, kStripes> stripes_;

  kv::Store* store_;
};

}  // namespace pmtree::server

#endif  // PMTREE_SERVER_KEYSPACE_H_
