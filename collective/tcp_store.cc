#include "collective/tcp_store.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace trainyard {

struct TcpStore::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;
};

namespace {

// c10d reports everything by exceptions; a wait that ran out says so.
absl::Status FromException(const std::string& what, const std::exception& e) {
  const std::string message = e.what();
  const std::string first = message.substr(0, message.find('\n'));
  if (absl::StrContains(message, "imeout") || absl::StrContains(message, "imed out")) {
    return absl::DeadlineExceededError(absl::StrCat(what, ": ", first));
  }
  return absl::UnavailableError(absl::StrCat(what, ": ", first));
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpStore>> TcpStore::Create(const std::string& host, uint16_t port, bool is_server,
                                                           int num_workers, absl::Duration timeout) {
  c10d::TCPStoreOptions options;
  options.port = port;
  options.isServer = is_server;
  options.numWorkers = num_workers;
  options.waitWorkers = false;
  options.timeout = absl::ToChronoMilliseconds(timeout);
  std::unique_ptr<TcpStore> store(new TcpStore);
  store->impl_ = std::make_unique<Impl>();
  try {
    store->impl_->store = c10::make_intrusive<c10d::TCPStore>(host, options);
  } catch (const std::exception& e) {
    return FromException(absl::StrCat("TCP store at ", host, ":", port), e);
  }
  return store;
}

TcpStore::~TcpStore() = default;

uint16_t TcpStore::port() const { return impl_->store->getPort(); }

absl::Status TcpStore::Set(const std::string& key, const std::string& value) {
  try {
    impl_->store->set(key, std::vector<uint8_t>(value.begin(), value.end()));
  } catch (const std::exception& e) {
    return FromException("store set " + key, e);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> TcpStore::Get(const std::string& key, absl::Duration timeout) {
  try {
    impl_->store->wait({key}, absl::ToChronoMilliseconds(timeout));
    std::vector<uint8_t> v = impl_->store->get(key);
    return std::string(v.begin(), v.end());
  } catch (const std::exception& e) {
    return FromException("store get " + key, e);
  }
}

absl::StatusOr<int64_t> TcpStore::Add(const std::string& key, int64_t delta) {
  try {
    return impl_->store->add(key, delta);
  } catch (const std::exception& e) {
    return FromException("store add " + key, e);
  }
}

absl::Status TcpStore::Wait(const std::vector<std::string>& keys, absl::Duration timeout) {
  try {
    impl_->store->wait(keys, absl::ToChronoMilliseconds(timeout));
  } catch (const std::exception& e) {
    return FromException("store wait", e);
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> TcpStore::Check(const std::vector<std::string>& keys) {
  try {
    return impl_->store->check(keys);
  } catch (const std::exception& e) {
    return FromException("store check", e);
  }
}

}  // namespace trainyard
