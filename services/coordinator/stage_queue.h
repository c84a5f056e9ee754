// A bounded queue between two stages of the coordinator's pipeline: Push blocks while the
// queue is full (back-pressure on the stage before), Pop blocks while it is empty. Close()
// wakes both sides for good: Push then drops its item and returns false, Pop drains what is
// left and then returns nothing. Any thread may call any method.
#pragma once

#include <algorithm>
#include <cstddef>
#include <deque>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace rlmesh::coordinator {

template <typename T>
class StageQueue {
 public:
  // A capacity below 1 is taken as 1: a stage always has room for one item.
  explicit StageQueue(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}

  // False when the queue was closed before there was room; the item is dropped.
  bool Push(T item) {
    absl::MutexLock lock(&mu_);
    auto room = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return closed_ || items_.size() < capacity_;
    };
    mu_.Await(absl::Condition(&room));
    if (closed_) return false;
    items_.push_back(std::move(item));
    high_water_ = std::max(high_water_, items_.size());
    return true;
  }

  // The oldest item; nothing once the queue is closed and empty.
  std::optional<T> Pop() {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return closed_ || !items_.empty(); };
    mu_.Await(absl::Condition(&ready));
    if (items_.empty()) return std::nullopt;
    T item = std::move(items_.front());
    items_.pop_front();
    return item;
  }

  void Close() {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }

  size_t capacity() const { return capacity_; }
  // The most items the queue ever held at once.
  size_t high_water() const {
    absl::MutexLock lock(&mu_);
    return high_water_;
  }

 private:
  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::deque<T> items_ ABSL_GUARDED_BY(mu_);
  size_t high_water_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace rlmesh::coordinator
