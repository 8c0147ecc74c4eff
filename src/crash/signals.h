// SPDX-License-Identifier: Apache-2.0
//
// Signal handler set-up shared by the explorer's worker (fault positions,
// worker.cc) and the lazy search's read tracker (lazy.cc).

#ifndef PMTREE_CRASH_SIGNALS_H_
#define PMTREE_CRASH_SIGNALS_H_

#include <signal.h>

#include <cstring>

namespace pmtree::crash {

// Installs `fn` as the SA_SIGINFO handler of `sig` with nothing masked; the
// handler it replaces goes to *old unless `old` is null.
inline void InstallSigInfoHandler(int sig, void (*fn)(int, siginfo_t*, void*), struct sigaction* old = nullptr) {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = fn;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, old);
}

}  // namespace pmtree::crash

#endif  // PMTREE_CRASH_SIGNALS_H_
